"""Tasks from the guide's calling, canvas and tasks pages, as the guide writes them.

Adaptations, each needed only because the guide's example talks to something that isn't
here: files go to the test's temp dir instead of ``/var/errors``, the "Twitter" and HTTP
clients are small fakes that fail on cue, and sleeps are shorter.
"""

import os
import time

from potatoq import Task
from potatoq.exceptions import Ignore, Reject
from potatoq.result import allow_join_result
from potatoq.utils.log import get_task_logger
from tests.celery_guide import guide_env

from .celery import app

logger = get_task_logger(__name__)


def _evidence(name, text):
    """Append a line to a file in the test's directory (the guide prints or writes files)."""
    with open(os.path.join(guide_env.out_dir(), name), "a") as fh:
        print(text, file=fh)


# --------------------------------------------------------------------------- calling.rst


@app.task
def error_handler(request, exc, traceback):
    print(f"Task {request.id} raised exception: {exc!r}\n{traceback!r}")
    _evidence("errors-" + request.id, "{0!r}|{1}".format(exc, "Traceback" in traceback))


@app.task
def on_error(task_id):
    with allow_join_result():
        result = app.AsyncResult(task_id)
        exc = result.get(propagate=False)
        print(f"Task {task_id} raised exception: {exc!r}")
        _evidence("on_error-" + task_id, repr(exc))


@app.task
def other_task(value):
    _evidence("other_task", repr(value))
    return value


@app.task(bind=True)
def hello(self, a, b):
    time.sleep(0.3)
    self.update_state(state="PROGRESS", meta={"progress": 50})
    time.sleep(0.3)
    self.update_state(state="PROGRESS", meta={"progress": 90})
    time.sleep(0.3)
    return "hello world: %i" % (a + b)


# --------------------------------------------------------------------------- canvas.rst


@app.task
def tsum(numbers):
    return sum(numbers)


@app.task
def subtract(x, y):
    return x - y


@app.task
def log_result(value):
    _evidence("log_result", repr(value))
    return value


@app.task
def log_error(request, exc, traceback):
    with open(os.path.join(guide_env.out_dir(), request.id), "a") as fh:
        print(f"--\n\n{request.id} {exc} {traceback}", file=fh)


@app.task
def reset_buffers(*args):
    _evidence("reset_buffers", repr(args))
    return "reset"


@app.task
def raising_task(*args):
    raise ValueError("something something")


@app.task
def fail():
    raise KeyError("fail")


@app.task
def on_chord_error(request, exc, traceback):
    print(f"Task {request.id!r} raised error: {exc!r}")
    _evidence("chord_error", f"{request.id}|{exc!r}")


@app.task
def create_user(username, first, last, email):
    return {"username": username, "name": first + " " + last, "email": email}


@app.task
def import_contacts(user):
    return "imported contacts of " + user["username"]


@app.task
def send_welcome_email(user):
    return "welcome sent to " + user["email"]


@app.task
def upload_document(file):
    return "document:" + file


@app.task
def apply_filter(document, filter):
    return filter + "(" + document + ")"


@app.task
def import_contact(contact):
    return contact.upper()


@app.task
def notify_complete(import_id):
    _evidence("notify_complete", import_id)
    return f"import {import_id} complete"


# --------------------------------------------------------------------------- tasks.rst


class FailWhaleError(Exception):
    pass


class Twitter:
    """A stand-in for the guide's Twitter client: the first ``fail`` calls raise."""

    FailWhaleError = FailWhaleError

    class LoginError(Exception):
        pass

    def __init__(self, oauth):
        self.oauth = oauth

    def update_status(self, tweet):
        path = os.path.join(guide_env.out_dir(), "tweets-" + tweet)
        tries = len(open(path).read().split()) if os.path.exists(path) else 0
        _evidence("tweets-" + tweet, str(tries))
        if tries < int(self.oauth):
            raise self.FailWhaleError("fail whale #%d" % tries)
        return tries


@app.task(bind=True)
def send_twitter_status(self, oauth, tweet):
    try:
        twitter = Twitter(oauth)
        twitter.update_status(tweet)
    except (Twitter.FailWhaleError, Twitter.LoginError) as exc:
        raise self.retry(exc=exc)
    return self.request.retries


def something_raising():
    raise OSError("something")


@app.task(bind=True, default_retry_delay=30 * 60)  # retry in 30 minutes.
def retry_in_a_minute(self, x, y):
    try:
        something_raising()
    except Exception as exc:
        # overrides the default delay to retry after 1 minute
        raise self.retry(exc=exc, countdown=60)


@app.task(bind=True, default_retry_delay=30 * 60)
def retry_in_30_minutes(self):
    try:
        something_raising()
    except Exception as exc:
        raise self.retry(exc=exc)


@app.task(
    bind=True, autoretry_for=(FailWhaleError,), retry_kwargs={"max_retries": 5}, default_retry_delay=0.05
)
def refresh_timeline(self, user):
    _evidence("timeline-" + user, str(self.request.retries))
    raise FailWhaleError(user)


class BaseTaskWithRetry(Task):
    autoretry_for = (TypeError,)
    max_retries = 5
    retry_backoff = True
    retry_backoff_max = 700
    retry_jitter = False


@app.task(bind=True, base=BaseTaskWithRetry)
def flaky(self, key, failures):
    _evidence("flaky-" + key, f"{self.request.retries} {time.time()} {self.request.eta}")
    if self.request.retries < failures:
        raise TypeError("flaky #%d" % self.request.retries)
    return self.request.retries


@app.task(bind=True)
def no_retry_limit_given(self):
    # max_retries isn't set: Celery's default is 3
    raise self.retry(exc=OSError("down"), countdown=0.05)


