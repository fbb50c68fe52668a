"""The V-trace agent's inference and training steps, as ``tf.function``s with input signatures.

Inference and training use the very same Keras model: the variables that a training step
updates are the ones the next inference call reads, with no copy per step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from seedrl.common.config import VTraceConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent
from seedrl.learner.agents.vtrace import losses
from seedrl.learner.compiled import Compiled
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.networks import ActorCritic
from seedrl.learner.optimizers import apply_gradients
from seedrl.learner.trajectories import final_values


class VTraceAgent(Agent):
    """IMPALA with V-trace off-policy correction, for discrete or continuous actions.

    The behaviour policy of every step is stored as the distribution's parameter vector
    (``policy_params``: logits, or a Gaussian's mean and log-std), so the learner can recompute
    importance weights for any action space. With an LSTM core the learner keeps each env's
    state; training unrolls from the state stored at the start of each unroll.

    Args:
      network: the actor-critic (see :mod:`seedrl.learner.networks`).
      optimizer: a Keras optimizer (already built on the network's variables).
      config: the V-trace hyperparameters.
      env_spec: the actors' environment spec.
      grad_clip_norm: global-norm gradient clipping; 0 disables.
      seed: seed of the action sampling.
      placement: the devices of inference and training (default: one device).
    """

    def __init__(
        self,
        network: ActorCritic,
        optimizer,
        config: VTraceConfig,
        env_spec: EnvSpec,
        grad_clip_norm: float,
        seed: int,
        placement: Placement | None = None,
    ):
        self.placement = placement or default_placement()
        self.network = network
        self.optimizer = optimizer
        self.config = config
        self.env_spec = env_spec
        self.dist = network.distribution
        self._grad_clip_norm = float(grad_clip_norm)
        self._rng = tf.random.Generator.from_seed(seed)
        # Shuffles the unrolls between minibatches when a batch is trained on in several.
        self._np_rng = np.random.default_rng(seed)
        obs_shape = list(env_spec.observation_shape)
        obs_dtype = tf.as_dtype(env_spec.observation_dtype)
        state_specs = [
            tf.TensorSpec([None, s.shape[-1]], tf.float32) for s in network.initial_state(1)
        ]
        action_spec = tf.TensorSpec(
            [None, None] + list(self.dist.action_shape), self.dist.action_dtype
        )

        self._infer = Compiled(
            self._infer_impl,
            [
                tf.TensorSpec([None] + obs_shape, obs_dtype),
                state_specs,
                tf.TensorSpec([None], tf.float32),
            ],
            concrete=not self.placement.inference_devices,
        )
        self._train = Compiled(
            self._train_impl,
            [
                tf.TensorSpec([None, None] + obs_shape, obs_dtype),  # observation
                action_spec,  # action
                tf.TensorSpec([None, None], tf.float32),  # reward
                tf.TensorSpec([None, None], tf.bool),  # terminated
                tf.TensorSpec([None, None], tf.bool),  # truncated
                tf.TensorSpec([None, None], tf.float32),  # final value
                tf.TensorSpec([None, None, self.dist.param_size], tf.float32),  # behaviour
                state_specs,  # initial state
            ],
            concrete=not self.placement.distributed,
        )
        if self.placement.distributed:
            self._replicated = self.placement.make_train_step(
                self._replica_loss,
                optimizer,
                lambda: self.network.trainable_variables,
                self._grad_clip_norm,
            )

    # -- Agent interface ------------------------------------------------------------------

    def step_fields(self):
        return {"policy_params": ((self.dist.param_size,), np.dtype(np.float32))}

    def initial_state(
        self, batch_size: int, actor_index: int = 0, first_env: int = 0
    ) -> list[np.ndarray]:
        return [s.numpy() for s in self.network.initial_state(batch_size)]

    def greedy_actions(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The policy's mode for each row (what evaluation actors take): the likeliest
        action, or the Gaussian's mean."""
        mode = np.asarray(self.dist.mode(outputs["policy_params"]))
        return mode.astype(outputs["action"].dtype, copy=False)

    def inference(self, observations, state, rewards=None):
        if rewards is None:
            rewards = np.zeros(len(observations), np.float32)
        with self.placement.inference_device():
            action, params, value, new_state = self._infer(observations, state, rewards)
        return (
            {"action": action.numpy(), "policy_params": params.numpy(), "value": value.numpy()},
            [s.numpy() for s in new_state],
        )

    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        """``epochs`` passes of ``minibatches`` gradient steps over unrolls [T + 1, B, ...]
        (one step on the whole batch by default); returns the steps' mean scalar metrics, so
        a step whose gradients were not finite makes ``grad_norm`` non-finite."""
        args = (
            batch["observation"],
            batch["action"],
            batch["reward"],
            batch["terminated"],
            batch["truncated"],
            final_values(batch),
            batch["policy_params"],
        )
        state = list(batch.get("initial_state", []))
        cfg = self.config
        if cfg.epochs == 1 and cfg.minibatches == 1:
            return self._step(args, state)
        num_unrolls = np.shape(batch["action"])[1]
        arrays = tuple(np.asarray(a) for a in args)
        states = [np.asarray(s) for s in state]
        step_metrics = []
        for _ in range(cfg.epochs):
            order = self._np_rng.permutation(num_unrolls)
            for mb in np.array_split(order, min(cfg.minibatches, num_unrolls)):
                step_metrics.append(
                    self._step(tuple(a[:, mb] for a in arrays), [s[mb] for s in states])
                )
        return {k: float(np.mean([m[k] for m in step_metrics])) for k in step_metrics[0]}

    def _step(self, args: tuple, state: list) -> dict[str, float]:
        """One gradient step on unrolls [T + 1, B, ...] and the initial states [B, ...]."""
        if self.placement.can_shard(np.shape(args[1])[1]):
            # Unrolls [T + 1, B] are split along B; states [B, ...] along their first axis.
            metrics, _ = self._replicated(args + tuple(state), (1,) * len(args) + (0,) * len(state))
        else:
            metrics = self._train(*args, state)
        return {k: float(v) for k, v in metrics.items()}

    def set_learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def checkpointables(self):
        return {"network": self.network, "optimizer": self.optimizer, "rng": self._rng}

    # -- TensorFlow graphs ----------------------------------------------------------------

    def _infer_impl(self, observations, state, rewards):
        """observations [N, *obs], state, rewards [N] -> (actions [N, ...], params [N, P],
        values [N], new state)."""
        params, values, new_state = self.network.step(observations, state, rewards)
        seed = self._rng.make_seeds(1)[:, 0]
        action = self.dist.sample(params, seed)
        return action, params, values, self.network.record_action(new_state, action)

    def _train_impl(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        behaviour_params,
        initial_state,
    ):
        """One gradient step on unrolls [T + 1, B, ...]; returns scalar metrics."""
        with tf.GradientTape() as tape:
            total, metrics = self.loss(
                observation,
                action,
                reward,
                terminated,
                truncated,
                final_value,
                behaviour_params,
                initial_state,
            )
        grad_norm = apply_gradients(
            self.optimizer, tape, total, self.network.trainable_variables, self._grad_clip_norm
        )
        return {**metrics, "grad_norm": grad_norm}

    def _replica_loss(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        behaviour_params,
        *initial_state,
    ):
        """The loss of one training replica's shard of unrolls (see ReplicatedStep)."""
        total, metrics = self.loss(
            observation,
            action,
            reward,
            terminated,
            truncated,
            final_value,
            behaviour_params,
            list(initial_state),
        )
        return total, metrics, ()

    def loss(
        self,
        observation,
        action,
        reward,
        terminated,
        truncated,
        final_value,
        behaviour_params,
        initial_state,
    ):
        """The total loss on unrolls [T + 1, B, ...] and its scalar metrics, each a mean over
        the batch's steps.

        Row t holds x_t, the reward and done flags that led to x_t, a_t with the behaviour
        policy parameters it was sampled from, and where row t is truncated the value of the
        final observation of the episode that ended (``final_value``). Transitions use rows
        1..T for rewards and discounts, rows 0..T-1 for actions and policies, and row T's value
        to bootstrap. Any episode end cuts the trace; a truncation (time limit) still
        bootstraps from the final observation's value when ``bootstrap_on_truncation`` is on,
        so the time limit does not look like failure.
        """
        cfg = self.config
        ended = tf.logical_or(terminated, truncated)
        done = ended[1:]
        cut = tf.logical_and(truncated, tf.logical_not(terminated))[1:]
        rewards = losses.clip_rewards(reward[1:], cfg.reward_clipping) * cfg.reward_scale
        discounts = tf.cast(tf.logical_not(done), tf.float32) * cfg.discount
        actions = action[:-1]
        params, values = self.network.unroll(observation, ended, initial_state, action, reward)
        if cfg.bootstrap_on_truncation:
            # The trace is still cut there, as for any episode end; the value of the state the
            # time limit interrupted stands in for the rest of the episode.
            rewards = rewards + tf.where(cut, cfg.discount * final_value[1:], 0.0)
        target_log_probs = self.dist.log_prob(params[:-1], actions)
        behaviour_log_probs = self.dist.log_prob(behaviour_params[:-1], actions)
        log_rhos = target_log_probs - behaviour_log_probs
        vt = losses.vtrace_from_importance_weights(
            log_rhos=log_rhos,
            discounts=discounts,
            rewards=rewards,
            values=values[:-1],
            bootstrap_value=values[-1],
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
            lambda_=cfg.lambda_,
        )
        # Per-batch advantage normalisation was measured on CartPole: 2 of 2 runs stalled
        # near 200, as the entropy bonus outweighed unit-scale advantages. Not offered.
        pg_loss = -tf.reduce_mean(target_log_probs * tf.stop_gradient(vt.pg_advantages))
        value_loss = losses.baseline_loss(vt.vs, values[:-1])
        entropy = tf.reduce_mean(self.dist.entropy(params[:-1]))
        total = pg_loss + cfg.baseline_cost * value_loss - cfg.entropy_cost * entropy
        return total, {
            "loss/total": total,
            "loss/policy": pg_loss,
            "loss/value": value_loss,
            "loss/entropy": -entropy,
            "mean_rho": tf.reduce_mean(tf.exp(log_rhos)),
            "mean_value": tf.reduce_mean(values),
        }
