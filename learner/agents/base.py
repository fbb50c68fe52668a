"""What the shared learner runtime needs from an agent.

The server, the batcher and the trajectory code are shared by every agent; an agent only says
what it stores per step, how it acts on a batch of observations and what its training step eats.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

import numpy as np


class Agent(abc.ABC):
    """One learning algorithm bound to its networks and optimizer (built by its builder)."""

    @abc.abstractmethod
    def step_fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Per-step outputs stored in trajectories besides the runtime's own fields.

        The runtime always stores ``observation``, ``reward``, ``terminated``, ``truncated``,
        ``action`` (for continuous actions in the policy's normalised [-1, 1] space) and
        ``final_value`` (where row t is truncated, the value of the final observation of the
        episode that ended with transition t - 1, to bootstrap from); this returns the agent's
        extras, e.g. the behaviour policy's logits, as name -> (per-env shape, dtype).
        """

    @abc.abstractmethod
    def initial_state(
        self, batch_size: int, actor_index: int = 0, first_env: int = 0
    ) -> list[np.ndarray]:
        """The per-env state of ``batch_size`` fresh envs of actor ``actor_index``, the first of
        them being env ``first_env`` of that actor: a list of [batch, ...] arrays (empty for
        feed-forward agents). Besides a recurrent state it may hold per-env constants such as
        an exploration rate."""

    @abc.abstractmethod
    def inference(
        self, observations: np.ndarray, state: list[np.ndarray], rewards: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """Acts on a batch of observations [N, *obs_shape].

        Args:
          observations: [N, *obs_shape].
          state: the per-env state (see :meth:`initial_state`).
          rewards: [N] the reward that led to each observation, zero on an episode's first
            step (None: zeros); networks whose core reads rewards use it.

        Returns:
          outputs: ``action`` [N, *action_shape] (continuous actions in [-1, 1] space),
            ``value`` [N] float32 (the agent's estimate of each observation's value, which the
            runtime bootstraps truncated episodes from), plus every field of
            :meth:`step_fields`.
          new_state: the recurrent state after this step (same structure as ``state``).
        """

    @abc.abstractmethod
    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        """One update on a time-major batch of unrolls [T + 1, B, ...]; returns scalar metrics."""

    @abc.abstractmethod
    def set_learning_rate(self, value: float) -> None:
        """Sets the optimizer's step size (for schedules driven by the runtime)."""

    @abc.abstractmethod
    def checkpointables(self) -> dict[str, object]:
        """TensorFlow trackables that make up the agent's saved state (model, optimizer...)."""

    # -- optional hooks, with the defaults of an on-policy agent ---------------------------

    #: Whether training samples from a replay the agent fills (see :class:`ReplayAgent`)
    #: rather than from batches of the freshest unrolls.
    uses_replay: bool = False

    def unroll_layout(self, unroll_length: int) -> tuple[int, int]:
        """(rows per unroll, rows between unroll starts); by default T + 1 rows every T, so
        consecutive unrolls share the row to bootstrap from."""
        return unroll_length + 1, unroll_length

    def unroll_prefix(self) -> int:
        """Zero rows before a stream's first step (see
        :class:`seedrl.learner.trajectories.UnrollBuilder`); by default none."""
        return 0

    #: The Experiment's actors (``spec.actors.replicas``) and how many of the last of them
    #: only evaluate (the agent section's ``evaluationActors``); set by the builder.
    num_actors: int = 0
    evaluation_actors: int = 0

    def is_evaluation_actor(self, actor_index: int) -> bool:
        """Whether an actor only evaluates: its episodes are reported apart and its
        trajectories are not trained on. The last ``evaluation_actors`` of the Experiment's
        ``num_actors``; an index past them (an actor beyond ``spec.actors.replicas``) trains."""
        return self.num_actors - self.evaluation_actors <= actor_index < self.num_actors

    def greedy_actions(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The actions an evaluation actor takes for these inference outputs (the rows of
        ``inference``'s ``outputs``), or None where the agent's own actions already are
        its evaluation actors' (R2D2's act with epsilon 0)."""
        return None

    def extra_state(self) -> dict[str, np.ndarray] | None:
        """Agent state that is not TensorFlow variables (e.g. a replay), as plain arrays to
        write beside a checkpoint; None when there is none or it should not be written."""
        return None

    def load_extra_state(self, state: Mapping[str, np.ndarray]) -> None:  # noqa: B027
        """Restores what :meth:`extra_state` returned (an agent without extra state has
        nothing to restore: optional, hence not abstract)."""


class ReplayAgent(Agent):
    """An agent that trains from a replay it fills: the runtime hands it every unroll and
    asks it for a step whenever it can take one."""

    uses_replay = True

    @abc.abstractmethod
    def add_unrolls(self, unrolls: list[Mapping[str, object]]) -> None:
        """Takes single-env unrolls [rows, ...] (each with its ``initial_state``)."""

    @abc.abstractmethod
    def can_train(self) -> bool:
        """Whether the replay holds enough, and the replay ratio allows, a training step."""

    def insert_limit(self) -> int | None:
        """The most unrolls the replay should take now: None for as many as have arrived, 0
        while training steps are owed (their inserts would only run ahead of the replay ratio:
        the actors then wait, their unrolls queued)."""
        return None

    @abc.abstractmethod
    def train_from_replay(self) -> dict[str, float]:
        """One update on a batch sampled from the replay; returns scalar metrics."""
