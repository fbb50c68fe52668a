"""The exit codes of seedrl's processes, and what each one asks of whoever restarts them.

Declared once, here, because every restarter reads them: the local launcher (``seedrl
train``), the learner Job's ``podFailurePolicy`` that the operator renders, and the operator's
status, which names the reason of a failed Experiment; ``seedrl`` itself returns them too.

The rule they follow: **0 means done** (for the learner: the Experiment is finished, its budget
or target reached; for an actor: the learner said so). A process stopped before that (SIGTERM
from a drain, an eviction, a Spot preemption, a suspend; SIGINT) exits :attr:`ExitCode.STOPPED`
once its final checkpoint is written, so that nothing mistakes an interrupted run for a
finished one and it is run again without counting as a failure; a learner stopped while its
own ``/healthz`` was not answering (what a liveness probe kills) exits FAILED instead, so that
one killed again and again is counted and fails at ``spec.backoffLimit``. Codes that a
restart would only
repeat (a bad configuration, a checkpoint location that cannot be used, an actor the learner
refuses) fail at once.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Why a seedrl process ended."""

    #: Done: the learner reached its budget or target, an actor was told the run is finished,
    #: a command did what it was asked.
    OK = 0
    #: A failure a restart may get past: training raised, the checkpoint store was unavailable,
    #: the final checkpoint could not be written, the cluster could not be reached. A restarted
    #: learner resumes from the last complete checkpoint; counted against ``spec.backoffLimit``.
    FAILED = 1
    #: The Experiment (or a price table, or a command's arguments) is invalid, or what it asks
    #: for cannot be made here (devices, environments): a restart would fail the same way.
    BAD_CONFIG = 2
    #: The run refused this process: the learner refused an actor's handshake, or `seedrl train`
    #: found its run directory or checkpoint location taken or not matching (``--resume``).
    REFUSED = 3
    #: The learner cannot use its checkpoint location: nothing there loads, or another learner
    #: publishes there.
    CHECKPOINT_LOCATION = 4
    #: The learner was scheduled for an accelerator (``python -m seedrl.learner --accelerator
    #: gpu|tpu``, as the operator starts it for ``spec.learner.accelerator.kind``) and finds
    #: none: the image is not that accelerator's build, or the node lacks the device. Training
    #: on the host's CPU instead would bill the accelerator for nothing.
    NO_ACCELERATOR = 5
    #: An actor's environments keep raising (at least ``ENV_FAILURES`` restarts, and at least as
    #: many as the episodes they finished; see ``seedrl.actors.envs``): the env is broken, not
    #: unlucky, and a restarted actor would make the same env. Its last traceback is logged.
    ENV_FAILED = 6
    #: Stopped before the Experiment finished (SIGTERM or SIGINT), after writing the final
    #: checkpoint: run again to go on; never counted as a failure. 75 is EX_TEMPFAIL of
    #: sysexits.h, "a temporary failure; the user is invited to retry".
    STOPPED = 75
    #: `seedrl train` was interrupted (Ctrl-C or SIGTERM; 128 + SIGINT, the shell's convention).
    INTERRUPTED = 130

    @property
    def reason(self) -> str:
        """A CamelCase reason for Kubernetes conditions and events."""
        return _REASONS[self]

    @property
    def description(self) -> str:
        """What the code means, in words, for status messages and logs."""
        return _DESCRIPTIONS[self]


_REASONS = {
    ExitCode.OK: "Finished",
    ExitCode.FAILED: "Crashed",
    ExitCode.BAD_CONFIG: "InvalidConfiguration",
    ExitCode.REFUSED: "Refused",
    ExitCode.CHECKPOINT_LOCATION: "CheckpointLocationUnusable",
    ExitCode.NO_ACCELERATOR: "AcceleratorMissing",
    ExitCode.ENV_FAILED: "EnvironmentFailing",
    ExitCode.STOPPED: "StoppedEarly",
    ExitCode.INTERRUPTED: "Interrupted",
}
_DESCRIPTIONS = {
    ExitCode.OK: "finished",
    ExitCode.FAILED: "crashed (training failed or the final checkpoint was not written)",
    ExitCode.BAD_CONFIG: "the experiment or its environment is invalid",
    ExitCode.REFUSED: "refused (by the learner, or the run directory is taken)",
    ExitCode.CHECKPOINT_LOCATION: "the checkpoint location cannot be used",
    ExitCode.NO_ACCELERATOR: "the accelerator the learner was scheduled for is missing",
    ExitCode.ENV_FAILED: "the environments keep raising",
    ExitCode.STOPPED: "stopped before the budget, after its final checkpoint",
    ExitCode.INTERRUPTED: "interrupted",
}

#: Codes a restart would only repeat: the launchers do not restart a process that exits with
#: one, and the learner Job's podFailurePolicy fails the Job at once (FailJob).
PERMANENT = frozenset(
    {
        ExitCode.BAD_CONFIG,
        ExitCode.REFUSED,
        ExitCode.CHECKPOINT_LOCATION,
        ExitCode.NO_ACCELERATOR,
        ExitCode.ENV_FAILED,
    }
)
#: Codes that are no failure of the run: restarted without counting (podFailurePolicy Ignore).
RETRY_FREELY = frozenset({ExitCode.STOPPED})
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
