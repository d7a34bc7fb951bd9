from potatoq import shared_task


@shared_task
def total(amounts):
    return sum(amounts)


@shared_task(queue="celery")
def on_celery_queue(x):
    """Named Celery's default queue explicitly, as migrated code does."""
    return x * 2
