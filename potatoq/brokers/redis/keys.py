"""The Redis broker's key names: one prefix, a fixed suffix per kind (the layout is in the
package docstring)."""

from __future__ import annotations

import os
import threading


class Keys:
    """Key names under one prefix (the layout is documented in the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.rstrip(":") + ":"

    def ready(self, queue: str) -> str:
        return f"{self.prefix}q:{queue}:ready"

    def delayed(self, queue: str) -> str:
        return f"{self.prefix}q:{queue}:delayed"

    def active(self, queue: str) -> str:
        return f"{self.prefix}q:{queue}:active"

    def marker(self, queue: str) -> str:
        return f"{self.prefix}q:{queue}:marker"

    def job(self, task_id: str) -> str:
        return f"{self.prefix}job:{task_id}"

    def result(self, task_id: str) -> str:
        return f"{self.prefix}result:{task_id}"

    def waiting(self, task_id: str) -> str:
        return f"{self.prefix}waiting:{task_id}"

    def notify(self, task_id: str) -> str:
        return f"{self.prefix}notify:{task_id}"

    def chord(self, group_id: str) -> str:
        return f"{self.prefix}chord:{group_id}"

    def wake(self, instance: str) -> str:
        return f"{self.prefix}wake:{os.getpid()}:{instance}:{threading.get_ident()}"

    @property
    def dead(self) -> str:
        return f"{self.prefix}dead"

    @property
    def dead_payload(self) -> str:
        return f"{self.prefix}dead:payload"

    @property
    def dead_info(self) -> str:
        return f"{self.prefix}dead:info"

    @property
    def workers(self) -> str:
        return f"{self.prefix}workers"

    @property
    def workers_seen(self) -> str:
        return f"{self.prefix}workers:seen"

    @property
    def queues(self) -> str:
        return f"{self.prefix}queues"

    @property
    def paused(self) -> str:
        return f"{self.prefix}paused"

    @property
    def history(self) -> str:
        """STREAM of task-history records (issue 31), capped by the retention setting."""
        return f"{self.prefix}history"

    @property
    def periodic_last(self) -> str:
        # Can't equal a periodic:<name>:<ms> key: those have two more colons.
        return f"{self.prefix}periodic:last"
