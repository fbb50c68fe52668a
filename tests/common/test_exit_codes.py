"""The exit codes every process returns, and which of them a restart cannot get past."""

from seedrl.common.exit_codes import PERMANENT, ExitCode


def test_values_are_the_documented_ones():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 130]


def test_only_configuration_refusal_and_checkpoint_location_are_permanent():
    assert PERMANENT == {ExitCode.BAD_CONFIG, ExitCode.REFUSED, ExitCode.CHECKPOINT_LOCATION}
    assert ExitCode.FAILED not in PERMANENT and ExitCode.OK not in PERMANENT
