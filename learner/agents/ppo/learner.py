"""The PPO agent on the central learner's batches of unrolls: clipped PPO or BatchPPO's rules.

Each update takes the runtime's batch of unrolls, computes GAE advantages with the current
value function, then runs ``epochs`` passes of ``minibatches`` minibatch steps (split over
unrolls, so an LSTM still sees whole sequences). Observations are normalized with streaming
statistics held in variables; they are updated only after an update's steps, so the policy
that acted on a batch and the one that trains on it see identical inputs. Every step records
the policy version (updates so far) that chose it; unrolls older than ``maxPolicyLag`` updates
are dropped and the lag actually trained on is reported.

The ``preset`` picks the update rules. ``clip`` (the default): the clipped surrogate, rewards
scaled by the spread of discounted returns, value targets GAE's lambda-returns, and an optional
KL penalty adapted when the KL from the behaviour policy leaves [target / 1.3, 1.3 target],
with a per-sample cutoff. ``batchppo`` reproduces BatchPPO's ``ppo.py``: the unclipped
surrogate with the KL penalty, whose coefficient is multiplied or divided by 1.5 when the KL
from the policy at the start of the update leaves [0.7, 1.3] x target, a cutoff on each
unroll's mean KL, rewards divided by the streaming std of the rewards (updated with the batch
first), value targets the discounted returns, and BatchPPO's normalizer formula,
``sqrt(var_sum / (n - 1) + 1e-4) + 1e-8``, with observations clipped to 5 by default.
BatchPPO trained on whole episodes of a policy that had not moved since; here the penalty's
reference is the policy at the start of the update, which the behaviour policy equals when the
lag is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seedrl.common.config import PPOConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent
from seedrl.learner.agents.ppo import losses
from seedrl.learner.compiled import Compiled
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.networks import ActorCritic
from seedrl.learner.normalizers import RunningMeanStd
from seedrl.learner.optimizers import apply_gradients
from seedrl.learner.trajectories import final_values


def discounted_returns(rewards: np.ndarray, done: np.ndarray, discount: float) -> np.ndarray:
    """Discounted returns accumulated forward along each unroll, restarting at episode ends:
    ``G_t = discount * G_{t-1} * (1 - done_{t-1}) + r_t`` from ``G_{-1} = 0``. Their spread
    is what rewards are scaled by: unlike the spread of the rewards themselves it is not
    zero when every reward is the same (CartPole)."""
    out = np.zeros_like(rewards, dtype=np.float64)
    acc = np.zeros(rewards.shape[1:], np.float64)
    for t in range(len(rewards)):
        acc = acc * discount + rewards[t]
        out[t] = acc
        acc = np.where(done[t], 0.0, acc)
    return out


def normalizer_formula(config: PPOConfig) -> dict[str, Any]:
    """The keyword arguments of :class:`RunningMeanStd` that make ``spec.agent.ppo``'s
    normalisers: BatchPPO's StreamingNormalize (``sqrt(var_sum / (n - 1) + 1e-4) + 1e-8``)
    for the ``batchppo`` preset, the population variance plus 1e-8 otherwise. Whatever
    rebuilds the agent's normalisers (a policy loaded from a checkpoint) uses it too."""
    if config.preset == "batchppo":
        return {"ddof": 1, "epsilon": 1e-4, "std_epsilon": 1e-8}
    return {}