class HttpNotFound(Exception):
    pass


@app.task(throws=(KeyError, HttpNotFound))
def get_foo():
    raise HttpNotFound("/foo")


@app.task(bind=True)
def upload_files(self, filenames):
    for i, file in enumerate(filenames):
        if not self.request.called_directly:
            self.update_state(state="PROGRESS", meta={"current": i, "total": len(filenames)})
            time.sleep(0.2)
    return len(filenames)


REVOKED = {"revoked-by-hand"}


@app.task(bind=True)
def some_task(self):
    if self.request.id in REVOKED:
        raise Ignore()
    return "ran"


@app.task(bind=True)
def get_tweets(self, user):
    timeline = ["tweet of " + user]
    if not self.request.called_directly:
        from potatoq import states

        self.update_state(state=states.SUCCESS, meta=timeline)
    raise Ignore()


@app.task(bind=True, acks_late=True)
def render_scene(self, path):
    try:
        raise MemoryError(path)
    except MemoryError as exc:
        raise Reject(exc, requeue=False)


@app.task(bind=True, acks_late=True)
def requeues(self):
    if not self.request.delivery_info["redelivered"]:
        raise Reject("no reason", requeue=True)
    print("received two times")
    return "received two times"


@app.task(bind=True)
def dump_context(self, x, y):
    print(f"Executing task id {self.request.id}, args: {self.request.args!r} kwargs: {self.request.kwargs!r}")
    return [self.request.id, list(self.request.args), self.request.kwargs]


@app.task(bind=True)
def logged_add(self, x, y):
    logger.info(self.request.id)
    logger.info(f"Adding {x} + {y}")
    return x + y


class MyTask(Task):
    def before_start(self, task_id, args, kwargs):
        print(f"Task {task_id} starting with args {args}")

    def on_success(self, retval, task_id, args, kwargs):
        print(f"Task {task_id} succeeded with result: {retval}")

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        print(f"Task {task_id} failed: {exc!r}")

    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        print(f"Task {task_id} finished with status: {status}")


@app.task(base=MyTask)
def my_task(x, y):
    return x + y


@app.task(base=MyTask)
def my_failing_task():
    raise KeyError()


class DatabaseTask(Task):
    _db = None

    @property
    def db(self):
        if self._db is None:
            self._db = {"connection": os.getpid(), "opened_at": time.time()}
        return self._db


@app.task(base=DatabaseTask, bind=True)
def process_rows(self):
    return [self.db["connection"], self.db["opened_at"]]


class NaiveAuthenticateServer(Task):
    name = "proj.naive_authenticate_server"

    def __init__(self):
        self.users = {"george": "password"}

    def run(self, username, password):
        try:
            return self.users[username] == password
        except KeyError:
            return False


app.register_task(NaiveAuthenticateServer())


@app.task
def mytask(x, y):
    return x + y


@app.task
def fetch_page(url):
    return "<html>" + url + "</html>"


@app.task
def parse_page(page):
    return {"length": len(page)}


@app.task(ignore_result=True)
def store_page_info(info, url):
    _evidence("page_info", "{0} {1}".format(url, info["length"]))


@app.task
def update_page_info(url):
    # fetch_page -> parse_page -> store_page
    chain = fetch_page.s(url) | parse_page.s() | store_page_info.s(url)
    chain()


@app.task
def update_page_info_bad(url):
    page = fetch_page.delay(url).get()
    return page


@app.task
def update_page_info_sync(url):
    page = fetch_page.delay(url).get(disable_sync_subtasks=False)
    info = parse_page.delay(page).get(disable_sync_subtasks=False)
    return info


@app.task(rate_limit="2/s")
def limited(label):
    return [os.getpid(), time.time()]


@app.task(typing=False)
def add_untyped(x, y):
    return x + y


@app.task(track_started=True)
def slow_started(seconds):
    time.sleep(seconds)
    return seconds


@app.task
def add_debug(x, y, debug=False):
    """The guide's ``add.s(2, 2, debug=True)``: an ``add`` that takes ``debug``."""
    return [x + y, debug]


@app.task
def annotated_limited(label):
    """Rate-limited only through ``task_annotations`` (set in the worker's settings)."""
    return [os.getpid(), time.time()]


# --------------------------------------------------------------------------- tasks.rst: pydantic

from pydantic import BaseModel, Field, ValidationInfo, field_validator  # noqa: E402


class ArgModel(BaseModel):
    value: int


class ReturnModel(BaseModel):
    value: str


@app.task(pydantic=True)
def x(arg: ArgModel) -> ReturnModel:
    # args/kwargs type hinted as Pydantic model will be converted
    assert isinstance(arg, ArgModel)

    # The returned model will be converted to a dict automatically
    return ReturnModel(value=f"example: {arg.value}")


@app.task(pydantic=True, pydantic_strict=True)
def strict_x(arg: ArgModel) -> ReturnModel:
    return ReturnModel(value=f"strict: {arg.value}")


class Scaled(BaseModel):
    value: int

    @field_validator("value")
    @classmethod
    def scale(cls, value: int, info: ValidationInfo) -> int:
        context = info.context or {}
        assert context["potatoq_task_name"] == "tests.celery_guide.proj.guide.scaled"
        return value * context["factor"]


class Aliased(BaseModel):
    total: int = Field(serialization_alias="Total")
    note: str | None = None


@app.task(
    bind=True,
    pydantic=True,
    pydantic_context={"factor": 10},
    pydantic_dump_kwargs={"by_alias": True, "exclude_none": True},
)
def scaled(self, arg: Scaled, extra: ArgModel | None = None) -> Aliased:
    return Aliased(total=arg.value + (extra.value if extra else 0))
