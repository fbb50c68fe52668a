"""The exit codes of seedrl's processes, declared once: the learner and the actors return them,
`seedrl` returns them, and the local launcher (and, in a cluster, the learner Job's failure
policy) decide from them whether a restart can help.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Why a seedrl process ended."""

    #: Done: the learner reached its budget or target, an actor was told the run is finished
    #: or was stopped by a signal, a command did what it was asked.
    OK = 0
    #: A failure a restart may get past: training raised, the checkpoint store was unavailable,
    #: the learner was stopped without its final checkpoint, the cluster could not be reached.
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
    #: Reserved for the learner stopped before its Experiment finished (SIGTERM: a drain, a
    #: preemption, a suspend) after writing its final checkpoint, so that a restart resumes it
    #: and is not counted as a failure. Not returned yet: such a learner exits OK today.
    STOPPED = 5
    #: `seedrl train` was interrupted (Ctrl-C or SIGTERM; 128 + SIGINT, the shell's convention).
    INTERRUPTED = 130


#: Codes a restart cannot get past: the launchers do not restart a process that exits with one.
PERMANENT = frozenset({ExitCode.BAD_CONFIG, ExitCode.REFUSED, ExitCode.CHECKPOINT_LOCATION})
