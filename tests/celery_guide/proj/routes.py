"""Tasks and routers from userguide/routing.rst. The guide's tasks live in packages named
``feed.tasks``, ``web.tasks`` …; here they are given those names explicitly."""

import os

from .celery import app


def _where(self):
    return [self.name, self.request.delivery_info["queue"], os.getpid()]


@app.task(bind=True, name="feed.tasks.import_feed")
def import_feed(self, url=None):
    return _where(self)


@app.task(bind=True, name="web.tasks.render")
def render(self):
    return _where(self)


@app.task(bind=True, name="video.tasks.encode")
def encode(self):
    return _where(self)


@app.task(bind=True, name="image.tasks.resize")
def resize(self):
    return _where(self)


@app.task(bind=True, name="myapp.tasks.compress_video")
def compress_video(self):
    return _where(self)


@app.task(bind=True, name="tasks.elsewhere")
def elsewhere(self):
    return _where(self)


def route_task(name, args, kwargs, options, task=None, **kw):
    if name == "myapp.tasks.compress_video":
        return {"queue": "video", "routing_key": "video.compress"}
