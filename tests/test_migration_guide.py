"""docs/migrating-from-celery.md stays complete: every ignored Celery setting is explained."""

from __future__ import annotations

from pathlib import Path

from potatoq.config import IGNORED

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "migrating-from-celery.md"


def test_every_ignored_setting_is_in_the_migration_guide():
    text = GUIDE.read_text()
    assert sorted(name for name in IGNORED if f"`{name}`" not in text) == []


def test_the_guide_keeps_the_section_for_skipped_celery_examples():
    assert "## Examples from Celery's guide that don't apply" in GUIDE.read_text()
