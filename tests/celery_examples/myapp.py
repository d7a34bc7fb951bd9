"""A one-module app in the style of Celery's ``examples/app/myapp.py``, after the sed.

The broker in the code is RabbitMQ's (kombu's ``//`` spelling) and results go back "by
rpc", as Celery's example has them; the tests point it elsewhere with
``$CELERY_BROKER_URL``, which wins over the code as in Celery. Run as Celery's README says::

    python myapp.py worker -l info

(``MYAPP_WORKER_MAIN=1`` starts it through ``app.worker_main()`` instead of ``app.start()``.)
"""

import os

from potatoq import Celery, current_task, uuid

app = Celery(
    "myapp",
    broker="amqp://guest@localhost//",
    # ## add result backend here if needed.
    backend="rpc",
)


@app.task
def add(x, y):
    return x + y


@app.task
def whoami():
    """The running task's own id and name, read through Celery's ``current_task``."""
    return {"id": current_task.request.id, "name": current_task.name}


def new_id():
    return uuid()


if __name__ == "__main__":
    if os.environ.get("MYAPP_WORKER_MAIN"):
        app.worker_main(argv=["worker", "--loglevel=INFO", "-c", "1"])
    else:
        app.start()
