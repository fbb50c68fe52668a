"""Fixtures shared by every test directory."""

from pathlib import Path

import pytest

import seedrl.common

from support.full_disk import full_volume  # noqa: F401 - a fixture
from support.gcs import gcs_bucket, gcs_emulator  # noqa: F401 - fixtures
from support.trained_runs import trained_runs  # noqa: F401 - fixture


E2E = Path(__file__).resolve().parent / "e2e"
ROOT = E2E.parents[1]
PACKAGE_DIRS = ("common", "learner", "actors", "service", "policy")


def pytest_sessionstart(session):
    """Stops at once where the strict editable install lacks a module of ours.

    ``make install`` links each file into build/__editable__.*; a module added since is not
    importable until it is relinked, and would fail its tests with a misleading ImportError.
    """
    links = Path(seedrl.common.__file__).parents[1]
    if not links.parent.name.startswith("__editable__"):
        return  # a wheel or another layout: nothing to compare
    missing = sorted(
        str(path.relative_to(ROOT))
        for top in PACKAGE_DIRS
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts and not (links / path.relative_to(ROOT)).exists()
    )
    if missing:
        pytest.exit(
            f"the editable install lacks {', '.join(missing)}: run `make install` to relink",
            returncode=4,
        )


def pytest_collection_modifyitems(config, items):
    """Marks every test under tests/e2e/ with ``e2e`` (`make test-unit` leaves them out)."""
    for item in items:
        if Path(item.path).resolve().is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
