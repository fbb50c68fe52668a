"""A directory on a volume with no space left: a small tmpfs, filled up.

Writes there fail as on a full disk (``ENOSPC``: TensorFlow's ``ResourceExhaustedError``).
Mounting needs root with ``CAP_SYS_ADMIN``; where that is missing the tests using it are skipped
(tests/learner/test_app.py also makes writes fail with ``RLIMIT_FSIZE``, which needs nothing).
"""

from __future__ import annotations

import os
import subprocess

import pytest


class FullVolume:
    """A mounted tmpfs at :attr:`path`, filled by one file that :meth:`free` deletes."""

    def __init__(self, path):
        self.path = path
        self.filler = os.path.join(path, ".filler")

    def fill(self) -> None:
        """Takes every free byte left."""
        with open(self.filler, "ab", buffering=0) as fh:
            chunk = b"\0" * 4096
            try:
                while fh.write(chunk):
                    pass
            except OSError:
                pass  # no space left: what it is for

    def free(self) -> None:
        """Gives the space back."""
        os.remove(self.filler)


@pytest.fixture
def full_volume(tmp_path):
    """Yields a :class:`FullVolume` of 1 MiB, already full; unmounted afterwards."""
    path = tmp_path / "full"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    volume = FullVolume(str(path))
    try:
        volume.fill()
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
