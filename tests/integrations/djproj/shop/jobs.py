"""django.tasks tasks of the test project (Django 6 only; run by potatoq's backend)."""

import asyncio

from django.tasks import task

from .models import Event


@task(queue_name="reports", priority=-10)
def low(n: int) -> int:
    Event.objects.create(name=f"low:{n}")
    return n


@task(queue_name="reports", priority=50)
def high(n: int) -> int:
    Event.objects.create(name=f"high:{n}")
    return n * 10


@task(queue_name="reports")
async def async_double(x: int) -> int:
    await asyncio.sleep(0)
    return x * 2


@task(takes_context=True)
def attempt(context) -> int:  # noqa: ANN001 - Django's TaskContext
    return context.attempt


@task
def boom() -> None:
    raise ValueError("boom")


@task
def later() -> str:
    return "later"
