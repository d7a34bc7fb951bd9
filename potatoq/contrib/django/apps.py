"""The Django app config: everything happens in ``ready()``."""

from __future__ import annotations

from django.apps import AppConfig


class PotatoqConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "potatoq.contrib.django"
    label = "potatoq"
    verbose_name = "potatoq"
    default = True

    def ready(self) -> None:
        from . import checks, setup

        setup.configure(self)
        checks.register()
