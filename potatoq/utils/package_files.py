"""The files shipped inside potatoq's packages (SQL, Lua), found without importlib.resources.

``importlib.resources.files()`` imports ``zipfile`` and ``tempfile`` with it: about 1.8 MB
of memory in a process that imports nothing else of theirs, paid by each process of a
worker (issue 27's footprint; docs/benchmarks.md, "Worker footprint"). In every ordinary
install the files sit on disk in the package's directory, so they are read from there;
only a package imported from elsewhere (a zip archive) goes through importlib.resources.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def files(package: str) -> Traversable:
    """What ``importlib.resources.files(package)`` returns: the package's directory as a
    :class:`~pathlib.Path` when it is one on disk."""
    module = importlib.import_module(package)  # imported already: a dictionary lookup
    for entry in getattr(module, "__path__", ()):
        if os.path.isdir(entry):
            return Path(entry)
    from importlib import resources  # a package in a zip archive

    return resources.files(package)
