"""The real control plane for the tests of this directory (``make control-plane`` builds it)."""

from pathlib import Path

import pytest

from support.control_plane import control_plane  # noqa: F401 - a fixture

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Marks every test of this directory with ``cluster``."""
    for item in items:
        if Path(item.path).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Adds the control plane's logs to the report of a test that failed with it running."""
    report = yield
    plane = item.funcargs.get("control_plane") if hasattr(item, "funcargs") else None
    if report.failed and plane is not None:
        report.sections.append(("control plane logs", plane.logs()))
    return report
