"""Preemption and crashes of a real learner checkpointing to GCS (the real fake-gcs-server):
SIGKILL mid-run resumes from the last published checkpoint; SIGTERM publishes a final one and
the learner is run again."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from e2e.test_train import (
    RANDOM_RETURN,
    ROOT,
    processes_mentioning,
    read_json,
    start,
    train_cmd,
    wait_for,
)


def _manifest(bucket, prefix):
    client = storage.Client(project="seedrl-test", credentials=AnonymousCredentials())
    blob = client.bucket(bucket).blob(f"{prefix}/MANIFEST.json")
    return json.loads(blob.download_as_bytes()) if blob.exists() else None


def _status(run_dir):
    return read_json(run_dir / "status.json") or {}


def _learner_pid(run_dir):
    pids = processes_mentioning(f"-m seedrl.learner --config {run_dir}/config.yaml")
    assert len(pids) == 1, [Path(f"/proc/{p}/cmdline").read_text() for p in pids]
    return pids[0]


def _wait(proc, predicate, timeout, what):
    """wait_for, failing at once with the output if `seedrl train` has exited."""

    def check():
        if proc.poll() is not None:
            raise AssertionError(
                f"seedrl train exited with {proc.returncode} while waiting "
                f"for {what}:\n{proc.stdout.read()}"
            )
        return predicate()

    return wait_for(check, timeout, what)


def _start(tmp_path, name, uri, *overrides, resume=False):
    return start(
        train_cmd(
            tmp_path,
            name,
            f"spec.checkpoint.uri={uri}",
            "spec.checkpoint.intervalSeconds=3",
            "spec.checkpoint.intervalSteps=0",
            "spec.budget.targetReturn=null",
            *overrides,
            resume=resume,
        )
    )


def test_a_killed_learner_resumes_from_its_last_checkpoint_on_gcs(tmp_path, gcs_bucket):
    uri = f"gs://{gcs_bucket}/runs/e2e-crash"
    proc = _start(tmp_path, "e2e-crash", uri, "spec.budget.maxEnvSteps=100000000")
    run_dir = tmp_path / "e2e-crash"
    try:
        # Train until the policy is clearly better than random, then until a checkpoint is
        # published after that point.
        _wait(
            proc,
            lambda: (_status(run_dir).get("mean_return") or 0) > 4 * RANDOM_RETURN,
            300,
            "the policy to learn",
        )
        learned = _status(run_dir)
        _wait(
            proc,
            lambda: (
                (_manifest(gcs_bucket, "runs/e2e-crash") or {}).get("checkpoints")
                and _manifest(gcs_bucket, "runs/e2e-crash")["checkpoints"][-1]["learner_steps"]
                > learned["learner_steps"]
            ),
            60,
            "a checkpoint after learning",
        )
        pid = _learner_pid(run_dir)
        os.kill(pid, signal.SIGKILL)
        saved = _manifest(gcs_bucket, "runs/e2e-crash")["checkpoints"][-1]

        # The launcher restarts the learner; it resumes from that checkpoint's step count.
        _wait(
            proc,
            lambda: (
                _status(run_dir).get("run_id") not in (None, learned["run_id"])
                and _status(run_dir).get("state") == "running"
            ),
            120,
            "the restarted learner",
        )
        resumed = _status(run_dir)
        assert resumed["learner_steps"] >= saved["learner_steps"]
        assert resumed["env_steps"] >= saved["env_steps"]
        log = (run_dir / "learner.log").read_text()
        assert f"resumed from {uri}/{saved['name']}" in log

        # Once a whole window of episodes has been played since the restart, the mean
        # return is that of the trained policy, not of a fresh one.
        _wait(
            proc,
            lambda: (_status(run_dir).get("episodes") or 0) >= resumed["episodes"] + 100,
            120,
            "100 episodes after the restart",
        )
        after = _status(run_dir)["mean_return"]
        assert after > 0.5 * learned["mean_return"] and after > 3 * RANDOM_RETURN, (
            learned["mean_return"],
            after,
        )
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert not processes_mentioning(str(tmp_path))


def test_sigterm_publishes_a_final_checkpoint_and_the_learner_is_run_again(tmp_path, gcs_bucket):
    uri = f"gs://{gcs_bucket}/runs/e2e-preempt"
    proc = _start(
        tmp_path,
        "e2e-preempt",
        uri,
        "spec.budget.maxEnvSteps=100000000",
        "spec.checkpoint.intervalSeconds=0",
    )  # only the final checkpoint
    run_dir = tmp_path / "e2e-preempt"
    try:
        _wait(proc, lambda: (_status(run_dir).get("learner_steps") or 0) >= 20, 180, "training")
        assert _manifest(gcs_bucket, "runs/e2e-preempt") is None
        first = _status(run_dir)
        pid = _learner_pid(run_dir)
        sent = time.monotonic()
        os.kill(pid, signal.SIGTERM)  # what Kubernetes sends a drained or preempted pod
        _wait(proc, lambda: _manifest(gcs_bucket, "runs/e2e-preempt"), 60, "the final checkpoint")
        took = time.monotonic() - sent
        final = _manifest(gcs_bucket, "runs/e2e-preempt")["checkpoints"][-1]
        stopped = read_json(run_dir / "summary.json")
        # Stopped before its budget: exit STOPPED (75), so the launcher runs it again (as the
        # learner Job's podFailurePolicy does) and the new learner resumes from that checkpoint.
        _wait(
            proc,
            lambda: (
                _status(run_dir).get("run_id") not in (None, first["run_id"])
                and _status(run_dir).get("state") == "running"
            ),
            120,
            "the learner run again",
        )
        resumed = _status(run_dir)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert stopped["stop_reason"] == "terminated"
    assert final["learner_steps"] == stopped["learner_steps"] >= 20
    assert stopped["last_checkpoint"] == f"{uri}/{final['name']}"
    assert "learner exited with exit code 75 (stopped before the budget" in out, out
    assert "starting it again" in out and "restarting it (" not in out, out
    assert resumed["learner_steps"] >= final["learner_steps"]
    assert f"resumed from {uri}/{final['name']}" in (run_dir / "learner.log").read_text()
    # Well inside Kubernetes's default 30 s grace period.
    assert took < 30, took

    # A new run may not take that location over without --resume.
    manifest = _manifest(gcs_bucket, "runs/e2e-preempt")
    refused = subprocess.run(
        train_cmd(tmp_path, "e2e-other", f"spec.checkpoint.uri={uri}"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 3
    assert "already holds checkpoints" in refused.stderr and "--resume" in refused.stderr
    assert _manifest(gcs_bucket, "runs/e2e-preempt") == manifest
