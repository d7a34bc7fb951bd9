"""Tasks of the test project: autodiscovered by potatoq.contrib.django."""

from potatoq import shared_task

from .models import Event, Order


@shared_task
def mark_paid(order_id: int) -> str:
    # Runs only if the order it was sent with was committed: the row must exist.
    order = Order.objects.get(pk=order_id)
    order.paid = True
    order.save()
    Event.objects.create(name="mark_paid", order=order)
    return order.item


@shared_task(enqueue_on_commit=False)
def audit(text: str) -> str:
    Event.objects.create(name=f"audit:{text}")
    return text
