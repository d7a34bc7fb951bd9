# userguide/periodic-tasks.rst, "Entries", with only `celery` -> `potatoq`.
# Adapted: the broker comes from the test environment, and the intervals are divided by
# ten (1 s instead of 10 s, 3 s instead of 30 s) so the test sees several runs.
from datetime import timedelta

from potatoq import Celery
from potatoq.schedules import crontab
from tests.celery_guide import guide_env

app = Celery(broker=guide_env.BROKER_URL, backend="rpc://")
app.conf.update(guide_env.SETTINGS)


@app.on_after_configure.connect
def setup_periodic_tasks(sender: Celery, **kwargs):
    # Calls test('hello') every 10 seconds.
    sender.add_periodic_task(1.0, test.s("hello"), name="add every 10")

    # Calls test('hello') every 30 seconds.
    # It uses the same signature of previous task, an explicit name is
    # defined to avoid this task replacing the previous one defined.
    sender.add_periodic_task(3.0, test.s("hello"), name="add every 30")

    # Calls test('world') every 30 seconds
    sender.add_periodic_task(3.0, test.s("world"), expires=10)

    # Executes every Monday morning at 7:30 a.m.
    sender.add_periodic_task(
        crontab(hour=7, minute=30, day_of_week=1),
        test.s("Happy Mondays!"),
    )


@app.task
def test(arg):
    print(arg)


@app.task
def add(x, y):
    z = x + y
    print(z)


app.conf.beat_schedule = {
    "add-every-30-seconds": {"task": "tests.celery_guide.beat_app.add", "schedule": 3.0, "args": (16, 16)},
    "add-every-timedelta": {
        "task": "tests.celery_guide.beat_app.add",
        "schedule": timedelta(seconds=1),
        "args": (1, 1),
    },
    # Executes every Monday morning at 7:30 a.m.
    "add-every-monday-morning": {
        "task": "tests.celery_guide.beat_app.add",
        "schedule": crontab(hour=7, minute=30, day_of_week=1),
        "args": (16, 16),
    },
}
app.conf.timezone = "UTC"
