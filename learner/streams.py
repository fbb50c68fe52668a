"""The learner's side of one actor stream: its decoded steps, its state, and the checks its
Hello must pass before anything is allocated for it.

:class:`~seedrl.learner.runtime.LearnerRuntime` keeps the registry of open streams; what one
stream holds and what one Hello may ask for live here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedrl.common.config import Spec, stream_envs_limit
from seedrl.common.wire import MAX_MESSAGE_BYTES, EnvSpec
from seedrl.learner.trajectories import UnrollBuilder

#: A stream that has sent no step for this long stops counting in its batcher's open envs, so
#: that batches stop waiting for it (its next step counts it again). Every env family here
#: steps a stream's envs well within it; a slower one only loses the early close of batches.
IDLE_STREAM_S = 1.0


class HandshakeError(Exception):
    """An actor the learner must refuse; ``code`` names the gRPC status to fail with."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


_NO_ENVS = np.zeros(0, np.int64)


@dataclasses.dataclass
class StepData:
    """One decoded step of all K envs of a stream, in env-id order."""

    observations: np.ndarray  # [K, *obs_shape]
    rewards: np.ndarray  # [K] float32
    terminated: np.ndarray  # [K] bool
    truncated: np.ndarray  # [K] bool
    #: Envs whose episode was truncated by this step and whose final observation came along.
    final_ids: np.ndarray = dataclasses.field(default_factory=lambda: _NO_ENVS)  # [M] int64
    final_observations: np.ndarray | None = None  # [M, *obs_shape]


class Stream:
    """Learner-side state of one connected actor: its unroll builder and recurrent state."""

    def __init__(
        self,
        actor_id: str,
        num_envs: int,
        builder: UnrollBuilder,
        state: list[np.ndarray],
        actor_index: int = 0,
        evaluation: bool = False,
        first_env: int = 0,
    ):
        self.actor_id = actor_id
        self.actor_index = actor_index
        #: Index of this stream's env 0 among its actor's envs.
        self.first_env = first_env
        #: An evaluation actor's episodes are reported apart and its steps are not trained on.
        self.evaluation = evaluation
        self.num_envs = num_envs
        self.env_ids = list(range(num_envs))
        #: The inference lane (batcher thread) that serves this stream.
        self.lane = 0
        self.builder = builder
        self.state = state
        #: Each env's value at its latest observation: what a truncation without a final
        #: observation (an env restarted after an error) bootstraps from.
        self.last_value = np.zeros(num_envs, np.float32)
        self.closed = False
        #: Whether its envs count in its lane's ``open_envs``: from its first step, while it
        #: keeps sending (see :meth:`LearnerRuntime.sweep_idle`), until it closes.
        self.counted = False
        #: Monotonic time of its latest step.
        self.last_step = 0.0


def check_hello(spec: Spec, num_envs: int, env_spec: EnvSpec, learner_spec: EnvSpec | None) -> None:
    """Checks what a Hello asks for against the Experiment and the learner's env spec.

    Args:
      spec: the Experiment's spec (the caps on envs per stream).
      num_envs: the envs the stream declares.
      env_spec: the env spec the actor declares.
      learner_spec: the spec the learner's agent was built for; None before the first build,
        when the Hello must name the Experiment's env id (its spec then decides the build).

    Raises:
      HandshakeError: INVALID_ARGUMENT for a number of envs out of bounds or steps that would
        not fit a message; FAILED_PRECONDITION if the env spec differs from the learner's (or,
        with none yet, names another env id).
    """
    cap = stream_envs_limit(spec)
    if not 1 <= num_envs <= cap:
        why = (
            "spec.learner.maxEnvsPerActor"
            if spec.learner.max_envs_per_actor is not None
            else "what one stream of this Experiment's actors steps: spec.actors."
            "envsPerActor / streamsPerActor, unless spec.learner.maxEnvsPerActor says more"
        )
        raise HandshakeError(
            "INVALID_ARGUMENT",
            f"hello.num_envs: must be in [1, {cap}] ({why}), got {num_envs}",
        )
    if learner_spec is None:
        wanted = spec.env.id
        if env_spec.env_id != wanted:
            raise HandshakeError(
                "FAILED_PRECONDITION",
                f"env spec differs from the learner's: env_id: learner "
                f"has {wanted!r}, actor has {env_spec.env_id!r}",
            )
        if env_spec.observation_bytes > MAX_MESSAGE_BYTES:
            raise HandshakeError(
                "INVALID_ARGUMENT",
                f"hello.env_spec.observation_shape: one observation of "
                f"{env_spec.observation_bytes} bytes exceeds the "
                f"{MAX_MESSAGE_BYTES}-byte message limit",
            )
    elif env_spec != learner_spec:
        raise HandshakeError(
            "FAILED_PRECONDITION",
            "env spec differs from the learner's: " + "; ".join(learner_spec.differences(env_spec)),
        )
    step_bytes = num_envs * env_spec.observation_bytes
    if step_bytes > MAX_MESSAGE_BYTES:
        raise HandshakeError(
            "INVALID_ARGUMENT",
            f"hello.num_envs: {num_envs} observations of "
            f"{env_spec.observation_bytes} bytes make {step_bytes}-byte "
            f"steps, over the {MAX_MESSAGE_BYTES}-byte message limit",
        )
