"""The R2D2 agent: epsilon-greedy inference, a learner-resident prioritized sequence replay,
and burn-in + n-step double-Q training steps as ``tf.function``s with input signatures.

Every env's LSTM state lives on the learner (the runtime keeps it per stream); its exploration
rate rides along as the last entry of that per-env state, fixed per actor by the Ape-X
schedule, so one batched inference call serves actors with different epsilons. The runtime
cuts each env's trajectory into sequences of ``sequenceLength`` steps every
``sequencePeriod`` steps, each with the LSTM state at its first step; those go into the replay.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from seedrl.common.config import R2D2Config
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import ReplayAgent
from seedrl.learner.agents.r2d2 import losses
from seedrl.learner.compiled import Compiled
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.networks import DuelingQNetwork
from seedrl.learner.optimizers import apply_gradients
from seedrl.learner.replay import PrioritizedReplay


def _time_major(x):
    """[B, T, ...] -> [T, B, ...]."""
    return tf.experimental.numpy.swapaxes(x, 0, 1)


class R2D2Agent(ReplayAgent):
    """Recurrent replay distributed DQN on the central learner.

    Args:
      online: the Q-network that acts and learns.
      target: a network of the same architecture, synced every ``target_update_period``
        learner steps.
      optimizer: a Keras optimizer built on ``online``'s variables.
      config: ``spec.agent.r2d2``.
      env_spec: the actors' environment spec (discrete actions).
      batch_size: sequences per training step.
      num_actors: ``spec.actors.replicas``, for the per-actor epsilons.
      grad_clip_norm: global-norm gradient clipping; 0 disables.
      seed: seed of exploration and replay sampling.
      placement: the devices of inference and training (default: one device).
    """

    def __init__(self, online: DuelingQNetwork, target: DuelingQNetwork, optimizer,
                 config: R2D2Config, env_spec: EnvSpec, batch_size: int, num_actors: int,
                 grad_clip_norm: float, seed: int, placement: Placement | None = None):
        self.placement = placement or default_placement()
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self.config = config
        self.env_spec = env_spec
        self.batch_size = batch_size
        self.num_actors = num_actors
        self._grad_clip_norm = float(grad_clip_norm)
        self._rng = tf.random.Generator.from_seed(seed)
        self._np_rng = np.random.default_rng(seed)
        self.train_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="train_steps")
        self._sampled = 0
        length = config.sequence_length
        obs_shape = tuple(env_spec.observation_shape)
        obs_dtype = np.dtype(env_spec.observation_dtype)
        fields = {"observation": ((length,) + obs_shape, obs_dtype),
                  "action": ((length,), np.dtype(np.int32)),
                  "reward": ((length,), np.dtype(np.float32)),
                  "terminated": ((length,), np.dtype(bool)),
                  "truncated": ((length,), np.dtype(bool))}
        if online.recurrent:
            fields["h"] = ((online.lstm_size,), np.dtype(np.float32))
            fields["c"] = ((online.lstm_size,), np.dtype(np.float32))
        self.replay = PrioritizedReplay(config.replay_capacity, fields,
                                        config.priority_exponent, config.importance_exponent)

        tf_obs = tf.as_dtype(obs_dtype)
        state_specs = [tf.TensorSpec([None, online.lstm_size], tf.float32)
                       for _ in online.initial_state(1)]
        self._infer = Compiled(self._infer_impl, [
            tf.TensorSpec([None, *obs_shape], tf_obs), state_specs,
            tf.TensorSpec([None], tf.float32)], concrete=not self.placement.inference_devices)
        self._train = Compiled(self._train_impl, [
            tf.TensorSpec([None, length, *obs_shape], tf_obs),
            tf.TensorSpec([None, length], tf.int32),
            tf.TensorSpec([None, length], tf.float32),
            tf.TensorSpec([None, length], tf.bool),
            tf.TensorSpec([None, length], tf.bool),
            state_specs,
            tf.TensorSpec([None], tf.float32)], concrete=not self.placement.distributed)
        self._sync_target = tf.function(self._sync_target_impl, input_signature=[])
        self._sync_target()
        if self.placement.distributed:
            self._replicated = self.placement.make_train_step(
                self._replica_loss, optimizer, lambda: self.online.trainable_variables,
                self._grad_clip_norm)

    # -- acting ---------------------------------------------------------------------------

    def is_evaluation_actor(self, actor_index: int) -> bool:
        return actor_index >= self.num_actors - self.config.evaluation_actors

    def epsilon(self, actor_index: int) -> float:
        """The exploration rate of an actor: 0 for evaluation actors, else Ape-X's schedule
        over the exploring actors."""
        if self.is_evaluation_actor(actor_index):
            return 0.0
        explorers = self.num_actors - self.config.evaluation_actors
        return losses.epsilon_for_actor(min(actor_index, explorers - 1), explorers,
                                        self.config.epsilon_base, self.config.epsilon_alpha)

    def step_fields(self):
        return {}

    def initial_state(self, batch_size: int, actor_index: int = 0) -> list[np.ndarray]:
        state = [s.numpy() for s in self.online.initial_state(batch_size)]
        return state + [np.full(batch_size, self.epsilon(actor_index), np.float32)]

    def inference(self, observations, state):
        with self.placement.inference_device():
            action, new_state = self._infer(observations, state[:-1], state[-1])
        return {"action": action.numpy()}, [s.numpy() for s in new_state] + [state[-1]]

    def _infer_impl(self, observations, state, epsilon):
        """observations [N, *obs], LSTM state, epsilon [N] -> (actions [N], new state)."""
        q, new_state = self.online.step(observations, state)
        n = tf.shape(q)[0]
        seeds = self._rng.make_seeds(2)
        explore = tf.random.stateless_uniform([n], seed=seeds[:, 0]) < epsilon
        random_action = tf.random.stateless_uniform(
            [n], seed=seeds[:, 1], minval=0, maxval=self.env_spec.num_actions, dtype=tf.int32)
        greedy = tf.argmax(q, axis=-1, output_type=tf.int32)
        return tf.where(explore, random_action, greedy), new_state

    # -- replay ---------------------------------------------------------------------------

    def unroll_layout(self, unroll_length: int) -> tuple[int, int]:
        return self.config.sequence_length, self.config.sequence_period

    def add_unrolls(self, unrolls: list[Mapping[str, object]]) -> None:
        items = {name: np.stack([u[name] for u in unrolls])
                 for name in ("observation", "action", "reward", "terminated", "truncated")}
        if self.online.recurrent:
            items["h"] = np.stack([u["initial_state"][0] for u in unrolls])
            items["c"] = np.stack([u["initial_state"][1] for u in unrolls])
        self.replay.add(items)

    def can_train(self) -> bool:
        if len(self.replay) < self.config.min_replay_size:
            return False
        ratio = self.config.samples_per_insert
        return not ratio or self._sampled + self.batch_size <= ratio * self.replay.added

    # -- training -------------------------------------------------------------------------

    def train_from_replay(self) -> dict[str, float]:
        slots, items, weights = self.replay.sample(self.batch_size, self._np_rng)
        state = [items["h"], items["c"]] if self.online.recurrent else []
        metrics, priorities = self._train_step(items["observation"], items["action"],
                                               items["reward"], items["terminated"],
                                               items["truncated"], state, weights)
        priorities = np.asarray(priorities)
        # A sequence whose TD errors are not finite holds data the network cannot digest
        # (its update was skipped): the replay's floor priority all but stops its sampling.
        self.replay.update_priorities(slots, np.where(np.isfinite(priorities), priorities,
                                                      0.0))
        self._sampled += self.batch_size
        if int(self.train_steps.numpy()) % self.config.target_update_period == 0:
            self._sync_target()
        out = {k: float(v) for k, v in metrics.items()}
        out["replay_size"] = float(len(self.replay))
        return out

    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        """One update on given sequences (time-major [L, B, ...], as the runtime stacks them),
        with uniform weights and no replay: for offline data and tests."""
        def major(name):
            return np.swapaxes(np.asarray(batch[name]), 0, 1)
        state = list(batch.get("initial_state", []))[:2] if self.online.recurrent else []
        b = np.asarray(batch["action"]).shape[1]
        metrics, _ = self._train_step(major("observation"), major("action").astype(np.int32),
                                      major("reward"), major("terminated"),
                                      major("truncated"), state, np.ones(b, np.float32))
        return {k: float(v) for k, v in metrics.items()}

    def _train_step(self, observation, action, reward, terminated, truncated, state, weights):
        """One update on sequences [B, L, ...]: split over the training replicas when there
        are several, else the one-device step; returns metrics and priorities [B]."""
        if not self.placement.can_shard(len(weights)):
            return self._train(observation, action, reward, terminated, truncated, state,
                               weights)
        args = (observation, action, reward, terminated, truncated, weights, *state)
        metrics, (priorities,) = self._replicated(args, (0,) * len(args))
        self.train_steps.assign_add(1)
        return metrics, priorities

    def set_learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def checkpointables(self):
        return {"online": self.online, "target": self.target, "optimizer": self.optimizer,
                "rng": self._rng, "train_steps": self.train_steps}

    def extra_state(self) -> dict[str, np.ndarray] | None:
        limit = self.config.replay_checkpoint_max_gb * 1e9
        if not limit or self.replay.nbytes > limit:
            return None
        state = {f"replay/{k}": v for k, v in self.replay.state().items()}
        state["sampled"] = np.array([self._sampled], np.int64)
        return state

    def load_extra_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.replay.load_state({k[len("replay/"):]: v for k, v in state.items()
                                if k.startswith("replay/")})
        self._sampled = int(state["sampled"][0])

    def _sync_target_impl(self):
        for t, o in zip(self.target.variables, self.online.variables):
            t.assign(o)
        return tf.constant(True)

    def _train_impl(self, observation, action, reward, terminated, truncated, state, weights):
        """One gradient step on sequences [B, L, ...]; returns metrics and new priorities [B]."""
        with tf.GradientTape() as tape:
            loss, td, q_taken = self.loss(observation, action, reward, terminated, truncated,
                                          state, weights)
        grad_norm = apply_gradients(self.optimizer, tape, loss,
                                    self.online.trainable_variables, self._grad_clip_norm)
        self.train_steps.assign_add(1)
        priorities = losses.sequence_priorities(td, self.config.priority_eta)
        metrics = {"loss/q": loss, "mean_q": tf.reduce_mean(q_taken),
                   "mean_abs_td": tf.reduce_mean(tf.abs(td)), "grad_norm": grad_norm}
        return metrics, priorities

    def _replica_loss(self, observation, action, reward, terminated, truncated, weights,
                      *state):
        """The loss of one training replica's shard of sequences (see ReplicatedStep), with
        the shard's priorities."""
        loss, td, q_taken = self.loss(observation, action, reward, terminated, truncated,
                                      list(state), weights)
        metrics = {"loss/q": loss, "mean_q": tf.reduce_mean(q_taken),
                   "mean_abs_td": tf.reduce_mean(tf.abs(td))}
        return loss, metrics, (losses.sequence_priorities(td, self.config.priority_eta),)

    def loss(self, observation, action, reward, terminated, truncated, state, weights):
        """The importance-weighted loss on sequences [B, L, ...]: burn-in, then rescaled
        n-step double-Q.

        Row t holds x_t, the reward and done flags that led to x_t, and a_t. The first
        ``burn_in`` rows only advance both networks' LSTM states from the stored one, under
        ``stop_gradient``; the loss covers the next ``L - burn_in - n`` rows, whose targets need
        n rows after them. Any episode end cuts the n-step return; a truncation (time limit)
        bootstraps from the value of the last observation seen, as the final one never reaches
        the learner.

        Returns:
          the scalar loss, TD errors [L - burn_in - n, B] and the Q-values of the taken actions
          (same shape).
        """
        cfg = self.config
        obs = _time_major(observation)
        actions = _time_major(action)
        rewards = _time_major(reward)
        term = _time_major(terminated)
        trunc = _time_major(truncated)
        first = tf.logical_or(term, trunc)
        burn = cfg.burn_in
        online_state, target_state = state, state
        if self.online.recurrent and burn > 0:
            _, online_state = self.online.unroll(obs[:burn], first[:burn], state)
            online_state = [tf.stop_gradient(s) for s in online_state]
            _, target_state = self.target.unroll(obs[:burn], first[:burn], state)
        obs, actions, rewards = obs[burn:], actions[burn:], rewards[burn:]
        term, trunc, first = term[burn:], trunc[burn:], first[burn:]
        m = tf.shape(actions)[0]
        n = cfg.n_step
        q_target, _ = self.target.unroll(obs, first, target_state)
        q_target = tf.stop_gradient(q_target)
        q, _ = self.online.unroll(obs, first, online_state)
        # Transition t: reward and done flags come from row t + 1.
        r = rewards[1:]
        discounts = tf.cast(tf.logical_not(first[1:]), tf.float32) * cfg.discount
        cut = tf.logical_and(trunc[1:], tf.logical_not(term[1:]))
        best = tf.argmax(q[:-1], axis=-1, output_type=tf.int32)
        last_value = losses.inverse_value_rescale(
            tf.gather(q_target[:-1], best, axis=-1, batch_dims=2), cfg.value_rescale_eps)
        r = r + tf.where(cut, cfg.discount * last_value, 0.0)
        pad = tf.zeros_like(r[:1])
        targets = losses.n_step_double_q_targets(
            tf.stop_gradient(q), q_target, tf.concat([r, pad], 0),
            tf.concat([discounts, pad], 0), n, cfg.value_rescale_eps)
        q_taken = tf.gather(q[:m - n], actions[:m - n], axis=-1, batch_dims=2)
        td = targets - q_taken
        per_sequence = 0.5 * tf.reduce_mean(tf.square(td), axis=0)
        return tf.reduce_mean(weights * per_sequence), td, q_taken
