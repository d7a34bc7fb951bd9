from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)


class Event(models.Model):
    """One line per task run, so tests can see what ran (and that it saw committed rows)."""

    name = models.CharField(max_length=100)
    order = models.ForeignKey(Order, null=True, on_delete=models.SET_NULL)
