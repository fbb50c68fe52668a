"""The r2d2 agent's hyperparameters (``spec.agent.r2d2``): recurrent replay distributed DQN."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from seedrl.common.config.fields import Problems, param

if TYPE_CHECKING:  # the spec imports this section: only for the annotation
    from seedrl.common.config.experiment import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class R2D2Config:
    """R2D2 hyperparameters (``spec.agent.r2d2``), after Kapturowski et al. 2019 and SEED RL's
    ``agents/r2d2/learner.py``. The paper's: the sequence shape (80 trained steps after a
    40-step burn-in prefix, every 40 steps), the 5-step double-Q target with value rescaling,
    gamma 0.997, priorities and their exponents, the target period, the per-env epsilons, and,
    where the Experiment leaves them out, the LSTM of 512 units and Adam (1e-4, epsilon 1e-3).
    Where it differs: SEED's replay ratio (``samplesPerInsert``), initial priorities and
    summed sequence loss are the defaults; gradients are clipped to
    ``spec.learner.optimizer.gradClipNorm`` (40, as SEED); the replay holds 10,000 sequences,
    not the paper's 100,000, and a batch is ``spec.learner.batchSize`` sequences (16, not 64);
    sequences run across episode ends (the LSTM state is reset at each episode start, as in
    SEED), where the paper's never cross one; and each stream's first sequences begin with a
    zero-padded burn-in, as SEED's, so that its first steps are trained too.
    ``spec.learner.unrollLength`` is not used."""

    discount: float = param(0.997, "Discount factor gamma per environment step.", gt=0.0, le=1.0)
    n_step: int = param(
        5,
        "Steps of the n-step double-Q target; the last steps of a sequence "
        "use as many as the sequence still has (as SEED).",
        ge=1,
    )
    train_length: int = param(
        80,
        "Steps of a replayed sequence that are trained on (the paper's sequence length m = "
        "80), after its burnIn prefix; each sequence also stores the step after its last, to "
        "bootstrap from, so it holds burnIn + trainLength + 1 steps.",
        ge=1,
    )
    burn_in: int = param(
        40,
        "Steps before the trained ones that only warm up the LSTM state from the one stored "
        "with the sequence (no gradient, no loss): the paper's burn-in prefix of 40. A "
        "stream's first sequences begin with zero steps in place of the burn-in it has not "
        "got (SEED's padding), and the LSTM starts its first real step from the initial "
        "state, exactly as acting did.",
        ge=0,
    )
    sequence_period: int = param(
        40,
        "Steps between the starts of an env's consecutive sequences (at most trainLength): "
        "the paper's 40, so that with trainLength 80 each step is trained on in two "
        "sequences (a stream's first 40 in one); trainLength makes it once (SEED's "
        "layout).",
        ge=1,
    )
    replay_capacity: int = param(
        10_000,
        "Sequences the replay holds; the oldest are dropped first. Memory: capacity x "
        "(burnIn + trainLength + 1) x observation bytes (an Atari sequence of 121 steps is "
        "3.4 MB).",
        ge=1,
    )
    min_replay_size: int = param(1_000, "Sequences in the replay before learning starts.", ge=1)
    samples_per_insert: float = param(
        1.5,
        "Replay ratio (SEED's 1.5): once learning has started, the learner samples this "
        "many sequences per sequence inserted, on average. Both sides wait for the "
        "other: the learner for new data, the actors (through the queue of sequences) "
        "for training to catch up. 0 lets each run freely. A step is in trainLength / "
        "sequencePeriod sequences, so it is trained on that many times this on average: "
        "3 with the paper's overlapping sequences, SEED's 1.5 with its layout "
        "(sequencePeriod = trainLength).",
        ge=0.0,
    )
    sequence_loss: str = param(
        "sum",
        "How a sequence's squared TD errors make its loss: 'sum' is 0.5 x their sum "
        "over the trained steps (SEED), 'mean' 0.5 x their mean (gradients "
        "trainLength times smaller). The batch loss is the importance-"
        "weighted mean over sequences.",
        choices=("sum", "mean"),
    )
    initial_priority: str = param(
        "acting",
        "Priority of a new sequence: 'acting' computes it from the Q-values seen "
        "when its actions were chosen (SEED), with the same formula as after "
        "training; 'max' gives it the largest priority seen so far (Ape-X).",
        choices=("acting", "max"),
    )
    priority_exponent: float = param(
        0.9, "alpha: sampling is proportional to priority ** alpha.", ge=0.0
    )
    importance_exponent: float = param(
        0.6, "beta of the importance-sampling weights.", ge=0.0, le=1.0
    )
    priority_eta: float = param(
        0.9, "A sequence's priority: eta * max |TD| + (1 - eta) * mean |TD|.", ge=0.0, le=1.0
    )
    target_update_period: int = param(
        2_500, "Learner steps between copies of the online network into the target network.", ge=1
    )
    value_rescale_eps: float = param(
        1e-3, "epsilon of the value rescaling h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x.", gt=0.0
    )
    epsilon_base: float = param(
        0.4,
        "Exploration per env, over the N envs of all exploring actors (env j of actor i "
        "is number i x envsPerActor + j): env n explores with epsilon base ** (1 + alpha "
        "n / (N - 1)), SEED's 0.4 ** linspace(1, 8, N).",
        ge=0.0,
        le=1.0,
    )
    epsilon_alpha: float = param(7.0, "alpha of the per-env epsilon schedule.", ge=0.0)
    replay_checkpoint_max_gb: float = param(
        4.0,
        "Write the replay with every checkpoint, so a restarted learner resumes with it "
        "instead of an empty one (SEED loses it), when the full replay is at most this "
        "many GB; 0 never writes it.",
        ge=0.0,
    )
    evaluation_actors: int = param(
        0,
        "The last this-many actors act greedily (epsilon 0); their episodes are reported "
        "apart (eval_mean_return) and not trained on.",
        ge=0,
    )

    def problems(self, spec: Spec) -> Problems:
        """The rules of this section that involve other fields of ``spec``."""
        problems: Problems = []
        if self.sequence_period > self.train_length:
            problems.append(
                (
                    "spec.agent.r2d2.sequencePeriod",
                    f"must be at most spec.agent.r2d2.trainLength ({self.train_length}), or the "
                    f"steps between sequences would never be trained on, got "
                    f"{self.sequence_period}",
                )
            )
        if self.min_replay_size > self.replay_capacity:
            problems.append(
                (
                    "spec.agent.r2d2.minReplaySize",
                    f"must be at most spec.agent.r2d2.replayCapacity ({self.replay_capacity}): "
                    f"the replay never holds more, so learning would never start, got "
                    f"{self.min_replay_size}",
                )
            )
        # A sequence needs sequencePeriod new steps of its env (the first, more), so the
        # budget's env steps make at most maxEnvSteps / sequencePeriod of them, and the run
        # would end before it learned anything.
        budget = spec.budget.max_env_steps
        if budget and budget // self.sequence_period < self.min_replay_size:
            problems.append(
                (
                    "spec.agent.r2d2.minReplaySize",
                    f"must be at most the {budget // self.sequence_period} sequences that "
                    f"spec.budget.maxEnvSteps ({budget}) env steps make at one every "
                    f"spec.agent.r2d2.sequencePeriod ({self.sequence_period}) steps, or the "
                    f"budget would end before learning starts, got {self.min_replay_size}",
                )
            )
        return problems