class PPOAgent(Agent):
    """Proximal policy optimization with clipping and/or an adaptive KL penalty.

    Args:
      network: the actor-critic (see :mod:`seedrl.learner.networks`).
      optimizer: a Keras optimizer built on the network's variables.
      config: ``spec.agent.ppo``.
      env_spec: the actors' environment spec.
      grad_clip_norm: global-norm gradient clipping; 0 disables.
      seed: seed of action sampling and minibatch shuffling.
      placement: the devices of inference and training (default: one device).
    """

    def __init__(
        self,
        network: ActorCritic,
        optimizer,
        config: PPOConfig,
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
        self._np_rng = np.random.default_rng(seed)
        obs_shape = list(env_spec.observation_shape)
        obs_dtype = tf.as_dtype(env_spec.observation_dtype)
        # Frames are already scaled by the network; normalizing pixels would only add noise.
        self._normalize_obs = config.normalize_observations and obs_dtype != tf.uint8
        self._batchppo = config.preset == "batchppo"
        formula = normalizer_formula(config)
        self.obs_rms = RunningMeanStd(
            obs_shape, clip=config.observation_clip, name="obs_rms", **formula
        )
        self.reward_rms = RunningMeanStd([], clip=config.reward_clip, name="reward_rms", **formula)
        self.kl_coefficient = tf.Variable(
            config.kl_init_coefficient, dtype=tf.float64, trainable=False, name="kl_coefficient"
        )
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        objective = config.objective or ("kl_penalty" if self._batchppo else "clip")
        self._uses_clip = objective in ("clip", "both")
        self._uses_kl = objective in ("kl_penalty", "both")
        state_specs = [
            tf.TensorSpec([None, s.shape[-1]], tf.float32) for s in network.initial_state(1)
        ]
        action_shape = list(self.dist.action_shape)
        p = self.dist.param_size
        action_spec = tf.TensorSpec([None, None] + action_shape, self.dist.action_dtype)
        self._infer = Compiled(
            self._infer_impl,
            [
                tf.TensorSpec([None] + obs_shape, obs_dtype),
                state_specs,
                tf.TensorSpec([None], tf.float32),
            ],
            concrete=not self.placement.inference_devices,
        )
        one_device = not self.placement.distributed
        self._evaluate = Compiled(
            self._evaluate_impl,
            [
                tf.TensorSpec([None, None] + obs_shape, obs_dtype),
                tf.TensorSpec([None, None], tf.bool),
                state_specs,
                action_spec,
                tf.TensorSpec([None, None], tf.float32),
            ],
            concrete=one_device,
        )
        self._step = Compiled(
            self._step_impl,
            [
                tf.TensorSpec([None, None] + obs_shape, obs_dtype),  # observation [T+1]
                tf.TensorSpec([None, None], tf.bool),  # episode starts
                state_specs,
                action_spec,  # actions [T+1]
                tf.TensorSpec([None, None], tf.float32),  # rewards [T+1]
                tf.TensorSpec([None, None, p], tf.float32),  # behaviour [T]
                tf.TensorSpec([None, None, p], tf.float32),  # KL reference [T]
                tf.TensorSpec([None, None], tf.float32),  # advantages
                tf.TensorSpec([None, None], tf.float32),  # value targets
                tf.TensorSpec([], tf.float32),
            ],  # KL coefficient
            concrete=one_device,
        )
        if self.placement.distributed:
            self._replicated = self.placement.make_train_step(
                self._replica_loss,
                optimizer,
                lambda: self.network.trainable_variables,
                self._grad_clip_norm,
            )

    # -- acting ---------------------------------------------------------------------------

    def step_fields(self):
        return {
            "policy_params": ((self.dist.param_size,), np.dtype(np.float32)),
            "policy_version": ((), np.dtype(np.int64)),
        }

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
        version = np.full(len(observations), int(self.updates.numpy()), np.int64)
        return (
            {
                "action": action.numpy(),
                "policy_params": params.numpy(),
                "policy_version": version,
                "value": value.numpy(),
            },
            [s.numpy() for s in new_state],
        )

    def _inputs(self, observations):
        return self.obs_rms.normalize(observations) if self._normalize_obs else observations

    def _infer_impl(self, observations, state, rewards):
        params, values, new_state = self.network.step(self._inputs(observations), state, rewards)
        seed = self._rng.make_seeds(1)[:, 0]
        action = self.dist.sample(params, seed)
        return action, params, values, self.network.record_action(new_state, action)

    # -- training -------------------------------------------------------------------------

    def set_learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def checkpointables(self):
        return {
            "network": self.network,
            "optimizer": self.optimizer,
            "rng": self._rng,
            "obs_rms": self.obs_rms,
            "reward_rms": self.reward_rms,
            "kl_coefficient": self.kl_coefficient,
            "updates": self.updates,
        }

    def train(self, batch: Mapping[str, object]) -> dict[str, float]:
        """One PPO update on unrolls [T + 1, B, ...]; returns scalar metrics."""
        cfg = self.config
        current = int(self.updates.numpy())
        lag = current - np.asarray(batch["policy_version"]).min(axis=0)  # [B]
        keep = np.flatnonzero(lag <= cfg.max_policy_lag)
        dropped = len(lag) - len(keep)
        if len(keep) == 0:
            return {"policy_lag": float(lag.mean()), "dropped_unrolls": float(dropped)}
        cols = {k: np.asarray(v)[:, keep] for k, v in batch.items() if k != "initial_state"}
        cols["final_value"] = final_values(cols)
        state = [np.asarray(s)[keep] for s in batch.get("initial_state", [])]
        obs, actions, raw_rewards = cols["observation"], cols["action"], cols["reward"]
        terminated, truncated = cols["terminated"], cols["truncated"]
        ended = terminated | truncated
        rewards = raw_rewards[1:].astype(np.float32)
        discounted = None
        if self._batchppo:
            if cfg.normalize_rewards:
                # BatchPPO's filter takes each reward as it arrives, before training on it.
                self.reward_rms.update(rewards.reshape(-1))
                rewards = self.reward_rms.normalize(rewards, center=False).numpy()
        else:
            discounted = discounted_returns(rewards, ended[1:], cfg.discount)
            if cfg.normalize_rewards:
                rewards = self.reward_rms.normalize(rewards, center=False).numpy()
        start_params, values = self._evaluate(obs, ended, state, actions, raw_rewards)
        start_params, values = start_params.numpy()[:-1], values.numpy()
        discounts = cfg.discount * (1.0 - ended[1:].astype(np.float32))
        cut = truncated[1:] & ~terminated[1:]
        rewards = losses.bootstrap_truncations(rewards, cols["final_value"][1:], cut, cfg.discount)
        adv, returns = losses.gae(rewards, values[:-1], values[-1], discounts, cfg.lambda_)
        adv, returns = adv.numpy(), returns.numpy()
        if self._batchppo and cfg.lambda_ != 1.0:
            # BatchPPO's value targets are discounted returns, whatever the advantages use.
            returns = losses.gae(rewards, values[:-1], values[-1], discounts, 1.0)[1].numpy()
        if cfg.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        behaviour = cols["policy_params"][:-1]
        # The KL penalty holds the update near the behaviour policy (clip preset), or near the
        # policy the update started from, as in BatchPPO (the two agree when the lag is 0).
        reference = start_params if self._batchppo else behaviour
        coefficient = np.float32(self.kl_coefficient.numpy())
        step_metrics = []
        for _ in range(cfg.epochs):
            order = self._np_rng.permutation(len(keep))
            for mb in np.array_split(order, min(cfg.minibatches, len(keep))):
                step_metrics.append(
                    self._minibatch_step(
                        obs[:, mb],
                        ended[:, mb],
                        [s[mb] for s in state],
                        actions[:, mb],
                        raw_rewards[:, mb],
                        behaviour[:, mb],
                        reference[:, mb],
                        adv[:, mb],
                        returns[:, mb],
                        coefficient,
                    )
                )
        params, _ = self._evaluate(obs, ended, state, actions, raw_rewards)
        kl = float(tf.reduce_mean(self.dist.kl(reference, params[:-1])))
        # A minibatch step whose gradients were not finite was skipped (the batch holds data
        # the network cannot digest): its statistics are kept out of the normalizers and the
        # KL coefficient too, and its non-finite grad_norm tells the runtime.
        skipped = not all(np.isfinite(float(m["grad_norm"])) for m in step_metrics)
        if self._uses_kl and not skipped and np.isfinite(kl):
            if self._batchppo:
                low, high = losses.BATCHPPO_KL_BAND
                new = losses.updated_kl_coefficient(
                    float(self.kl_coefficient.numpy()),
                    kl,
                    cfg.kl_target,
                    tolerance=high,
                    lower=low,
                    bounds=(0.0, float("inf")),
                )
            else:
                new = losses.updated_kl_coefficient(
                    float(self.kl_coefficient.numpy()), kl, cfg.kl_target
                )
            self.kl_coefficient.assign(new)
        # Statistics move only now: this batch acted and trained on identical inputs.
        if not skipped:
            if self._normalize_obs:
                self.obs_rms.update(obs[:-1].reshape((-1,) + obs.shape[2:]))
            if discounted is not None:  # the clip preset's statistics: discounted returns
                self.reward_rms.update(discounted.reshape(-1))
        self.updates.assign_add(1)
        out = {k: float(np.mean([m[k] for m in step_metrics])) for k in step_metrics[0]}
        out.update(
            {
                "kl": kl,
                "kl_coefficient": float(self.kl_coefficient.numpy()),
                "policy_lag": float(lag[keep].mean()),
                "policy_lag_max": float(lag.max()),
                "dropped_unrolls": float(dropped),
                "mean_value": float(values.mean()),
            }
        )
        return out

    def _minibatch_step(
        self,
        observation,
        first,
        state,
        action,
        reward,
        behaviour,
        reference,
        advantages,
        returns,
        kl_coefficient,
    ):
        """One minibatch update: split over the training replicas when there are several
        (and the minibatch has an unroll for each), else the one-device step."""
        if not self.placement.can_shard(np.shape(action)[1]):
            return self._step(
                observation,
                first,
                state,
                action,
                reward,
                behaviour,
                reference,
                advantages,
                returns,
                kl_coefficient,
            )
        args = (
            observation,
            first,
            action,
            reward,
            behaviour,
            reference,
            advantages,
            returns,
            kl_coefficient,
            *state,
        )
        # Unrolls [T(+1), B] split along B, states along their first axis; the coefficient
        # goes whole to every replica.
        axes = (1, 1, 1, 1, 1, 1, 1, 1, None) + (0,) * len(state)
        metrics, _ = self._replicated(args, axes)
        return metrics

    def _replica_loss(
        self,
        observation,
        first,
        action,
        reward,
        behaviour,
        reference,
        advantages,
        returns,
        kl_coefficient,
        *state,
    ):
        """The loss of one training replica's shard of a minibatch (see ReplicatedStep)."""
        total, metrics = self.loss(
            observation,
            first,
            list(state),
            action,
            reward,
            behaviour,
            reference,
            advantages,
            returns,
            kl_coefficient,
        )
        return total, metrics, ()

    def _evaluate_impl(self, observations, first, state, actions, rewards):
        """Policy parameters and values of unrolls [T + 1, B, ...] under the current net."""
        return self.network.unroll(self._inputs(observations), first, state, actions, rewards)

    def _step_impl(
        self,
        observation,
        first,
        state,
        action,
        reward,
        behaviour,
        reference,
        advantages,
        returns,
        kl_coefficient,
    ):
        """One minibatch gradient step; returns its scalar metrics."""
        with tf.GradientTape() as tape:
            total, metrics = self.loss(
                observation,
                first,
                state,
                action,
                reward,
                behaviour,
                reference,
                advantages,
                returns,
                kl_coefficient,
            )
        grad_norm = apply_gradients(
            self.optimizer, tape, total, self.network.trainable_variables, self._grad_clip_norm
        )
        return {**metrics, "grad_norm": grad_norm}

    def loss(
        self,
        observation,
        first,
        state,
        action,
        reward,
        behaviour,
        reference,
        advantages,
        returns,
        kl_coefficient,
    ):
        """The PPO loss of a minibatch of unrolls and its scalar metrics, each a mean over the
        minibatch's steps (so that replicas' shares of it add up to the whole).

        ``observation``, ``first``, ``action`` and ``reward`` have the T + 1 rows of the
        unrolls (the network reads previous actions and rewards); ``behaviour`` (the policy
        that acted), ``reference`` (the policy the KL penalty measures from), ``advantages``
        and ``returns`` have the T rows of the transitions.
        """
        cfg = self.config
        params, values = self.network.unroll(
            self._inputs(observation), first, state, action, reward
        )
        params, values, action = params[:-1], values[:-1], action[:-1]
        log_prob = self.dist.log_prob(params, action)
        log_ratio = log_prob - self.dist.log_prob(behaviour, action)
        kl = self.dist.kl(reference, params)
        policy_loss = losses.clipped_surrogate_loss(
            log_ratio, advantages, cfg.clip if self._uses_clip else 0.0
        )
        if self._uses_kl:
            policy_loss += losses.kl_penalty_loss(
                kl,
                kl_coefficient,
                cfg.kl_target,
                cfg.kl_cutoff_factor,
                cfg.kl_cutoff_coefficient,
                per_sequence=self._batchppo,
            )
        value_loss = 0.5 * tf.reduce_mean(tf.square(returns - values))
        entropy = tf.reduce_mean(self.dist.entropy(params))
        total = policy_loss + cfg.value_cost * value_loss - cfg.entropy_cost * entropy
        return total, {
            "loss/total": total,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "entropy": entropy,
            "clip_fraction": tf.reduce_mean(
                tf.cast(tf.abs(tf.exp(log_ratio) - 1.0) > cfg.clip, tf.float32)
            ),
        }
