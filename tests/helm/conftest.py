"""Fixtures of the chart tests."""

from support.control_plane import control_plane  # noqa: F401 - a fixture
