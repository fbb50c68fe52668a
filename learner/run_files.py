"""Files a learner writes into its run directory: status, metrics log and summary; and the count
of its writes that failed.

A full disk (or a volume gone read-only) must not crash the learner: training matters more than
its records, and a learner that crashed on it would crash again at each restart on the same
volume. Each failed write is logged and counted (:class:`WriteFailures`, reported in the status
and as ``seedrl_learner_write_failures_total``) and the next one tries again; nothing already
written is damaged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from seedrl.common import finite_json
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.files import replace_file

log = logging.getLogger(__name__)

#: While writes keep failing, one warning per file this often (a full disk fails every write).
WARN_EVERY_S = 60.0


class WriteFailures:
    """Failed writes of the learner's files, counted by file (``status.json``,
    ``tensorboard``, ...). The first failure of a file is logged as an error, later ones once a
    minute while they go on, and the first success after them says the file is written again.

    Args:
      clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        #: Failed writes so far, by file.
        self.counts: dict[str, int] = {}
        self._clock = clock
        self._last_warning: dict[str, float] = {}

    @property
    def total(self) -> int:
        """Failed writes of every file together."""
        return sum(self.counts.values())

    def failed(self, what: str, exc: BaseException) -> None:
        """Counts and (now and then) logs one failed write of ``what``."""
        self.counts[what] = self.counts.get(what, 0) + 1
        now = self._clock()
        last = self._last_warning.get(what)
        if last is None or now - last >= WARN_EVERY_S:
            self._last_warning[what] = now
            log.error(
                "could not write %s (%d failed so far), training goes on: %s",
                what,
                self.counts[what],
                exc,
            )

    def succeeded(self, what: str) -> None:
        """Notes a write of ``what`` that worked (logged when it ends a run of failures)."""
        if self._last_warning.pop(what, None) is not None:
            log.warning("%s is written again (%d writes had failed)", what, self.counts[what])


def write_json_atomic(path: str, data: dict) -> None:
    """Writes JSON through a temporary file and a rename, so readers never see half a file;
    non-finite numbers are written as null (see ``seedrl.common.finite_json``).

    Raises:
      OSError: it could not be written; the previous file is as it was.
    """
    replace_file(path, finite_json.dumps(data, indent=1, sort_keys=True).encode())


def append_line(path: str, line: str) -> None:
    """Appends one line to a text file whole, or not at all: a write that fails half-way (a
    full disk) is cut back off, so the file never holds a partial line.

    Raises:
      OSError: it could not be appended; the file is as it was.
    """
    data = (line + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class RunFiles:
    """``status.json`` (latest snapshot), ``metrics.jsonl`` (history) and ``summary.json``.

    Every write is best effort: one that fails is counted in ``failures`` and logged, never
    raised.
    """

    def __init__(self, run_dir: str, failures: WriteFailures | None = None):
        self.run_dir = run_dir
        self.failures = failures or WriteFailures()
        self.status_path = os.path.join(run_dir, "status.json")
        self.metrics_path = os.path.join(run_dir, "metrics.jsonl")
        self.summary_path = os.path.join(run_dir, "summary.json")
        self._guarded("run directory", lambda: os.makedirs(run_dir, exist_ok=True))

    def _guarded(self, what: str, write: Callable[[], None]) -> bool:
        try:
            write()
        except OSError as exc:
            self.failures.failed(what, exc)
            return False
        self.failures.succeeded(what)
        return True

    def write_status(self, status: LearnerStatus) -> bool:
        """Replaces the status snapshot; returns whether it was written."""
        data = {**status.to_json(), "time": time.time()}
        return self._guarded("status.json", lambda: write_json_atomic(self.status_path, data))

    def append_metrics(self, status: LearnerStatus) -> bool:
        """Appends one line to the metrics log; returns whether it was written."""
        line = finite_json.dumps({**status.to_json(), "time": time.time()}, sort_keys=True)
        return self._guarded("metrics.jsonl", lambda: append_line(self.metrics_path, line))

    def write_summary(self, summary: dict) -> bool:
        """Writes the final summary of the run; returns whether it was written."""
        return self._guarded("summary.json", lambda: write_json_atomic(self.summary_path, summary))
