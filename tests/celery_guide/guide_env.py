"""What the guide's example apps read from their environment: the test broker.

The guide hard-codes ``broker='amqp://'``; the examples here take the broker from
``$POTATOQ_BROKER_URL`` (a temp SQLite file or Redis db 15) and, on Redis, the key prefix
that isolates one test run from another. Nothing else in the examples changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BROKER_URL: str | None = os.environ.get("POTATOQ_BROKER_URL")
SETTINGS: dict[str, Any] = json.loads(os.environ.get("POTATOQ_GUIDE_SETTINGS") or "{}")


def out_dir() -> Path:
    """Where tasks leave evidence for the tests (the world's temp dir)."""
    return Path(os.environ["POTATOQ_GUIDE_DIR"])
