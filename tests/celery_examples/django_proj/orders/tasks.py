from django.conf import settings
from django.contrib.auth.models import User

from potatoq import shared_task


@shared_task
def add(x, y):
    return x + y


@shared_task
def count_users():
    """Reads the project's database: only works in a worker where Django is set up."""
    return User.objects.count()


@shared_task
def time_zone():
    return settings.TIME_ZONE
