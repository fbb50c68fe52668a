"""The ppo agent's hyperparameters (``spec.agent.ppo``): clipped PPO and BatchPPO."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from typing import Optional

from seedrl.common.config.fields import (
    Problems,
    minibatches_problems,
    mode_evaluation_actors,
    param,
)

if TYPE_CHECKING:  # the spec imports this section: only for the annotation
    from seedrl.common.config.experiment import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyperparameters (``spec.agent.ppo``). Each update takes ``spec.learner.batchSize``
    unrolls of ``spec.learner.unrollLength`` steps and runs ``epochs`` passes of
    ``minibatches`` minibatches over them. ``preset`` chooses between the clipped PPO of
    Schulman et al. (2017) and BatchPPO's update rules (Hafner et al. 2017)."""

    preset: str = param(
        "clip",
        "'clip': clipped PPO (Schulman et al. 2017) with rewards scaled by the spread "
        "of discounted returns, GAE value targets, and an optional KL penalty adapted "
        "when the KL leaves [target / 1.3, 1.3 target] with a per-sample cutoff. "
        "'batchppo': BatchPPO's rules exactly: the KL-penalty objective, the penalty "
        "adapted by 1.5 when the KL from the policy at the start of the update leaves "
        "[0.7, 1.3] x klTarget, the cutoff on each unroll's mean KL, rewards divided "
        "by the streaming std of the rewards, value targets the discounted returns "
        "(lambda 1).",
        choices=("clip", "batchppo"),
    )
    discount: float = param(0.99, "Discount factor gamma per environment step.", gt=0.0, le=1.0)
    lambda_: float = param(0.95, "GAE lambda of the advantages.", key="lambda", ge=0.0, le=1.0)
    objective: Optional[str] = param(
        None,
        "'clip' (clipped surrogate), 'kl_penalty' (the adaptive KL penalty with an "
        "unclipped surrogate) or 'both'; null takes the preset's: clip for 'clip', "
        "kl_penalty for 'batchppo'.",
        choices=("clip", "kl_penalty", "both"),
    )
    clip: float = param(
        0.2,
        "Clipping of the probability ratio to [1 - clip, 1 + clip] "
        "(used by the 'clip' and 'both' objectives).",
        gt=0.0,
        le=1.0,
    )
    kl_target: float = param(0.01, "Target KL per update of the adaptive penalty.", gt=0.0)
    kl_init_coefficient: float = param(1.0, "Initial coefficient of the KL penalty.", gt=0.0)
    kl_cutoff_factor: float = param(
        2.0,
        "KL beyond this multiple of the target gets a steep "
        "extra penalty (per sample with the 'clip' preset, "
        "on each unroll's mean KL with 'batchppo').",
        gt=1.0,
    )
    kl_cutoff_coefficient: float = param(1000.0, "Weight of that extra penalty.", ge=0.0)
    epochs: int = param(4, "Passes over each batch of unrolls.", ge=1)
    minibatches: int = param(
        4, "Minibatches per pass (split over unrolls; must divide spec.learner.batchSize).", ge=1
    )
    value_cost: float = param(0.5, "Weight of the value loss.", ge=0.0)
    entropy_cost: float = param(0.0, "Weight of the entropy bonus.", ge=0.0)
    normalize_observations: bool = param(
        True,
        "Streaming mean/variance normalization of observations (clipped to "
        "observationClip), the same at inference and training; kept in checkpoints. The "
        "statistics move after each update (BatchPPO's moved with every step acted). "
        "'clip' divides by sqrt(population variance + 1e-8); 'batchppo' by BatchPPO's "
        "sqrt(sample variance + 1e-4) + 1e-8, which leaves a near-constant feature 100x "
        "smaller, and, like BatchPPO, only centres until it has seen two observations.",
    )
    observation_clip: float = param(
        10.0,
        "Clip of normalized observations. Left out (or null): the preset's, 10 for 'clip', "
        "BatchPPO's 5 for 'batchppo'.",
        gt=0.0,
        default_by=("spec.agent.ppo.preset", {"batchppo": 5.0}),
    )
    normalize_rewards: bool = param(
        True,
        "Scale rewards by a streaming standard deviation, clipped to rewardClip, kept in "
        "checkpoints: that of discounted returns accumulated along unrolls with the "
        "'clip' preset, that of the rewards themselves with 'batchppo' (with BatchPPO's "
        "formula, as for observations).",
    )
    reward_clip: float = param(10.0, "Clip of normalized rewards.", gt=0.0)
    normalize_advantages: bool = param(True, "Advantages to zero mean, unit variance per batch.")
    max_policy_lag: int = param(
        2,
        "Unrolls acted by a policy more than this many updates old are dropped, not "
        "trained on; the lag measured is reported as policy_lag.",
        ge=0,
    )
    evaluation_actors: int = mode_evaluation_actors()

    def problems(self, spec: Spec) -> Problems:
        """The rules of this section that involve other fields of ``spec``."""
        return minibatches_problems("ppo", self.minibatches, spec.learner.batch_size)
