"""The V-trace agent's inference and training steps, as ``tf.function``s with input signatures.

Inference and training use the very same Keras model: the variables that a training step
updates are the ones the next inference call reads, with no copy per step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from common.config import VTraceConfig
from common.wire import EnvSpec
from learner.agents.base import Agent
from learner.agents.vtrace import losses


class VTraceAgent(Agent):
    """IMPALA with V-trace off-policy correction for discrete actions.

    Args:
      network: a model mapping observations [N, ...] to (logits [N, A], values [N]).
      optimizer: a Keras optimizer (already built on the network's variables).
      config: the V-trace hyperparameters.
      env_spec: the actors' environment spec.
      grad_clip_norm: global-norm gradient clipping; 0 disables.
      seed: seed of the action sampling.
    """

    def __init__(self, network: tf.keras.Model, optimizer, config: VTraceConfig,
                 env_spec: EnvSpec, grad_clip_norm: float, seed: int):
        self.network = network
        self.optimizer = optimizer
        self.config = config
        self.env_spec = env_spec
        self._grad_clip_norm = float(grad_clip_norm)
        self._rng = tf.random.Generator.from_seed(seed)
        num_actions = env_spec.num_actions
        obs_shape = list(env_spec.observation_shape)
        obs_dtype = tf.as_dtype(env_spec.observation_dtype)

        self._infer = tf.function(self._infer_impl, input_signature=[
            tf.TensorSpec([None] + obs_shape, obs_dtype)])
        self._train = tf.function(self._train_impl, input_signature=[
            tf.TensorSpec([None, None] + obs_shape, obs_dtype),     # observation
            tf.TensorSpec([None, None], tf.int32),                  # action
            tf.TensorSpec([None, None], tf.float32),                # reward
            tf.TensorSpec([None, None], tf.bool),                   # terminated
            tf.TensorSpec([None, None], tf.bool),                   # truncated
            tf.TensorSpec([None, None, num_actions], tf.float32),   # behaviour policy_logits
        ])

    # -- Agent interface ------------------------------------------------------------------

    def step_fields(self):
        return {"policy_logits": ((self.env_spec.num_actions,), np.dtype(np.float32))}

    def initial_state(self, batch_size: int) -> list[np.ndarray]:
        return []

    def inference(self, observations, state):
        action, logits = self._infer(observations)
        return {"action": action.numpy(), "policy_logits": logits.numpy()}, state

    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        metrics = self._train(batch["observation"], batch["action"], batch["reward"],
                              batch["terminated"], batch["truncated"], batch["policy_logits"])
        return {k: float(v) for k, v in metrics.items()}

    def set_learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def checkpointables(self):
        return {"network": self.network, "optimizer": self.optimizer, "rng": self._rng}

    # -- TensorFlow graphs ----------------------------------------------------------------

    def _infer_impl(self, observations):
        """observations [N, *obs] -> (sampled actions [N] int32, logits [N, A])."""
        logits, _ = self.network(observations)
        seed = self._rng.make_seeds(1)[:, 0]
        action = tf.random.stateless_categorical(logits, 1, seed=seed, dtype=tf.int32)[:, 0]
        return action, logits

    def _train_impl(self, observation, action, reward, terminated, truncated,
                    behaviour_logits):
        """One gradient step on unrolls [T + 1, B, ...]; returns scalar metrics.

        Row t holds x_t, the reward and done flags that led to x_t, and a_t with the
        behaviour logits it was sampled from. Transitions use rows 1..T for rewards and
        discounts, rows 0..T-1 for actions and logits, and row T's value to bootstrap.
        Any episode end cuts the trace; a truncation (time limit) still bootstraps when
        ``bootstrap_on_truncation`` is on, so the time limit does not look like failure.
        """
        cfg = self.config
        shape = tf.shape(action)
        t1, b = shape[0], shape[1]
        flat_obs = tf.reshape(observation, tf.concat([[t1 * b], tf.shape(observation)[2:]], 0))
        done = tf.logical_or(terminated, truncated)[1:]
        cut = tf.logical_and(truncated, tf.logical_not(terminated))[1:]
        rewards = losses.clip_rewards(reward[1:], cfg.reward_clipping)
        discounts = tf.cast(tf.logical_not(done), tf.float32) * cfg.discount
        actions = action[:-1]
        with tf.GradientTape() as tape:
            logits, values = self.network(flat_obs)
            logits = tf.reshape(logits, [t1, b, -1])
            values = tf.reshape(values, [t1, b])
            if cfg.bootstrap_on_truncation:
                # The final observation of a truncated episode never reaches the learner (the
                # actor resets first), so V(final) is approximated by V of the observation
                # before it; the trace is still cut there, as for any episode end.
                rewards = rewards + tf.where(
                    cut, cfg.discount * tf.stop_gradient(values[:-1]), 0.0)
            vt = losses.vtrace_from_logits(
                behaviour_policy_logits=behaviour_logits[:-1],
                target_policy_logits=logits[:-1], actions=actions, discounts=discounts,
                rewards=rewards, values=values[:-1], bootstrap_value=values[-1],
                clip_rho_threshold=cfg.clip_rho_threshold,
                clip_pg_rho_threshold=cfg.clip_pg_rho_threshold, lambda_=cfg.lambda_)
            pg_loss = losses.policy_gradient_loss(logits[:-1], actions, vt.pg_advantages)
            value_loss = losses.baseline_loss(vt.vs, values[:-1])
            entropy = losses.entropy_loss(logits[:-1])
            total = pg_loss + cfg.baseline_cost * value_loss + cfg.entropy_cost * entropy
        variables = self.network.trainable_variables
        grads = tape.gradient(total, variables)
        grad_norm = tf.linalg.global_norm(grads)
        if self._grad_clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self._grad_clip_norm, use_norm=grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        return {"loss/total": total, "loss/policy": pg_loss, "loss/value": value_loss,
                "loss/entropy": entropy, "grad_norm": grad_norm,
                "mean_rho": tf.reduce_mean(tf.exp(vt.log_rhos)),
                "mean_value": tf.reduce_mean(values)}
