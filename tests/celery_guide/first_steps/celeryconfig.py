# getting-started/first-steps-with-celery.rst: celeryconfig.py
from tests.celery_guide import guide_env

broker_url = guide_env.BROKER_URL  # the guide: 'pyamqp://'
result_backend = "rpc://"

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
timezone = "Europe/Oslo"
enable_utc = True

task_routes = {
    "tasks.add": "low-priority",
}

task_annotations = {"tasks.add": {"rate_limit": "10/m"}}

globals().update(guide_env.SETTINGS)  # Redis: the test's key prefix
