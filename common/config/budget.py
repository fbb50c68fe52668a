"""When training stops (``spec.budget``)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from seedrl.common.config.fields import param


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """When training stops (``spec.budget``); the first limit reached wins."""

    max_env_steps: int = param(
        1_000_000, "Stop after this many environment steps over all actors; 0 means no limit.", ge=0
    )
    max_seconds: float = param(0.0, "Stop after this much training time; 0 means no limit.", ge=0.0)
    target_return: Optional[float] = param(
        None,
        "Stop once the mean return of the last returnWindow episodes reaches this (the "
        "evaluation actors' episodes when the agent has any); null means never.",
    )
    return_window: int = param(100, "Episodes averaged for the mean return and targetReturn.", ge=1)
    no_progress_seconds: float = param(
        600.0,
        "A run with no env step for this long (from its start, or since its last env "
        "step) cannot make progress: `seedrl train` stops it and exits non-zero with "
        "the reason, and in a cluster the Experiment's Progressing condition turns "
        "False (reason NoProgress). 0 never gives up.",
        ge=0.0,
    )
