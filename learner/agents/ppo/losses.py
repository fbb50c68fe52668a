"""PPO loss math in the BatchPPO style (Schulman et al. 2017; Hafner et al. 2017), pure TF.

Conventions follow the V-trace module: time-major ``[T, B]`` tensors; entry ``t`` of
``rewards`` and ``discounts`` belongs to the transition ``x_t --a_t--> x_{t+1}``,
``discounts[t] = gamma * (1 - done_{t+1})``; ``values`` are ``V(x_0..x_{T-1})`` and
``bootstrap_value`` is ``V(x_T)``.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


class GAEReturns(NamedTuple):
    """advantages [T, B] and the value targets advantages + values [T, B]."""

    advantages: tf.Tensor
    returns: tf.Tensor


def gae(rewards, values, bootstrap_value, discounts, lambda_: float) -> GAEReturns:
    """Generalized advantage estimation (Schulman et al. 2016)::

        delta_t = r_t + d_t V(x_{t+1}) - V(x_t)
        A_t     = delta_t + d_t lambda A_{t+1},   A_T = 0

    A zero discount (episode end) stops both the bootstrap and the recursion.

    Args:
      rewards: float32 [T, B].
      values: float32 [T, B].
      bootstrap_value: float32 [B], V(x_T).
      discounts: float32 [T, B].
      lambda_: the GAE lambda.

    Returns:
      GAEReturns, both [T, B], with no gradient.
    """
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    values = tf.convert_to_tensor(values, tf.float32)
    discounts = tf.convert_to_tensor(discounts, tf.float32)
    bootstrap_value = tf.convert_to_tensor(bootstrap_value, tf.float32)
    next_values = tf.concat([values[1:], bootstrap_value[None]], axis=0)
    deltas = rewards + discounts * next_values - values

    def _step(acc, elems):
        delta, discount = elems
        return delta + discount * lambda_ * acc

    advantages = tf.scan(_step, (deltas, discounts), initializer=tf.zeros_like(bootstrap_value),
                         reverse=True)
    return GAEReturns(tf.stop_gradient(advantages), tf.stop_gradient(advantages + values))


def bootstrap_truncations(rewards, values, cut, discount: float) -> tf.Tensor:
    """Rewards with ``discount * V(x_t)`` added where transition t was cut by a time limit.

    The observation a truncated episode ended in never reaches the learner (the actor resets
    first), so its value is approximated by the value of the observation before it; the
    trace is still cut there (its discount is 0), as for any episode end.

    Args:
      rewards: float32 [T, B].
      values: float32 [T, B], V(x_t).
      cut: bool [T, B], true where transition t ended by truncation (not termination).
      discount: gamma.
    """
    return rewards + tf.where(cut, discount * tf.stop_gradient(values), 0.0)


def clipped_surrogate_loss(log_ratio, advantages, clip: float) -> tf.Tensor:
    """PPO's clipped objective as a loss: -mean(min(r A, clip(r, 1 - c, 1 + c) A)).

    Args:
      log_ratio: float32 [...], log pi(a|x) - log mu(a|x).
      advantages: float32 [...] (no gradient flows into them).
      clip: c; 0 disables clipping (plain importance-weighted policy gradient).
    """
    ratio = tf.exp(log_ratio)
    advantages = tf.stop_gradient(advantages)
    unclipped = ratio * advantages
    if not clip:
        return -tf.reduce_mean(unclipped)
    clipped = tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip) * advantages
    return -tf.reduce_mean(tf.minimum(unclipped, clipped))


def kl_penalty_loss(kl, coefficient, target: float, cutoff_factor: float,
                    cutoff_coefficient: float) -> tf.Tensor:
    """BatchPPO's KL penalty: coefficient * mean KL, plus a steep quadratic term
    ``cutoff_coefficient * (KL - cutoff_factor * target)^2`` for each sample beyond the cutoff.

    Args:
      kl: float32 [...], KL(mu || pi) per sample.
      coefficient: the adaptive coefficient (a scalar).
      target: the KL target.
      cutoff_factor: the cutoff is this multiple of the target.
      cutoff_coefficient: weight of the cutoff term.
    """
    cutoff = cutoff_factor * target
    over = tf.nn.relu(kl - cutoff)
    return coefficient * tf.reduce_mean(kl) + cutoff_coefficient * tf.reduce_mean(
        tf.square(over))


def updated_kl_coefficient(coefficient: float, measured_kl: float, target: float,
                           tolerance: float = 1.3, factor: float = 1.5,
                           bounds: tuple[float, float] = (1e-5, 1e5)) -> float:
    """BatchPPO's adaptive KL coefficient after an update.

    Grows by ``factor`` when the measured KL exceeded ``tolerance x target``, shrinks by it
    when the KL stayed below ``target / tolerance``, else stays; kept within ``bounds``.
    """
    if measured_kl > tolerance * target:
        coefficient *= factor
    elif measured_kl < target / tolerance:
        coefficient /= factor
    return float(min(max(coefficient, bounds[0]), bounds[1]))
