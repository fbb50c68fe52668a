"""The exit codes every restarter reads (common/exit_codes.py)."""

from seedrl.common.exit_codes import PERMANENT, RETRY_FREELY, ExitCode, describe


def test_only_finished_is_zero_and_codes_are_distinct_with_reasons():
    assert [c for c in ExitCode if c == 0] == [ExitCode.FINISHED]
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    assert len({c.reason for c in ExitCode}) == len(ExitCode)
    assert all(c.reason[0].isupper() and " " not in c.reason for c in ExitCode)
    # A stop from outside is retried, never failed; permanent codes never retried.
    assert not set(PERMANENT) & set(RETRY_FREELY)
    assert ExitCode.FINISHED not in PERMANENT + RETRY_FREELY
    assert ExitCode.FAILED not in PERMANENT + RETRY_FREELY


def test_describe_names_codes_and_signals():
    assert "checkpoint location" in describe(4)
    assert "stopped before the budget" in describe(75)
    assert "SIGKILL" in describe(137)
    assert "signal 15" in describe(143) and "signal 9" in describe(-9)
    assert describe(None) == "still running" and describe(42) == "exit code 42"
