"""The learner's run files on a full disk: each failed write is counted, never raised, and what
was written before stays whole (learner/run_files.py)."""

import json
import os

from seedrl.common.learner_status import LearnerStatus
from seedrl.learner.run_files import RunFiles, WriteFailures


def _status(steps):
    # Metrics enough that one line of metrics.jsonl spans more than a page of the disk.
    metrics = {f"loss/term_{i}": float(i) for i in range(300)}
    return LearnerStatus(state="running", env_steps=steps, metrics=metrics)


def test_a_full_disk_is_counted_and_leaves_the_files_whole(full_volume):
    full_volume.free()
    run_dir = os.path.join(full_volume.path, "run")
    failures = WriteFailures()
    files = RunFiles(run_dir, failures)
    assert files.write_status(_status(10)) and files.append_metrics(_status(10))
    full_volume.fill()
    assert not files.write_status(_status(20))
    assert not files.append_metrics(_status(20))
    assert not files.write_summary({"env_steps": 20})
    assert failures.counts == {"status.json": 1, "metrics.jsonl": 1, "summary.json": 1}
    # The snapshot is the last one written, and the log holds whole lines only.
    with open(files.status_path) as fh:
        assert LearnerStatus.from_json(fh.read()).env_steps == 10
    with open(files.metrics_path) as fh:
        assert [json.loads(line)["env_steps"] for line in fh] == [10]
    assert sorted(os.listdir(run_dir)) == ["metrics.jsonl", "status.json"]  # no temporaries
    full_volume.free()
    assert files.write_status(_status(30)) and files.append_metrics(_status(30))
    with open(files.metrics_path) as fh:
        assert [json.loads(line)["env_steps"] for line in fh] == [10, 30]
    assert failures.total == 3


def test_failures_are_logged_once_a_minute_while_they_go_on_and_the_recovery_once(caplog):
    now = [0.0]
    failures = WriteFailures(clock=lambda: now[0])
    for t in (0.0, 1.0, 59.0, 60.0):
        now[0] = t
        failures.failed("status.json", OSError(28, "No space left on device"))
    failures.succeeded("status.json")
    failures.succeeded("status.json")
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if m.startswith("could not write status.json")]) == 2
    assert messages[-1] == "status.json is written again (4 writes had failed)"
    assert failures.counts == {"status.json": 4}
