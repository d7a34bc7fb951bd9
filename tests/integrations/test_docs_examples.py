"""The runnable examples of docs/integrations/*.md: every block after ``<!-- tested -->``
runs, in order, in one namespace per page, in a temporary directory. (The Django page's
example is the test project, tests/integrations/djproj, which test_django.py runs.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs" / "integrations"
BLOCK = re.compile(r"<!-- tested -->\s*```python\n(.*?)```", re.S)
PAGES = {"sqlalchemy": "sqlalchemy", "flask": "flask", "fastapi": "fastapi"}


def runnable_blocks(page: str) -> list[str]:
    return BLOCK.findall((DOCS / f"{page}.md").read_text())


@pytest.mark.parametrize("page", sorted(PAGES))
def test_docs_example_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(PAGES[page])
    blocks = runnable_blocks(page)
    assert blocks, f"docs/integrations/{page}.md has no tested example"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    try:
        for block in blocks:
            # dont_inherit: not this file's "from __future__ import annotations" (the example has none)
            exec(compile(block, f"docs/integrations/{page}.md", "exec", dont_inherit=True), namespace)
    finally:
        app = namespace.get("app")
        close = getattr(app, "close", None)
        if callable(close):
            close()
