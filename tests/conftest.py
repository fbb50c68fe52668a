"""Fixtures shared by every test directory."""

from pathlib import Path

import pytest

from support.full_disk import full_volume  # noqa: F401 - a fixture
from support.gcs import gcs_bucket, gcs_emulator  # noqa: F401 - fixtures
from support.trained_runs import trained_runs  # noqa: F401 - fixture


E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config, items):
    """Marks every test under tests/e2e/ with ``e2e`` (`make test-unit` leaves them out)."""
    for item in items:
        if Path(item.path).resolve().is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
