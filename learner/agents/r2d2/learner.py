"""The R2D2 agent: epsilon-greedy inference, a learner-resident prioritized sequence replay,
and burn-in + n-step double-Q training steps as ``tf.function``s with input signatures.

Every env's LSTM state lives on the learner (the runtime keeps it per stream); its exploration
rate rides along as the last entry of that per-env state, fixed per env by the Ape-X schedule
over every exploring env of every actor, so one batched inference call serves envs with
different epsilons. The runtime cuts each env's trajectory into sequences of
``burnIn + trainLength + 1`` steps every ``sequencePeriod`` steps, each with the LSTM state at
its first step: a burn-in, the ``trainLength`` steps trained on, and one step to bootstrap
from. Every step is trained on in ``trainLength / sequencePeriod`` sequences (the paper's 80
every 40: two), its stream's first ones too: a stream's first sequences begin with zero rows in
place of the burn-in it has not got (SEED's padding), and the LSTM state is reset at its first
real step, so that step is replayed from the state that acted on it. New sequences get their
priority from the Q-values seen when acting (SEED RL), and the learner keeps SEED's replay
ratio, waiting for data or making the actors wait.
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
from seedrl.learner.trajectories import PADDING, final_values


def _time_major(x):
    """[B, T, ...] -> [T, B, ...]."""
    return tf.experimental.numpy.swapaxes(x, 0, 1)


#: Names of the replay fields that hold a sequence's initial recurrent state, in state order.
STATE_FIELDS = ("h", "c", "prev_action")


def _padding_rows(unroll: Mapping[str, object]) -> int:
    """The zero rows at the head of a single-env unroll (none when it has no ``padding``)."""
    padding = unroll.get(PADDING)
    return 0 if padding is None else int(np.count_nonzero(padding))


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
      num_actors: ``spec.actors.replicas``, for the per-env epsilons and evaluation actors.
      grad_clip_norm: global-norm gradient clipping; 0 disables.
      seed: seed of exploration and replay sampling.
      placement: the devices of inference and training (default: one device).
      envs_per_actor: ``spec.actors.envsPerActor``, for the per-env epsilons.
    """

    def __init__(
        self,
        online: DuelingQNetwork,
        target: DuelingQNetwork,
        optimizer,
        config: R2D2Config,
        env_spec: EnvSpec,
        batch_size: int,
        num_actors: int,
        grad_clip_norm: float,
        seed: int,
        placement: Placement | None = None,
        envs_per_actor: int = 1,
    ):
        self.placement = placement or default_placement()
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self.config = config
        self.env_spec = env_spec
        self.batch_size = batch_size
        self.num_actors = num_actors
        self.evaluation_actors = config.evaluation_actors
        self.envs_per_actor = envs_per_actor
        self._grad_clip_norm = float(grad_clip_norm)
        self._rng = tf.random.Generator.from_seed(seed)
        self._np_rng = np.random.default_rng(seed)
        self.train_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="train_steps")
        self._sampled = 0
        # Sequences inserted when learning began: the replay ratio counts from there.
        self._start_added: int | None = None
        self._acting_priorities = config.initial_priority == "acting"
        rows = config.burn_in + config.train_length + 1
        obs_shape = tuple(env_spec.observation_shape)
        obs_dtype = np.dtype(env_spec.observation_dtype)
        fields = {
            "observation": ((rows,) + obs_shape, obs_dtype),
            "action": ((rows,), np.dtype(np.int32)),
            "reward": ((rows,), np.dtype(np.float32)),
            "terminated": ((rows,), np.dtype(bool)),
            "truncated": ((rows,), np.dtype(bool)),
            "final_value": ((rows,), np.dtype(np.float32)),
            # The zero rows at the head of a stream's first sequences (0 for the others).
            PADDING: ((), np.dtype(np.int32)),
        }
        initial = online.initial_state(1)
        self._state_fields = STATE_FIELDS[: len(initial)]
        for name, s in zip(self._state_fields, initial):
            fields[name] = ((int(s.shape[-1]),), np.dtype(np.float32))
        self.replay = PrioritizedReplay(
            config.replay_capacity, fields, config.priority_exponent, config.importance_exponent
        )

        tf_obs = tf.as_dtype(obs_dtype)
        state_specs = [tf.TensorSpec([None, s.shape[-1]], tf.float32) for s in initial]
        seq = [
            tf.TensorSpec([None, rows], tf.int32),  # action
            tf.TensorSpec([None, rows], tf.float32),  # reward
            tf.TensorSpec([None, rows], tf.bool),  # terminated
            tf.TensorSpec([None, rows], tf.bool),  # truncated
            tf.TensorSpec([None, rows], tf.float32),  # final value
        ]
        self._infer = Compiled(
            self._infer_impl,
            [
                tf.TensorSpec([None, *obs_shape], tf_obs),
                state_specs,
                tf.TensorSpec([None], tf.float32),
                tf.TensorSpec([None], tf.float32),
            ],
            concrete=not self.placement.inference_devices,
        )
        self._train = Compiled(
            self._train_impl,
            [
                tf.TensorSpec([None, rows, *obs_shape], tf_obs),
                *seq,
                state_specs,
                tf.TensorSpec([None], tf.float32),
                tf.TensorSpec([None], tf.int32),  # padding
            ],
            concrete=not self.placement.distributed,
        )
        self._initial_priorities = Compiled(
            self._initial_priorities_impl,
            [tf.TensorSpec([None, rows, env_spec.num_actions], tf.float32), *seq],
        )
        self._sync_target = tf.function(self._sync_target_impl, input_signature=[])
        self._sync_target()
        if self.placement.distributed:
            self._replicated = self.placement.make_train_step(
                self._replica_loss,
                optimizer,
                lambda: self.online.trainable_variables,
                self._grad_clip_norm,
            )

    # -- acting ---------------------------------------------------------------------------

    def epsilons(self, batch_size: int, actor_index: int = 0, first_env: int = 0) -> np.ndarray:
        """The exploration rates of envs ``first_env .. first_env + batch_size - 1`` of an
        actor: 0 for evaluation actors, else Ape-X's schedule over every env of the exploring
        actors."""
        if self.is_evaluation_actor(actor_index):
            return np.zeros(batch_size, np.float32)
        total = (self.num_actors - self.config.evaluation_actors) * self.envs_per_actor
        index = actor_index * self.envs_per_actor + first_env + np.arange(batch_size)
        # An actor index or env count beyond the declared ones repeats the calmest setting.
        index = np.minimum(index, max(total, 1) - 1)
        cfg = self.config
        if total <= 1:
            return np.full(batch_size, cfg.epsilon_base, np.float32)
        # losses.epsilon_for_env, vectorised: this runs whenever an episode ends.
        return (cfg.epsilon_base ** (1.0 + cfg.epsilon_alpha * index / (total - 1))).astype(
            np.float32
        )

    def step_fields(self):
        if self._acting_priorities:
            return {"q_values": ((self.env_spec.num_actions,), np.dtype(np.float32))}
        return {}

    def initial_state(
        self, batch_size: int, actor_index: int = 0, first_env: int = 0
    ) -> list[np.ndarray]:
        state = [s.numpy() for s in self.online.initial_state(batch_size)]
        return state + [self.epsilons(batch_size, actor_index, first_env)]

    def inference(self, observations, state, rewards=None):
        if rewards is None:
            rewards = np.zeros(len(observations), np.float32)
        with self.placement.inference_device():
            action, q, value, new_state = self._infer(observations, state[:-1], state[-1], rewards)
        outputs = {"action": action.numpy(), "value": value.numpy()}
        if self._acting_priorities:
            outputs["q_values"] = q.numpy()
        return outputs, [s.numpy() for s in new_state] + [state[-1]]

    def _infer_impl(self, observations, state, epsilon, rewards):
        """observations [N, *obs], LSTM state, epsilon [N], rewards [N] -> (actions [N],
        Q-values [N, A], values h^-1(max_a Q) [N], new state)."""
        q, new_state = self.online.step(observations, state, rewards)
        n = tf.shape(q)[0]
        seeds = self._rng.make_seeds(2)
        explore = tf.random.stateless_uniform([n], seed=seeds[:, 0]) < epsilon
        random_action = tf.random.stateless_uniform(
            [n], seed=seeds[:, 1], minval=0, maxval=self.env_spec.num_actions, dtype=tf.int32
        )
        greedy = tf.argmax(q, axis=-1, output_type=tf.int32)
        action = tf.where(explore, random_action, greedy)
        value = losses.inverse_value_rescale(
            tf.reduce_max(q, axis=-1), self.config.value_rescale_eps
        )
        return action, q, value, self.online.record_action(new_state, action)

    # -- replay ---------------------------------------------------------------------------

    def unroll_layout(self, unroll_length: int) -> tuple[int, int]:
        cfg = self.config
        return cfg.burn_in + cfg.train_length + 1, cfg.sequence_period

    def unroll_prefix(self) -> int:
        return self.config.burn_in

    def add_unrolls(self, unrolls: list[Mapping[str, object]]) -> None:
        items = {
            name: np.stack([u[name] for u in unrolls])
            for name in ("observation", "action", "reward", "terminated", "truncated")
        }
        items["final_value"] = np.stack([final_values(u) for u in unrolls])
        items[PADDING] = np.array([_padding_rows(u) for u in unrolls], np.int32)
        for i, name in enumerate(self._state_fields):
            items[name] = np.stack([u["initial_state"][i] for u in unrolls])
        priorities = None
        if self._acting_priorities:
            priorities = self._initial_priorities(
                np.stack([u["q_values"] for u in unrolls]).astype(np.float32),
                items["action"].astype(np.int32),
                items["reward"],
                items["terminated"],
                items["truncated"],
                items["final_value"],
            ).numpy()
            # Non-finite acting values (a network gone bad) get the floor priority, as
            # non-finite TD errors do after training.
            priorities = np.where(np.isfinite(priorities), priorities, 0.0)
        self.replay.add(items, priorities)

    def _ratio_start(self) -> int | None:
        """The replay's insert count when it first held ``min_replay_size`` (None before)."""
        if self._start_added is None and len(self.replay) >= self.config.min_replay_size:
            self._start_added = self.replay.added
        return self._start_added

    def can_train(self) -> bool:
        start = self._ratio_start()
        if start is None:
            return False
        ratio = self.config.samples_per_insert
        return not ratio or self._sampled <= ratio * (self.replay.added - start)

    def insert_limit(self) -> int | None:
        ratio = self.config.samples_per_insert
        start = self._ratio_start()
        if not ratio or start is None:
            return None
        owed = self._sampled - ratio * (self.replay.added - start)
        return max(0, int(np.ceil(owed / ratio))) if owed > 0 else 0

    # -- training -------------------------------------------------------------------------

    def train_from_replay(self) -> dict[str, float]:
        slots, items, weights = self.replay.sample(self.batch_size, self._np_rng)
        state = [items[name] for name in self._state_fields]
        metrics, priorities = self._train_step(
            items["observation"],
            items["action"],
            items["reward"],
            items["terminated"],
            items["truncated"],
            items["final_value"],
            state,
            weights,
            items[PADDING],
        )
        priorities = np.asarray(priorities)
        # A sequence whose TD errors are not finite holds data the network cannot digest
        # (its update was skipped): the replay's floor priority all but stops its sampling.
        self.replay.update_priorities(slots, np.where(np.isfinite(priorities), priorities, 0.0))
        self._sampled += self.batch_size
        if int(self.train_steps.numpy()) % self.config.target_update_period == 0:
            self._sync_target()
        out = {k: float(v) for k, v in metrics.items()}
        out["replay_size"] = float(len(self.replay))
        return out

    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        """One update on given sequences (time-major [L, B, ...], as the runtime stacks
        them), with uniform weights and no replay: for offline data and tests."""

        def major(array):
            return np.swapaxes(np.asarray(array), 0, 1)

        state = list(batch.get("initial_state", []))[: len(self._state_fields)]
        b = np.asarray(batch["action"]).shape[1]
        padding = np.asarray(batch.get(PADDING, np.zeros((1, b), bool))).sum(0, dtype=np.int32)
        metrics, _ = self._train_step(
            major(batch["observation"]),
            major(batch["action"]).astype(np.int32),
            major(batch["reward"]),
            major(batch["terminated"]),
            major(batch["truncated"]),
            major(final_values(batch)),
            state,
            np.ones(b, np.float32),
            padding,
        )
        return {k: float(v) for k, v in metrics.items()}

    def _train_step(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        state,
        weights,
        padding,
    ):
        """One update on sequences [B, L, ...]: split over the training replicas when there
        are several, else the one-device step; returns metrics and priorities [B]."""
        if not self.placement.can_shard(len(weights)):
            return self._train(
                observation,
                action,
                reward,
                terminated,
                truncated,
                final_value,
                state,
                weights,
                padding,
            )
        args = (
            observation,
            action,
            reward,
            terminated,
            truncated,
            final_value,
            weights,
            padding,
            *state,
        )
        metrics, (priorities,) = self._replicated(args, (0,) * len(args))
        self.train_steps.assign_add(1)
        return metrics, priorities

    def set_learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def checkpointables(self):
        return {
            "online": self.online,
            "target": self.target,
            "optimizer": self.optimizer,
            "rng": self._rng,
            "train_steps": self.train_steps,
        }

    def extra_state(self) -> dict[str, np.ndarray] | None:
        limit = self.config.replay_checkpoint_max_gb * 1e9
        if not limit or self.replay.nbytes > limit:
            return None
        state = {f"replay/{k}": v for k, v in self.replay.state().items()}
        state["sampled"] = np.array([self._sampled], np.int64)
        state["start_added"] = np.array(
            [-1 if self._start_added is None else self._start_added], np.int64
        )
        return state

    def load_extra_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.replay.load_state(
            {k[len("replay/") :]: v for k, v in state.items() if k.startswith("replay/")}
        )
        self._sampled = int(state["sampled"][0])
        start = int(state["start_added"][0]) if "start_added" in state else -1
        self._start_added = None if start < 0 else start

    def _sync_target_impl(self):
        for t, o in zip(self.target.variables, self.online.variables):
            t.assign(o)
        return tf.constant(True)

    def _train_impl(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        state,
        weights,
        padding,
    ):
        """One gradient step on sequences [B, L, ...]; returns metrics and new priorities [B]."""
        with tf.GradientTape() as tape:
            loss, td, q_taken = self.loss(
                observation,
                action,
                reward,
                terminated,
                truncated,
                final_value,
                state,
                weights,
                padding,
            )
        grad_norm = apply_gradients(
            self.optimizer, tape, loss, self.online.trainable_variables, self._grad_clip_norm
        )
        self.train_steps.assign_add(1)
        priorities = losses.sequence_priorities(td, self.config.priority_eta)
        metrics = {
            "loss/q": loss,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_abs_td": tf.reduce_mean(tf.abs(td)),
            "grad_norm": grad_norm,
        }
        return metrics, priorities

    def _replica_loss(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        weights,
        padding,
        *state,
    ):
        """The loss of one training replica's shard of sequences (see ReplicatedStep), with
        the shard's priorities."""
        loss, td, q_taken = self.loss(
            observation,
            action,
            reward,
            terminated,
            truncated,
            final_value,
            list(state),
            weights,
            padding,
        )
        metrics = {
            "loss/q": loss,
            "mean_q": tf.reduce_mean(q_taken),
            "mean_abs_td": tf.reduce_mean(tf.abs(td)),
        }
        return loss, metrics, (losses.sequence_priorities(td, self.config.priority_eta),)

    def _transitions(self, action, reward, terminated, truncated, final_value):
        """Time-major rows after the burn-in, and the rewards [M, B] and discounts [M, B] of
        their M transitions (a truncation's reward includes the discounted value of the final
        observation, as the n-step sum stops there)."""
        cfg = self.config
        burn = cfg.burn_in
        actions = _time_major(action)[burn:]
        rewards = _time_major(reward)[burn:]
        term = _time_major(terminated)[burn:]
        trunc = _time_major(truncated)[burn:]
        final = _time_major(final_value)[burn:]
        first = tf.logical_or(term, trunc)
        cut = tf.logical_and(trunc[1:], tf.logical_not(term[1:]))
        r = rewards[1:] + tf.where(cut, cfg.discount * final[1:], 0.0)
        discounts = tf.cast(tf.logical_not(first[1:]), tf.float32) * cfg.discount
        return actions, r, discounts

    def _initial_priorities_impl(
        self, q_values, action, reward, terminated, truncated, final_value
    ):
        """SEED's initial priorities: the TD errors of sequences [B, L, ...] computed from
        the Q-values seen when acting, which stand in for both networks."""
        cfg = self.config
        q = _time_major(q_values)[cfg.burn_in :]
        actions, r, discounts = self._transitions(
            action, reward, terminated, truncated, final_value
        )
        targets = losses.n_step_double_q_targets(
            q, q, r, discounts, cfg.n_step, cfg.value_rescale_eps
        )
        td = targets - tf.gather(q[:-1], actions[:-1], axis=-1, batch_dims=2)
        return losses.sequence_priorities(td, cfg.priority_eta)

    def loss(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        state,
        weights,
        padding=None,
    ):
        """The importance-weighted loss on sequences [B, L, ...] (L = burnIn + trainLength +
        1): burn-in, then rescaled n-step double-Q.

        Row t holds x_t, the reward and done flags that led to x_t, a_t, and where row t is
        truncated the value of the final observation of the episode that ended. The first
        ``burn_in`` rows only advance both networks' LSTM states from the stored one, under
        ``stop_gradient``; the loss covers every transition of the next ``trainLength`` rows
        (the last row only bootstraps), the last ones with shorter returns. Any episode end cuts
        the n-step return; a truncation (time limit) bootstraps from the final observation's
        value. ``padding`` [B] (int, default none) counts zero rows at a sequence's head, before
        its stream's first step: the LSTM state is reset at that step, as it was when acting.

        Returns:
          the scalar loss, TD errors [trainLength, B] and the Q-values of the taken actions
          (same shape).
        """
        cfg = self.config
        obs = _time_major(observation)
        all_actions = _time_major(action)
        all_rewards = _time_major(reward)
        first = tf.logical_or(_time_major(terminated), _time_major(truncated))
        if padding is not None:
            # A stream's first step begins its first episode: the state that acted on it was
            # the initial one, whatever the burn-in over the zero rows before it made.
            padding = tf.cast(padding, tf.int32)[None, :]
            rows = tf.range(tf.shape(first)[0])[:, None]
            first = tf.logical_or(first, tf.logical_and(rows == padding, padding > 0))
        burn = cfg.burn_in
        online_state, target_state = state, state
        if self.online.recurrent and burn > 0:
            prefix = (obs[:burn], first[:burn], state, all_actions[:burn], all_rewards[:burn])
            _, online_state = self.online.unroll(*prefix)
            online_state = [tf.stop_gradient(s) for s in online_state]
            _, target_state = self.target.unroll(*prefix)
        suffix = (obs[burn:], first[burn:])
        q, _ = self.online.unroll(*suffix, online_state, all_actions[burn:], all_rewards[burn:])
        q_target, _ = self.target.unroll(
            *suffix, target_state, all_actions[burn:], all_rewards[burn:]
        )
        q_target = tf.stop_gradient(q_target)
        actions, r, discounts = self._transitions(
            action, reward, terminated, truncated, final_value
        )
        targets = losses.n_step_double_q_targets(
            tf.stop_gradient(q), q_target, r, discounts, cfg.n_step, cfg.value_rescale_eps
        )
        q_taken = tf.gather(q[:-1], actions[:-1], axis=-1, batch_dims=2)
        td = targets - q_taken
        squared = tf.square(td)
        per_sequence = 0.5 * (
            tf.reduce_sum(squared, axis=0)
            if cfg.sequence_loss == "sum"
            else tf.reduce_mean(squared, axis=0)
        )
        return tf.reduce_mean(weights * per_sequence), td, q_taken
