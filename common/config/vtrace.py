"""The vtrace agent's hyperparameters (``spec.agent.vtrace``): IMPALA's V-trace."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from seedrl.common.config.fields import (
    Problems,
    minibatches_problems,
    mode_evaluation_actors,
    param,
)

if TYPE_CHECKING:  # the spec imports this section: only for the annotation
    from seedrl.common.config.experiment import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class VTraceConfig:
    """IMPALA / V-trace hyperparameters (``spec.agent.vtrace``)."""

    discount: float = param(
        0.99, "Discount factor gamma applied per environment step.", gt=0.0, le=1.0
    )
    lambda_: float = param(
        1.0,
        "V-trace lambda: mixes n-step and one-step targets (1.0 as in the paper).",
        key="lambda",
        ge=0.0,
        le=1.0,
    )
    baseline_cost: float = param(0.5, "Weight of the value (baseline) loss.", ge=0.0)
    entropy_cost: float = param(0.01, "Weight of the entropy bonus.", ge=0.0)
    clip_rho_threshold: float = param(
        1.0, "rho-bar: truncation of importance weights in the value targets.", gt=0.0
    )
    clip_pg_rho_threshold: float = param(
        1.0, "Truncation of importance weights in the policy gradient advantages.", gt=0.0
    )
    bootstrap_on_truncation: bool = param(
        True,
        "Bootstrap from the value estimate when an episode is truncated (time limit) "
        "instead of treating the cut as a terminal state.",
    )
    reward_clipping: str = param(
        "none",
        "Reward clipping applied in the learner before the loss; reported returns stay "
        "the game's own.",
        choices=("none", "abs_one", "soft_asymmetric"),
    )
    reward_scale: float = param(
        1.0,
        "Rewards are multiplied by this after clipping, before the loss. Values then live on "
        "a scale the value head reaches in few steps (a return of 100 needs large output "
        "weights that Adam grows slowly), so baselines do not lag the returns.",
        gt=0.0,
    )
    epochs: int = param(
        1,
        "Passes over each batch of unrolls. IMPALA and SEED train on each batch once; more "
        "passes reuse it off-policy, which V-trace's importance weights correct for (the "
        "later passes' target policy has moved from the behaviour policy), as IMPALA's "
        "experience-replay variant and PPO's epochs reuse data.",
        ge=1,
    )
    minibatches: int = param(
        1,
        "Gradient steps per pass, each on an equal share of the batch's unrolls, shuffled "
        "every pass (must divide spec.learner.batchSize).",
        ge=1,
    )
    evaluation_actors: int = mode_evaluation_actors()

    def problems(self, spec: Spec) -> Problems:
        """The rules of this section that involve other fields of ``spec``."""
        return minibatches_problems("vtrace", self.minibatches, spec.learner.batch_size)
