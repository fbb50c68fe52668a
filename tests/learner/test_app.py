"""The learner application assembled by build(): it serves real gRPC streams, trains to its
budget, writes its run files and final checkpoint; a checkpoint location it cannot use stops it
before it serves, with that exit code and nothing left running."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import numpy as np
import pytest

from seedrl.common.config import INT64_MAX, parse_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.common.learner_status import LearnerStatus
from seedrl.learner.app import SetupError, build
from seedrl.learner.main import parse_args
from support.learner_harness import CARTPOLE, Stream, hello, step
from support.pods import free_port


def experiment(max_env_steps=300, **spec):
    return parse_experiment(
        {
            "metadata": {"name": "test-exp"},
            "spec": {
                **spec,
                "learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1},
                "agent": {"network": {"hiddenSizes": [8]}},
                "budget": {"maxEnvSteps": max_env_steps},
            },
        }
    )


def arguments(tmp_path, metrics_address="off", *extra):
    """The learner's own command line (the config file is not read: build() takes exp)."""
    return parse_args(
        [
            "--config",
            "unused.yaml",
            "--run-dir",
            str(tmp_path / "run"),
            "--listen",
            f"unix:{tmp_path}/l.sock",
            "--metrics-address",
            metrics_address,
            "--termination-log",
            str(tmp_path / "termination"),
            *extra,
        ]
    )


def started(app):
    """Runs ``app`` in a thread; returns the thread and the list its exit code goes to, once
    the app's server listens."""
    codes = []
    runner = threading.Thread(target=lambda: codes.append(app.run()))
    runner.start()
    assert app.serving.wait(120), "the learner never started serving"
    return runner, codes


def test_the_app_serves_and_trains_to_its_budget_then_leaves_its_files(tmp_path):
    app = build(experiment(), arguments(tmp_path))
    runner, codes = started(app)
    stream = None
    try:
        stream = Stream(f"unix:{tmp_path}/l.sock")
        stream.send(hello(num_envs=2))
        assert stream.recv().WhichOneof("kind") == "welcome"
        rng = np.random.default_rng(0)
        # 300 env steps (150 messages of 2 envs) end the budget; the learner says so once its
        # stop has run (a final checkpoint, slower on a loaded machine), so keep stepping
        # until then, within a deadline rather than a count of messages.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stream.send(step(2, obs=rng.normal(size=(2, 4)).astype(np.float32)))
            if stream.recv().finished:
                break
        else:
            pytest.fail("the learner never said the run is finished")
    finally:
        if stream is not None:
            stream.close()
        app.stop("interrupted")  # a no-op once the budget has ended the run
        runner.join(120)
        app.close()
    assert codes == [ExitCode.OK]
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "max_env_steps" and summary["env_steps"] >= 300
    status = LearnerStatus.from_json((run / "status.json").read_text())
    assert status.state == "finished" and status.env_steps == summary["env_steps"]
    assert status.last_checkpoint and status.learner_steps == summary["learner_steps"] >= 1
    assert app.status().last_checkpoint == status.last_checkpoint
    # Start-up ends at the first actions sent; updates/s count from there to the stop.
    assert status.first_actions_time == summary["first_actions_time"] <= summary["stop_time"]
    assert summary["learner_steps_per_s"] > 0
    # precision auto, resolved once for its devices: the MLP stays float32 on every device.
    assert summary["precision"]["requested"] == "auto"
    assert summary["precision"]["precision"] == "float32"
    assert app.exp.spec.agent.network.precision == "float32"
    final = LearnerStatus.from_json((tmp_path / "termination").read_text())  # for the operator
    assert final.state == "finished" and final.stop_reason == "max_env_steps"


