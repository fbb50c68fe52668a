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

    advantages = tf.scan(
        _step, (deltas, discounts), initializer=tf.zeros_like(bootstrap_value), reverse=True
    )
    return GAEReturns(tf.stop_gradient(advantages), tf.stop_gradient(advantages + values))


def bootstrap_truncations(rewards, final_values, cut, discount: float) -> tf.Tensor:
    """Rewards with ``discount * V(x_final)`` added where transition t was cut by a time limit.

    ``V(x_final)`` is the value of the observation the truncated episode ended in (the actor
    sends it along; the learner valued it when it arrived). The trace is still cut there (its
    discount is 0), as for any episode end.

    Args:
      rewards: float32 [T, B].
      final_values: float32 [T, B], the final observation's value where transition t was cut.
      cut: bool [T, B], true where transition t ended by truncation (not termination).
      discount: gamma.
    """
    return rewards + tf.where(cut, discount * tf.cast(final_values, tf.float32), 0.0)


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


def kl_penalty_loss(
    kl,
    coefficient,
    target: float,
    cutoff_factor: float,
    cutoff_coefficient: float,
    per_sequence: bool = False,
) -> tf.Tensor:
    """The adaptive KL penalty: coefficient * mean KL, plus a steep quadratic term
    ``cutoff_coefficient * (KL - cutoff_factor * target)^2`` wherever the KL passes the cutoff.

    Args:
      kl: float32 [T, B], KL(old || pi) per sample.
      coefficient: the adaptive coefficient (a scalar).
      target: the KL target.
      cutoff_factor: the cutoff is this multiple of the target.
      cutoff_coefficient: weight of the cutoff term.
      per_sequence: False: the cutoff applies to each sample's KL. True (BatchPPO): to each
        sequence's mean KL over time, the term averaged over the B sequences.
    """
    cutoff = cutoff_factor * target
    over = tf.nn.relu((tf.reduce_mean(kl, axis=0) if per_sequence else kl) - cutoff)
    return coefficient * tf.reduce_mean(kl) + cutoff_coefficient * tf.reduce_mean(tf.square(over))


#: BatchPPO's band around the KL target: the penalty grows above 1.3 x target and shrinks
#: below 0.7 x target (``_adjust_penalty`` in its ppo.py).
BATCHPPO_KL_BAND = (0.7, 1.3)


def updated_kl_coefficient(
    coefficient: float,
    measured_kl: float,
    target: float,
    tolerance: float = 1.3,
    factor: float = 1.5,
    bounds: tuple[float, float] = (1e-5, 1e5),
    lower: float | None = None,
) -> float:
    """The adaptive KL coefficient after an update.

    Grows by ``factor`` when the measured KL exceeded ``tolerance x target``, shrinks by it
    when the KL stayed below ``lower x target`` (default ``1 / tolerance``), else stays; kept
    within ``bounds``. BatchPPO's rule is ``tolerance=1.3, lower=0.7`` with no bounds.
    """
    lower = 1.0 / tolerance if lower is None else lower
    if measured_kl > tolerance * target:
        coefficient *= factor
    elif measured_kl < lower * target:
        coefficient /= factor
    return float(min(max(coefficient, bounds[0]), bounds[1]))
