"""The learner's exit code once it stops (learner/main.py:exit_code)."""

import pytest

from seedrl.common.exit_codes import ExitCode
from seedrl.learner.main import exit_code


@pytest.mark.parametrize("reason", ["max_env_steps", "max_seconds", "target_return"])
def test_zero_only_when_the_experiment_is_finished(reason):
    assert exit_code(reason, False, False, False) == ExitCode.OK
    # The budget was reached: a failed final checkpoint does not make it run again.
    assert exit_code(reason, False, True, False) == ExitCode.OK


@pytest.mark.parametrize("reason", ["terminated", "interrupted"])
def test_a_signal_before_the_budget_is_stopped_not_finished(reason):
    assert exit_code(reason, False, False, False) == ExitCode.STOPPED
    # Without its final checkpoint it is a crash: counted, resumed from the previous one.
    assert exit_code(reason, False, True, False) == ExitCode.FAILED


def test_training_failures_and_checkpoint_conflicts():
    assert exit_code("train_error", True, False, False) == ExitCode.FAILED
    assert exit_code("terminated", False, False, True) == ExitCode.CHECKPOINT_LOCATION


def test_the_termination_log_holds_the_final_status_within_the_kubelets_4096_bytes(tmp_path):
    import dataclasses

    from seedrl.common.learner_status import LearnerStatus
    from seedrl.learner.main import write_termination_log

    status = LearnerStatus(
        state="finished",
        env_steps=123,
        env_frames=492,
        learner_steps=4,
        episodes=5,
        mean_return=21.5,
        eval_episodes=2,
        eval_mean_return=3.0,
        stop_reason="terminated",
        last_checkpoint="ckpt-7",
        checkpoint_failures=0,
        metrics={f"loss/{i}": 1.0 for i in range(500)},
    )
    path = tmp_path / "termination-log"
    write_termination_log(str(path), status)
    back = LearnerStatus.from_json(path.read_text())
    # Once the learner pod has stopped, the operator fills the Experiment's status from this
    # message alone: a field left out would read as its default (0, None).
    assert back.to_experiment_status() == status.to_experiment_status()
    assert (back.state, back.env_steps, back.mean_return, back.stop_reason) == (
        "finished",
        123,
        21.5,
        "terminated",
    )
    assert len(path.read_bytes()) <= 4096  # the metrics stay out
    huge = dataclasses.replace(status, last_checkpoint="gs://b/" + "x" * 5000)
    write_termination_log(str(path), huge)
    assert len(path.read_bytes()) <= 4096
    assert LearnerStatus.from_json(path.read_text()).env_steps == 123


#: A learner whose build (TensorFlow's import, the agent, a checkpoint restore: seconds to
#: minutes in a real pod) is where SIGTERM arrives: the kubelet sends it whenever the pod is
#: deleted, a learner that has not installed its own handlers yet included.
_SIGTERM_DURING_BUILD = """
import os, signal, sys
import seedrl.learner.app as app

class Never:
    def run(self):
        raise AssertionError("a learner stopped before it served must not serve")
    def close(self):
        pass

def build(exp, args):
    os.kill(os.getpid(), signal.SIGTERM)
    return Never()

app.build = build
from seedrl.learner.main import main
sys.exit(main(["--config", sys.argv[1], "--metrics-address", "off"]))
"""


def test_sigterm_before_the_learner_serves_exits_stopped_not_by_the_signal(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "exp.yaml"
    config.write_text("metadata: {name: early}\n")
    proc = subprocess.run(
        [sys.executable, "-c", _SIGTERM_DURING_BUILD, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Not -15 (143 in a container), which a Job counts as a crash.
    assert proc.returncode == ExitCode.STOPPED, proc.stderr[-2000:]
    assert "before serving" in proc.stderr
