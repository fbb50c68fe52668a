"""A trained policy outside the learner: loaded from a checkpoint, acting on observations.

``load(location)`` finds a checkpoint (a run directory, a checkpoint directory, a ``file://`` or
``gs://`` URI, the newest verified checkpoint there or a named one), rebuilds the networks its
Experiment names and restores their variables; :meth:`Policy.act` then chooses what the
learner's inference would: the same networks, PPO's observation normaliser, the recurrent state
carried between calls, and continuous actions mapped from the policy's [-1, 1] onto the env's
bounds (:meth:`seedrl.common.wire.EnvSpec.to_env_actions`). Deterministic acting takes the
distribution's mode (V-trace, PPO) or the greedy Q action (R2D2, as its evaluation actors do);
stochastic acting samples as the learner does (R2D2: epsilon-greedy at the calmest exploring
actor's rate).

Only TensorFlow is needed: no learner process, actors or cluster. The one step function
:meth:`PolicyModule.step` serves both :meth:`Policy.act` and the SavedModel that
:mod:`seedrl.learner.export` writes, so the two choose the same actions.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
import yaml

from seedrl.common.config import ConfigError, Experiment, parse_experiment
from seedrl.common.storage import StorageError, open_store
from seedrl.common.wire import EnvSpec, WireError
from seedrl.learner import distributions
from seedrl.learner.checkpoint import (
    CHECKPOINT_NAME,
    EXPERIMENT,
    METADATA,
    VARIABLES,
    CheckpointError,
    fetch_checkpoint,
    tracked,
)
from seedrl.learner.networks import make_actor_critic
from seedrl.learner.agents.ppo.learner import normalizer_formula
from seedrl.learner.normalizers import RunningMeanStd

#: The agents a policy can be loaded for (``spec.agent.name``).
AGENTS = ("vtrace", "ppo", "r2d2")
#: Names of the recurrent state's parts, in the order the networks keep them.
STATE_NAMES = ("lstm_h", "lstm_c", "previous_action")


class PolicyError(RuntimeError):
    """The location holds no policy this version can load; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a policy was loaded from.

    Attributes:
      location: what the caller passed.
      store_uri: the checkpoint store (directory or ``gs://`` prefix).
      checkpoint: the checkpoint's name in that store.
      run_dir: the local run directory, when ``location`` was one (else None).
      metadata: the checkpoint's ``metadata.json`` (counters, mean return, provenance).
    """

    location: str
    store_uri: str
    checkpoint: str
    run_dir: str | None
    metadata: dict

    @property
    def uri(self) -> str:
        """The checkpoint's own URI (``<store>/<name>``), which loads this very checkpoint."""
        return f"{self.store_uri}/{self.checkpoint}"


def resolve(location: str) -> tuple[str, str | None, str | None]:
    """(store URI, checkpoint name or None for the newest, run directory or None) of a
    location: a run directory (its ``config.yaml`` says where its checkpoints are), a
    checkpoint store, or one checkpoint in a store (``.../ckpt-000000012000-1f2e3d4c``).

    Raises:
      PolicyError: a local path that does not exist, or a run's unreadable config.
    """
    location = location.rstrip("/") or location
    if "://" not in location:
        if not os.path.exists(location):
            raise PolicyError(f"{location}: no such run, checkpoint directory or file")
        config = os.path.join(location, "config.yaml")
        if os.path.isdir(location) and os.path.isfile(config):
            try:
                with open(config, encoding="utf-8") as fh:
                    document = yaml.safe_load(fh) or {}
                uri = ((document.get("spec") or {}).get("checkpoint") or {}).get("uri") or ""
            except (OSError, yaml.YAMLError, AttributeError) as exc:
                raise PolicyError(f"{config}: unreadable run config ({exc})") from None
            run_dir = os.path.abspath(location)
            return uri or os.path.join(run_dir, "checkpoints"), None, run_dir
    head, _, tail = location.rpartition("/")
    if head and CHECKPOINT_NAME.match(tail):
        return head, tail, None
    return location, None, None


def load(location: str, seed: int | None = None) -> Policy:
    """Loads the policy of a checkpoint (see :func:`resolve` for the locations understood).

    Args:
      location: a run directory, a checkpoint directory, a ``file://`` or ``gs://`` URI of
        either, or of one named checkpoint in it.
      seed: seed of stochastic acting (None: the Experiment's ``spec.seed``).

    Raises:
      PolicyError: nothing loadable there, a checkpoint that fails its checks, or variables
        that do not fit the agent its Experiment names (one line, for people).
    """
    store_uri, name, run_dir = resolve(location)
    try:
        store = open_store(store_uri)
        got = fetch_checkpoint(store, name)
    except (CheckpointError, StorageError, ValueError, OSError) as exc:
        raise PolicyError(f"cannot load a policy from {location}: {exc}") from None
    try:
        experiment, env_spec, metadata = _read_files(got.path(EXPERIMENT), got.path(METADATA))
        where = f"checkpoint {got.name} in {store.uri}"
        module = PolicyModule(experiment, env_spec)
        module.restore(got.path(VARIABLES), where)
    finally:
        got.cleanup()
    source = Source(location, store.uri, got.name, run_dir, metadata)
    return Policy(module, source, experiment, experiment.spec.seed if seed is None else seed)


def _read_files(experiment_path: str, metadata_path: str) -> tuple[Experiment, EnvSpec, dict]:
    try:
        with open(experiment_path, encoding="utf-8") as fh:
            experiment = parse_experiment(yaml.safe_load(fh))
        with open(metadata_path, encoding="utf-8") as fh:
            metadata = json.load(fh)
        if metadata.get("env_spec") is None:
            raise PolicyError("the checkpoint records no env spec (written by an older learner)")
        env_spec = EnvSpec.from_json(metadata["env_spec"])
    except ConfigError as exc:
        path, reason = exc.problems[0] if exc.problems else ("", str(exc))
        raise PolicyError(
            f"the checkpoint's Experiment is invalid here: {path}: {reason}"
        ) from None
    except (OSError, ValueError, yaml.YAMLError, WireError) as exc:
        raise PolicyError(f"the checkpoint's description is unreadable: {exc}") from None
    return experiment, env_spec, metadata


class PolicyModule(tf.Module):
    """The acting parts of an agent, as TensorFlow variables and one step function.

    Holds the networks (V-trace, PPO: the actor-critic; R2D2: the online Q-network), PPO's
    observation statistics, and the env's action bounds; :meth:`step` is the whole inference.
    Variables are tracked under the names an agent checkpoints them by, so that the very
    object that :meth:`restore` fills can be saved as a SavedModel.

    Args:
      experiment: the Experiment the checkpoint was trained with.
      env_spec: the env spec it was trained on.
    """

    def __init__(self, experiment: Experiment, env_spec: EnvSpec):
        super().__init__(name="policy")
        spec = experiment.spec
        self.agent_name = spec.agent.name
        if self.agent_name not in AGENTS:
            raise PolicyError(f"unknown agent {self.agent_name!r}; known: {', '.join(AGENTS)}")
        self.env_spec = env_spec
        #: PPO's observation statistics where its inference normalises with them.
        self.normalizer: RunningMeanStd | None = None
        self.epsilon = 0.0
        try:
            parts = self._build(experiment, env_spec)
        except ValueError as exc:
            raise PolicyError(f"cannot build the {self.agent_name} networks: {exc}") from None
        #: What a checkpoint names, as it names it (Keras layers as lists of variables).
        self.parts = tracked(parts)
        low, high = env_spec.action_low, env_spec.action_high
        self._bounded = bool(low) and not env_spec.discrete
        shape = env_spec.action_shape or (1,)
        low_array = np.asarray(low or [0.0], np.float64).reshape(shape)
        high_array = np.asarray(high or [0.0], np.float64).reshape(shape)
        self._low = tf.constant(low_array)
        self._half = tf.constant(0.5 * (high_array - low_array))

    def _build(self, experiment: Experiment, env_spec: EnvSpec) -> dict[str, object]:
        spec = experiment.spec
        if self.agent_name == "r2d2":
            from seedrl.learner.agents.r2d2.networks import make_network

            r2d2 = spec.agent.r2d2
            self.network = make_network(spec.agent.network, env_spec, "online_q")
            self.value_rescale_eps = r2d2.value_rescale_eps
            # The calmest exploring actor's rate (Ape-X's schedule at its last env).
            self.epsilon = float(r2d2.epsilon_base ** (1.0 + r2d2.epsilon_alpha))
            return {"online": self.network}
        self.dist = distributions.for_env(env_spec)
        self.network = make_actor_critic(spec.agent.network, env_spec, self.dist)
        parts: dict[str, object] = {"network": self.network}
        if self.agent_name == "ppo":
            cfg = spec.agent.ppo
            obs_rms = RunningMeanStd(
                list(env_spec.observation_shape),
                clip=cfg.observation_clip,
                name="obs_rms",
                **normalizer_formula(cfg),
            )
            parts["obs_rms"] = obs_rms
            # As PPOAgent: frames are scaled by the network, never normalised.
            if cfg.normalize_observations and env_spec.observation_dtype != "uint8":
                self.normalizer = obs_rms
        return parts

    def restore(self, prefix: str, where: str) -> None:
        """Reads the variables from a TensorFlow checkpoint prefix.

        Raises:
          PolicyError: the checkpoint lacks some of them or holds them in other shapes (it
            was written for another agent or network).
        """
        try:
            status = tf.train.Checkpoint(**self.parts).read(prefix)
            # Optimizer slots, counters and RNG are not needed here: not reading them is fine.
            status.expect_partial()
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PolicyError(
                f"{where} does not fit the {self.agent_name} agent's networks its "
                f"Experiment describes ({first[:200]})"
            ) from None

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries a recurrent (LSTM) state between steps."""
        return bool(self.network.recurrent)

    @property
    def reads_rewards(self) -> bool:
        """Whether the core reads the reward that led to each observation."""
        return bool(self.network.action_size)

    def state_specs(self) -> list[tf.TensorSpec]:
        """The recurrent state's parts, each [batch, width] float32 (empty: feed-forward)."""
        return [
            tf.TensorSpec([None, int(s.shape[-1])], tf.float32, name=STATE_NAMES[i])
            for i, s in enumerate(self.network.initial_state(1))
        ]

    def observation_spec(self) -> tf.TensorSpec:
        """A batch of observations [batch, *observation_shape]."""
        spec = self.env_spec
        return tf.TensorSpec(
            [None, *spec.observation_shape], tf.as_dtype(spec.observation_dtype), "observation"
        )

    def step(self, observation, state, reward, deterministic: bool, seed=None):
        """One inference step on a batch.

        Args:
          observation: [N, *obs].
          state: the recurrent state (list of [N, width]; empty for feed-forward networks).
          reward: [N] the rewards that led to the observations (zero at episode starts).
          deterministic: the mode or greedy action, else a sample.
          seed: a stateless seed [2] int64 (only when sampling).

        Returns:
          (outputs: ``action`` in the env's units, ``value``, and for R2D2 ``q_values``; the
          new state, holding the chosen action where the core reads it).
        """
        inputs = self.normalizer.normalize(observation) if self.normalizer else observation
        outputs = {}
        if self.agent_name == "r2d2":
            from seedrl.learner.agents.r2d2.losses import inverse_value_rescale

            q, new_state = self.network.step(inputs, state, reward)
            action = tf.argmax(q, axis=-1, output_type=tf.int32)
            if not deterministic:
                n = tf.shape(q)[0]
                seeds = tf.random.split(seed, 2)
                explore = tf.random.stateless_uniform([n], seed=seeds[0]) < self.epsilon
                random_action = tf.random.stateless_uniform(
                    [n], seed=seeds[1], maxval=self.env_spec.num_actions, dtype=tf.int32
                )
                action = tf.where(explore, random_action, action)
            outputs["q_values"] = q
            outputs["value"] = inverse_value_rescale(
                tf.reduce_max(q, axis=-1), self.value_rescale_eps
            )
        else:
            params, value, new_state = self.network.step(inputs, state, reward)
            action = self.dist.mode(params) if deterministic else self.dist.sample(params, seed)
            outputs["value"] = value
        action = self._legal(action)
        new_state = self.network.record_action(new_state, action)
        outputs["action"] = self._to_env(action)
        return outputs, list(new_state)

    def _legal(self, action):
        """As the learner's runtime: an action outside the space (a network gone non-finite)
        becomes action 0, or 0.0."""
        if self.env_spec.discrete:
            bad = (action < 0) | (action >= self.env_spec.num_actions)
        else:
            bad = ~tf.math.is_finite(action)
        return tf.where(bad, tf.zeros_like(action), action)

    def _to_env(self, action):
        """:meth:`EnvSpec.to_env_actions` in TensorFlow, in the same order of float64 operations,
        so that both give the same float32 actions."""
        if not self._bounded:
            return action
        clipped = tf.cast(tf.clip_by_value(action, -1.0, 1.0) + 1.0, tf.float64)
        return tf.cast(self._low + clipped * self._half, tf.float32)


class Policy:
    """A trained policy: ``act(observation, state=None, deterministic=True) -> (action, state)``.

    Attributes:
      experiment: the Experiment the checkpoint was trained with.
      env_spec: the env spec it was trained on (observations in, actions out).
      source: where it was loaded from (:class:`Source`).
      module: the TensorFlow part (:class:`PolicyModule`).
    """

    def __init__(self, module: PolicyModule, source: Source, experiment: Experiment, seed: int):
        self.module = module
        self.experiment = experiment
        self.source = source
        self.env_spec = module.env_spec
        self._rng = tf.random.Generator.from_seed(seed)
        obs_spec, state_specs = module.observation_spec(), module.state_specs()
        reward_spec = tf.TensorSpec([None], tf.float32)
        seed_spec = tf.TensorSpec([2], tf.int64)
        self._greedy = tf.function(
            lambda o, s, r: module.step(o, s, r, True),
            input_signature=[obs_spec, state_specs, reward_spec],
        )
        self._sample = tf.function(
            lambda o, s, r, seed: module.step(o, s, r, False, seed),
            input_signature=[obs_spec, state_specs, reward_spec, seed_spec],
        )

    @property
    def agent(self) -> str:
        """The agent that trained it (``spec.agent.name``)."""
        return self.module.agent_name

    @property
    def recurrent(self) -> bool:
        """Whether :meth:`act` carries a recurrent state (pass back what it returns)."""
        return self.module.recurrent

    def initial_state(self, batch_size: int = 1) -> list[np.ndarray]:
        """The state of ``batch_size`` fresh episodes (an empty list for feed-forward ones)."""
        return [s.numpy() for s in self.module.network.initial_state(batch_size)]

    def act(
        self,
        observation,
        state: list[np.ndarray] | None = None,
        deterministic: bool = True,
        reward=None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The actions for one observation or a batch.

        Args:
          observation: one observation (``env_spec.observation_shape``) or a batch [N, ...].
          state: what the previous call returned for the same envs, or None at the start of
            their episodes (a batch whose envs start episodes at different times resets their
            rows to :meth:`initial_state`'s).
          deterministic: the most likely action (V-trace, PPO) or the greedy one (R2D2);
            False samples as training does.
          reward: the rewards [N] (or one) that led to the observations, zero at an episode's
            first step; read only by networks whose core reads rewards (None: zeros).

        Returns:
          (actions in the env's own units: [N, *action_shape], or one action for one
          observation; the new state, a list of [N, width] arrays).

        Raises:
          ValueError: observations of another shape than the env spec's.
        """
        shape = tuple(self.env_spec.observation_shape)
        obs = np.asarray(observation, dtype=self.env_spec.observation_dtype)
        single = obs.shape == shape
        if single:
            obs = obs[None]
        if obs.shape[1:] != shape:
            raise ValueError(
                f"observations of shape {list(obs.shape)}: expected {list(shape)} or "
                f"[N, {', '.join(map(str, shape))}]"
            )
        n = len(obs)
        if state is None:
            state = self.initial_state(n)
        rewards = np.zeros(n, np.float32) if reward is None else np.asarray(reward, np.float32)
        rewards = rewards.reshape(n)
        if deterministic:
            outputs, new_state = self._greedy(obs, list(state), rewards)
        else:
            seed = self._rng.make_seeds(1)[:, 0]
            outputs, new_state = self._sample(obs, list(state), rewards, seed)
        action = outputs["action"].numpy()
        return (action[0] if single else action), [s.numpy() for s in new_state]
