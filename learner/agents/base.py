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

        The runtime always stores ``observation``, ``reward``, ``terminated``, ``truncated`` and
        ``action``; this returns the agent's extras, e.g. the behaviour policy's logits, as
        name -> (per-env shape, dtype).
        """

    @abc.abstractmethod
    def initial_state(self, batch_size: int) -> list[np.ndarray]:
        """The recurrent state of ``batch_size`` fresh envs: a list of [batch, ...] arrays
        (empty for feed-forward agents)."""

    @abc.abstractmethod
    def inference(self, observations: np.ndarray, state: list[np.ndarray]
                  ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """Acts on a batch of observations [N, *obs_shape].

        Returns:
          outputs: ``action`` [N, *action_shape] plus every field of :meth:`step_fields`.
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
