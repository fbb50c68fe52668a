"""Fixtures shared by every test directory."""

from support.gcs import gcs_bucket, gcs_emulator  # noqa: F401 - fixtures
