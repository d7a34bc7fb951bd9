"""``potatoq.utils.package_files.files``: a package's shipped files (SQL, Lua) are found in
its directory on disk without importlib.resources, and still through it when the package
was imported from a zip archive."""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from potatoq.utils.package_files import files


@pytest.fixture
def zipped_package(tmp_path: Path) -> Iterator[str]:
    """A package ``pqzipped`` importable only from a zip archive, holding ``sql/one.sql``."""
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("pqzipped/__init__.py", "")
        bundle.writestr("pqzipped/sql/one.sql", "-- name: one\nSELECT 1;\n")
    sys.path.insert(0, str(archive))
    try:
        yield "pqzipped"
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop("pqzipped", None)


def test_a_package_on_disk_is_its_directory() -> None:
    folder = files("potatoq.brokers.sqlite")
    assert isinstance(folder, Path)
    assert folder == Path(sys.modules["potatoq.brokers.sqlite"].__file__ or "").parent
    assert "-- name:" in folder.joinpath("sql", "jobs.sql").read_text(encoding="utf-8")
    assert any(entry.name == "0001_initial.sql" for entry in folder.joinpath("sql", "migrations").iterdir())


def test_a_package_in_a_zip_archive_is_read_through_importlib_resources(zipped_package: str) -> None:
    folder = files(zipped_package)
    assert not isinstance(folder, Path)
    sql = folder.joinpath("sql")
    assert sql.joinpath("one.sql").read_text(encoding="utf-8") == "-- name: one\nSELECT 1;\n"
    assert [entry.name for entry in sql.iterdir()] == ["one.sql"]
