"""The exit codes of the learner and the actors, and what each one asks of whoever restarts them.

Declared once, here, because three restarters read them: the local launcher (``seedrl
train``), the learner Job's ``podFailurePolicy`` that the operator renders, and the operator's
status, which names the reason of a failed Experiment.

The rule they follow: **0 means the Experiment is finished** (budget or target reached, or the
learner told the actor so). A process stopped before that (SIGTERM from a drain, an eviction,
a Spot preemption, a suspend; SIGINT) exits :attr:`ExitCode.STOPPED` once its final checkpoint
is written, so that nothing mistakes an interrupted run for a finished one and it is run again
without counting as a failure. Codes that a restart would only repeat (a bad configuration, a
checkpoint location that cannot be used, an actor the learner refuses) fail at once.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit codes of ``python -m seedrl.learner`` and ``python -m seedrl.actors``."""

    #: The Experiment is finished: the learner reached its budget or target return (an actor:
    #: the learner said so).
    FINISHED = 0
    #: A crash: training failed, or the final checkpoint could not be written. Run again, it
    #: resumes from the last complete checkpoint; counted against ``spec.backoffLimit``.
    FAILED = 1
    #: The Experiment (or its environment) is invalid; a restart would fail the same way.
    CONFIG = 2
    #: The learner refused this actor (another experiment, another env spec); not retried.
    REFUSED = 3
    #: The checkpoint location cannot be used (unreadable, or another learner publishes
    #: there); not retried.
    CHECKPOINT = 4
    #: Stopped before the Experiment finished (SIGTERM or SIGINT), after writing the final
    #: checkpoint: run again to go on; never counted as a failure. 75 is EX_TEMPFAIL of
    #: sysexits.h, "a temporary failure; the user is invited to retry".
    STOPPED = 75

    @property
    def reason(self) -> str:
        """A CamelCase reason for Kubernetes conditions and events."""
        return _REASONS[self]

    @property
    def description(self) -> str:
        """What the code means, in words, for status messages and logs."""
        return _DESCRIPTIONS[self]


_REASONS = {
    ExitCode.FINISHED: "Finished",
    ExitCode.FAILED: "LearnerCrashed",
    ExitCode.CONFIG: "InvalidConfiguration",
    ExitCode.REFUSED: "ActorRefused",
    ExitCode.CHECKPOINT: "CheckpointLocationUnusable",
    ExitCode.STOPPED: "StoppedEarly",
}
_DESCRIPTIONS = {
    ExitCode.FINISHED: "the experiment finished",
    ExitCode.FAILED: "crashed (training failed or the final checkpoint was not written)",
    ExitCode.CONFIG: "the experiment or its environment is invalid",
    ExitCode.REFUSED: "the learner refused the actor",
    ExitCode.CHECKPOINT: "the checkpoint location cannot be used",
    ExitCode.STOPPED: "stopped before the budget, after its final checkpoint",
}

#: Codes a restart would only repeat: the launcher gives up on them and the learner Job's
#: podFailurePolicy fails the Job at once (FailJob).
PERMANENT = (ExitCode.CONFIG, ExitCode.REFUSED, ExitCode.CHECKPOINT)
#: Codes that are no failure of the run: restarted without counting (podFailurePolicy Ignore).
RETRY_FREELY = (ExitCode.STOPPED,)
#: What a container killed by SIGKILL exits with (128 + 9): the kernel's OOM killer, or the
#: end of a grace period. Counted as a crash.
SIGKILLED = 137


def describe(code: int | None) -> str:
    """``code`` in words: one of :class:`ExitCode`, a signal, or an unknown code."""
    if code is None:
        return "still running"
    try:
        return f"exit code {code} ({ExitCode(code).description})"
    except ValueError:
        pass
    if code == SIGKILLED:
        return f"exit code {code} (killed by SIGKILL: out of memory, or past its grace period)"
    if code > 128:
        return f"exit code {code} (killed by signal {code - 128})"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"