def test_an_unusable_checkpoint_location_stops_it_before_it_serves(tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "MANIFEST.json").write_text("not json")
    port = free_port()
    with pytest.raises(SetupError) as err:
        build(experiment(), arguments(tmp_path, f"127.0.0.1:{port}"))
    assert err.value.code == ExitCode.CHECKPOINT_LOCATION
    assert "MANIFEST.json" in str(err.value)
    with socket.socket() as s:  # the metrics endpoint it had started is stopped again
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_missing_accelerator_stops_it_before_it_serves(tmp_path):
    # No TPU on the machines the tests run on: scheduled for one, the app refuses to start
    # (exit NO_ACCELERATOR) rather than train on the CPU, and starts nothing it must stop.
    from seedrl.learner.devices import TPU_DEVICE_GLOBS, tpu_present

    if tpu_present(TPU_DEVICE_GLOBS):
        pytest.skip("this machine has a TPU")
    port = free_port()
    with pytest.raises(SetupError) as err:
        build(experiment(), arguments(tmp_path, f"127.0.0.1:{port}", "--accelerator", "tpu"))
    assert err.value.code == ExitCode.NO_ACCELERATOR
    assert "scheduled for a TPU" in str(err.value)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "files,reason",
    [
        (("missing.pem", "key.pem"), "missing.pem"),
        (("cert.pem", None), "--tls-key is required"),
    ],
    ids=["unreadable-cert", "no-key"],
)
def test_tls_files_it_cannot_use_stop_it_before_it_serves(tmp_path, files, reason):
    # A bad path is a configuration error (exit BAD_CONFIG, which fails the Job) found before
    # the agent is built, not a crash at serve time that the Job would retry for ever.
    (tmp_path / "cert.pem").write_text("unused")
    (tmp_path / "key.pem").write_text("unused")
    cert, key = files
    extra = ["--tls-cert", str(tmp_path / cert)] + (
        ["--tls-key", str(tmp_path / key)] if key else []
    )
    with pytest.raises(SetupError) as err:
        build(experiment(), arguments(tmp_path, "off", *extra))
    assert err.value.code == ExitCode.BAD_CONFIG
    assert str(err.value).startswith("tls: ") and reason in str(err.value)
    assert not (tmp_path / "run").exists()


def test_it_waits_for_an_env_spec_written_while_it_starts(tmp_path, monkeypatch):
    # The local launcher writes the spec while the learner imports TensorFlow: the learner
    # waits for the file (--env-spec-wait) and builds its agent for it once it appears.
    path = tmp_path / "env_spec.json"
    looked = threading.Event()
    exists = os.path.exists

    def watched(p):
        if str(p) == str(path):
            looked.set()
        return exists(p)

    monkeypatch.setattr("seedrl.learner.app.os.path.exists", watched)
    built = []
    args = arguments(tmp_path, "off", "--env-spec", str(path), "--env-spec-wait", "120")
    builder = threading.Thread(target=lambda: built.append(build(experiment(), args)))
    builder.start()
    assert looked.wait(120), "the learner never looked for its env spec"
    path.write_text(json.dumps(CARTPOLE.to_json()))
    builder.join(120)
    assert not builder.is_alive() and built
    try:
        assert built[0].runtime.env_spec == CARTPOLE
    finally:
        built[0].close()


def test_an_env_spec_that_never_appears_stops_it_before_it_serves(tmp_path):
    path = tmp_path / "env_spec.json"
    args = arguments(tmp_path, "off", "--env-spec", str(path), "--env-spec-wait", "0.1")
    with pytest.raises(SetupError) as err:
        build(experiment(), args)
    assert err.value.code == ExitCode.BAD_CONFIG
    assert str(path) in str(err.value) and "No such file" in str(err.value)


def test_stop_ends_the_run_early_with_a_final_checkpoint(tmp_path):
    app = build(experiment(max_env_steps=0), arguments(tmp_path))
    runner, codes = started(app)
    stream = Stream(f"unix:{tmp_path}/l.sock")
    try:
        stream.send(hello(num_envs=2))
        stream.recv()
        while app.runtime.learner_steps < 1:
            stream.send(step(2))
            stream.recv()
    finally:
        app.stop("terminated")
        stream.close()
        runner.join(120)
        app.close()
    assert codes == [ExitCode.STOPPED]  # not finished: run it again
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "terminated" and summary["last_checkpoint"]


def test_it_trains_with_the_largest_seed_the_experiment_accepts(tmp_path):
    # spec.seed goes up to 2^63-1 (an int64, as the CRD stores it): the agent's generators
    # take it whole, and sampling and training run.
    app = build(experiment(max_env_steps=0, seed=INT64_MAX), arguments(tmp_path))
    runner, codes = started(app)
    stream = Stream(f"unix:{tmp_path}/l.sock")
    try:
        stream.send(hello(num_envs=2))
        assert stream.recv().WhichOneof("kind") == "welcome"
        deadline = time.monotonic() + 120
        while app.runtime.learner_steps < 1 and time.monotonic() < deadline:
            stream.send(step(2))
            stream.recv()
        assert app.runtime.learner_steps >= 1 and app.runtime.train_error is None
    finally:
        app.stop("terminated")
        stream.close()
        runner.join(120)
        app.close()
    assert codes == [ExitCode.STOPPED]


