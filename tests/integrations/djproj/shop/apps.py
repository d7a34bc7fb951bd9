import os

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self) -> None:
        log = os.environ.get("DJPROJ_SIGNAL_LOG")
        if log:
            from django.tasks.signals import task_enqueued, task_finished, task_started

            def record(signal_name: str):  # noqa: ANN202
                def receiver(sender, task_result, **kwargs) -> None:  # noqa: ANN001
                    with open(log, "a") as f:
                        f.write(f"{os.getpid()} {signal_name} {task_result.task.name} {task_result.status}\n")

                return receiver

            self._receivers = [record(n) for n in ("enqueued", "started", "finished")]
            task_enqueued.connect(self._receivers[0])
            task_started.connect(self._receivers[1])
            task_finished.connect(self._receivers[2])
