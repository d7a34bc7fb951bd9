# getting-started/first-steps-with-celery.rst: tasks.py, with only `celery` -> `potatoq`
# (the broker comes from the test environment instead of 'pyamqp://guest@localhost//').
from potatoq import Celery
from tests.celery_guide import guide_env

app = Celery("tasks", backend="rpc://", broker=guide_env.BROKER_URL)
app.config_from_object("celeryconfig")


@app.task
def add(x, y):
    return x + y