#: The learner as its pod runs it, in a process of its own: with ``rlimit`` every file it
#: writes fails past 0 bytes (EFBIG, the kernel's RLIMIT_FSIZE; SIGXFSZ stays ignored, as
#: Python leaves it), which needs no privilege; its logs go to a pipe, which is not limited.
#: The limit comes once TensorFlow is imported (its import probes the temporary directory by
#: writing to it), as a disk fills up under a running learner.
_LEARNER = """
import resource, sys, tempfile
import tensorflow
if sys.argv[1] == "rlimit":
    tempfile.gettempdir()
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
from seedrl.learner.main import main
sys.exit(main(sys.argv[2:]))
"""


def _get_json(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - http only
        return json.loads(response.read())


@pytest.mark.parametrize("full", ["tmpfs", "rlimit"])
def test_a_full_disk_neither_stops_training_nor_ends_the_learner(tmp_path, request, full):
    # Issue 27, item 6: TensorBoard's writer raised ResourceExhaustedError uncaught (exit 1,
    # and again at each restart). Now every write that fails is counted and training goes on.
    import signal
    import subprocess
    import sys
    import urllib.request

    run_dir = tmp_path / "run"
    if full == "tmpfs":  # a real full disk (ENOSPC), where this machine lets us mount one
        run_dir = request.getfixturevalue("full_volume").path + "/run"
    config = tmp_path / "exp.yaml"
    config.write_text(
        "metadata: {name: test-exp}\n"
        "spec:\n"
        "  learner: {unrollLength: 5, batchSize: 2, inferenceMaxWaitMs: 1}\n"
        "  agent: {network: {hiddenSizes: [8]}}\n"
        "  checkpoint: {intervalSteps: 1}\n"
        "  budget: {maxEnvSteps: 0}\n"
    )
    env_spec = tmp_path / "env_spec.json"
    env_spec.write_text(json.dumps(CARTPOLE.to_json()))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEARNER, full, "--config", str(config), "--run-dir"]
        + [str(run_dir), "--listen", f"unix:{tmp_path}/l.sock", "--env-spec", str(env_spec)]
        + ["--metrics-address", f"127.0.0.1:{port}", "--grace-seconds", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = []
    reader = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
    reader.start()
    stream = None
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, "the learner exited:\n" + "".join(log[-40:])
            assert time.monotonic() < deadline, "the learner never served"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        stream = Stream(f"unix:{tmp_path}/l.sock")
        stream.send(hello(num_envs=2))
        assert stream.recv().WhichOneof("kind") == "welcome"
        # Long enough for checkpoints, status.json, metrics.jsonl and TensorBoard (every 2 s)
        # to have been tried, each failing.
        status = {}
        deadline = time.monotonic() + 180
        while not (
            status.get("learner_steps", 0) >= 3
            and status.get("checkpoint_failures", 0) >= 1
            and status.get("write_failures", 0) >= 3
        ):
            assert proc.poll() is None, "the learner exited:\n" + "".join(log[-40:])
            assert time.monotonic() < deadline, f"no failures counted: {status}"
            for _ in range(10):
                stream.send(step(2))
                stream.recv()
            status = _get_json(f"http://127.0.0.1:{port}/status")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for what in ("status.json", "metrics.jsonl", "tensorboard"):
            assert (
                f'seedrl_learner_write_failures_total{{experiment="test-exp",file="{what}"}}'
                in metrics
            )
    finally:
        if stream is not None:
            stream.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        reader.join(10)
    # It stopped when told, by its own exit path: a final checkpoint it could not write makes
    # that a failure, so that the restart is counted.
    assert code == ExitCode.FAILED, "".join(log[-40:])
    text = "".join(log)
    assert "exiting with" in text and "final checkpoint failed" in text
    assert "could not write tensorboard" in text


def test_the_final_checkpoint_gets_the_grace_period_counted_from_the_signal():
    # The kubelet's SIGKILL comes terminationGracePeriodSeconds after its SIGTERM, whatever the
    # learner does meanwhile (15 s on a Spot node): the drain and the trainer's last step
    # come out of the checkpoint's time, not on top of it.
    from seedrl.learner.app import EXIT_RESERVE_S, final_checkpoint_seconds

    assert final_checkpoint_seconds(15, signalled_at=100.0, now=100.0) == 15 - EXIT_RESERVE_S
    assert final_checkpoint_seconds(15, signalled_at=100.0, now=104.5) == 15 - EXIT_RESERVE_S - 4.5
    assert final_checkpoint_seconds(15, signalled_at=100.0, now=130.0) == 0.0
    # A budget reached: no signal, nothing kills it; the whole period.
    assert final_checkpoint_seconds(300, signalled_at=None, now=500.0) == 300 - EXIT_RESERVE_S
