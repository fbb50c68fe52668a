"""Files a learner writes into its run directory: status, metrics log and summary."""

from __future__ import annotations

import os
import time

from seedrl.common import finite_json
from seedrl.common.learner_status import LearnerStatus


def write_json_atomic(path: str, data: dict) -> None:
    """Writes JSON through a temporary file and a rename, so readers never see half a file;
    non-finite numbers are written as null (see ``seedrl.common.finite_json``)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        finite_json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


class RunFiles:
    """``status.json`` (latest snapshot), ``metrics.jsonl`` (history) and ``summary.json``."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        self.status_path = os.path.join(run_dir, "status.json")
        self.metrics_path = os.path.join(run_dir, "metrics.jsonl")
        self.summary_path = os.path.join(run_dir, "summary.json")

    def write_status(self, status: LearnerStatus) -> None:
        """Replaces the status snapshot."""
        write_json_atomic(self.status_path, {**status.to_json(), "time": time.time()})

    def append_metrics(self, status: LearnerStatus) -> None:
        """Appends one line to the metrics log."""
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(
                finite_json.dumps({**status.to_json(), "time": time.time()}, sort_keys=True) + "\n"
            )

    def write_summary(self, summary: dict) -> None:
        """Writes the final summary of the run."""
        write_json_atomic(self.summary_path, summary)
