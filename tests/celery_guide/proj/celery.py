# Celery's examples/next-steps/proj/celery.py, with only `celery` -> `potatoq`
# (and the broker URL taken from the test environment instead of 'amqp://').
from potatoq import Celery
from tests.celery_guide import guide_env

app = Celery(
    "proj",
    broker=guide_env.BROKER_URL,
    backend="rpc://",
    include=[
        "tests.celery_guide.proj.tasks",
        "tests.celery_guide.proj.guide",
        "tests.celery_guide.proj.routes",
    ],
)

# Optional configuration, see the application user guide.
app.conf.update(
    result_expires=3600,
    **guide_env.SETTINGS,
)

if __name__ == "__main__":
    app.start()
