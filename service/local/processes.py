"""Child processes of the local launcher: started so that none is ever left behind.

Each child runs in its own session (so a terminal's Ctrl-C reaches only the launcher, which then
stops the children in order) and asks the kernel to SIGTERM it if the launcher dies, however it
dies (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's own cleanup still stops children


class Child:
    """One child process with its command line, log file and restart count; ``pass_fds`` are
    file descriptors it inherits (every other one is closed in it)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: str,
        env: dict[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ):
        self.name = name
        self.pass_fds = tuple(pass_fds)
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        #: Starts so far, and the start whose exit was last acted on (a launcher restarts a
        #: process once per exit).
        self.starts = 0
        self.exit_seen = 0
        self.started_at = 0.0
        #: Wall-clock (Unix seconds) spans the process ran, one per start; the end of the
        #: current one is None until an exit is seen. The cost estimate prices these.
        self.intervals: list[list[float | None]] = []

    def start(self) -> None:
        """Starts (or restarts) the process, appending its output to the log file."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
                pass_fds=self.pass_fds,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        finally:
            log.close()
        self.started_at = time.monotonic()
        self.starts += 1
        self.intervals.append([time.time(), None])

    def poll(self) -> int | None:
        """The exit code, or None while running (or never started)."""
        code = None if self.proc is None else self.proc.poll()
        if code is not None:
            self._note_exit()
        return code

    def _note_exit(self) -> None:
        if self.intervals and self.intervals[-1][1] is None:
            self.intervals[-1][1] = time.time()

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """Sends a signal if the process is alive."""
        if self.running:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass


def stop_all(
    children: Sequence[Child], signum: int = signal.SIGTERM, timeout: float = 10.0
) -> None:
    """Signals every live child, waits up to ``timeout`` seconds, then kills what is left."""
    for child in children:
        child.signal(signum)
    deadline = time.monotonic() + timeout
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()
        child.poll()  # records when it ended


def python_module(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def child_env() -> dict[str, str]:
    """The environment for children: ours, with TensorFlow's C++ log noise turned down."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
