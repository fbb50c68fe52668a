"""The exit codes every process returns, and which of them a restart cannot get past."""

from seedrl.common.exit_codes import PERMANENT, RETRY_FREELY, ExitCode, describe


def test_values_are_the_documented_ones():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6, 75, 130]


def test_only_configuration_refusal_checkpoint_location_accelerator_and_env_are_permanent():
    assert PERMANENT == {
        ExitCode.BAD_CONFIG,
        ExitCode.REFUSED,
        ExitCode.CHECKPOINT_LOCATION,
        ExitCode.NO_ACCELERATOR,
        ExitCode.ENV_FAILED,
    }
    assert ExitCode.FAILED not in PERMANENT and ExitCode.OK not in PERMANENT
    assert RETRY_FREELY == {ExitCode.STOPPED} and not RETRY_FREELY & PERMANENT


def test_no_accelerator_is_5_and_says_what_is_missing():
    # The learner, the launcher and the Job's podFailurePolicy all read this one member.
    assert ExitCode(5) is ExitCode.NO_ACCELERATOR and ExitCode.NO_ACCELERATOR in PERMANENT
    assert ExitCode.NO_ACCELERATOR.reason == "AcceleratorMissing"
    assert describe(5) == "exit code 5 (the accelerator the learner was scheduled for is missing)"


def test_every_code_has_a_reason_and_a_description():
    for code in ExitCode:
        assert code.reason.isidentifier() and code.reason[0].isupper()
        assert code.description


def test_describe_names_codes_signals_and_unknowns():
    assert describe(None) == "still running"
    assert "stopped before the budget" in describe(75)
    assert "SIGKILL" in describe(137)
    assert "signal 15" in describe(143)
    assert describe(-9) == "killed by signal 9"
    assert describe(42) == "exit code 42"
