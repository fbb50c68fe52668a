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
