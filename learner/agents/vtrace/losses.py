"""V-trace targets and IMPALA losses (Espeholt et al., 2018), in pure TensorFlow.

This module only contains the loss math; it knows nothing about networks,
optimizers or the data pipeline.

Conventions
-----------
* All sequence tensors are **time-major**: the leading axis is time ``T``
  (the unroll length) and the second axis is batch ``B``. Per-action tensors
  have a trailing action axis ``A``.  Shapes below are written ``[T, B]``,
  ``[T, B, A]`` and ``[B]``.
* Entry ``s`` of ``rewards``, ``discounts``, ``actions``, ``values`` and the
  policy logits all refer to the same transition ``x_s --a_s--> x_{s+1}``:
  ``values[s] = V(x_s)``, ``rewards[s] = r_s`` is the reward received after
  taking ``a_s`` and ``discounts[s] = gamma_s`` discounts ``V(x_{s+1})``.
* ``bootstrap_value`` (``[B]``) is ``V(x_T)``, the value of the state that
  follows the last transition of the unroll.
* Episode boundaries are expressed solely through discounts:
  ``discounts = gamma * (1 - done)``, i.e. ``discounts[s] == 0`` when the
  episode ended with transition ``s``. Nothing after such a step leaks into
  the targets of steps up to and including ``s``.
* Floating point inputs are cast to float32; everything returned is float32.

V-trace (paper, Section 4.1), with ``rho_s = min(rho_bar, pi(a_s|x_s) / mu(a_s|x_s))``
and ``c_s = lambda * min(1, pi(a_s|x_s) / mu(a_s|x_s))``::

    delta_s = rho_s * (r_s + gamma_s * V(x_{s+1}) - V(x_s))
    v_s     = V(x_s) + delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1}))
    v_T     = V(x_T)  (the bootstrap value)

and the policy-gradient advantage uses its own clipping threshold::

    A_s = min(rho_bar_pg, pi/mu) * (r_s + gamma_s * v_{s+1} - V(x_s))

The recursion is evaluated with a reverse ``tf.scan`` so that ``T`` and ``B``
may be unknown at graph construction time (e.g. a ``tf.function`` with an
``input_signature`` of ``[None, None]``).
"""

from typing import NamedTuple, Optional, Union

import tensorflow as tf

__all__ = [
    "VTraceReturns",
    "vtrace_from_importance_weights",
    "baseline_loss",
    "clip_rewards",
    "REWARD_CLIPPING_MODES",
]

Threshold = Optional[Union[float, tf.Tensor]]

REWARD_CLIPPING_MODES = ("none", "abs_one", "soft_asymmetric")


class VTraceReturns(NamedTuple):
    """Output of :func:`vtrace_from_importance_weights`.

    Attributes:
      vs: float32 ``[T, B]``. V-trace value targets ``v_s``.
      pg_advantages: float32 ``[T, B]``. Policy-gradient advantages
        ``min(rho_bar_pg, pi/mu) * (r_s + gamma_s * v_{s+1} - V(x_s))``.

    Both fields are wrapped in ``tf.stop_gradient``.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor


def _as_float32(x) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    if x.dtype != tf.float32:
        x = tf.cast(x, tf.float32)
    return x


def vtrace_from_importance_weights(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold: Threshold = 1.0,
    clip_pg_rho_threshold: Threshold = 1.0,
    lambda_: Union[float, tf.Tensor] = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages from log importance weights.

    Args:
      log_rhos: float32 ``[T, B]``. ``log(pi(a_s|x_s) / mu(a_s|x_s))`` where
        ``pi`` is the target (learner) policy and ``mu`` the behaviour
        (actor) policy.
      discounts: float32 ``[T, B]``. ``gamma * (1 - done_s)``.
      rewards: float32 ``[T, B]``. ``r_s``.
      values: float32 ``[T, B]``. ``V(x_s)`` under the current value function.
      bootstrap_value: float32 ``[B]``. ``V(x_T)``.
      clip_rho_threshold: scalar ``rho_bar`` used to clip the importance
        weights in the temporal differences ``delta_s``; ``None`` disables
        clipping.
      clip_pg_rho_threshold: scalar threshold for the importance weights that
        multiply the policy-gradient advantages; ``None`` disables clipping.
      lambda_: scalar trace-cutting coefficient; ``c_s = lambda_ *
        min(1, pi/mu)`` (i.e. ``c_bar = 1``). ``1.0`` is plain V-trace.

    Returns:
      :class:`VTraceReturns` with ``vs`` and ``pg_advantages``, both float32
      ``[T, B]`` and both wrapped in ``tf.stop_gradient``.
    """
    with tf.name_scope("vtrace_from_importance_weights"):
        log_rhos = _as_float32(log_rhos)
        discounts = _as_float32(discounts)
        rewards = _as_float32(rewards)
        values = _as_float32(values)
        bootstrap_value = _as_float32(bootstrap_value)

        for name, t in (
            ("log_rhos", log_rhos),
            ("discounts", discounts),
            ("rewards", rewards),
            ("values", values),
        ):
            if t.shape.rank is not None and t.shape.rank != 2:
                raise ValueError(f"{name} must have rank 2 [T, B], got {t.shape}")
        if bootstrap_value.shape.rank is not None and bootstrap_value.shape.rank != 1:
            raise ValueError(f"bootstrap_value must have rank 1 [B], got {bootstrap_value.shape}")

        rhos = tf.exp(log_rhos)
        if clip_rho_threshold is not None:
            clipped_rhos = tf.minimum(_as_float32(clip_rho_threshold), rhos)
        else:
            clipped_rhos = rhos
        cs = _as_float32(lambda_) * tf.minimum(1.0, rhos)

        # V(x_{s+1}) for s = 0..T-1, with V(x_T) = bootstrap_value.
        values_tp1 = tf.concat([values[1:], bootstrap_value[tf.newaxis]], axis=0)
        deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

        # (v_s - V(x_s)) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})),
        # accumulated backwards in time; v_T - V(x_T) = 0.
        def _step(acc, elems):
            discount_c, delta = elems
            return delta + discount_c * acc

        vs_minus_values = tf.scan(
            _step,
            (discounts * cs, deltas),
            initializer=tf.zeros_like(bootstrap_value),
            reverse=True,
        )
        vs = vs_minus_values + values

        vs_tp1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
        if clip_pg_rho_threshold is not None:
            pg_rhos = tf.minimum(_as_float32(clip_pg_rho_threshold), rhos)
        else:
            pg_rhos = rhos
        pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)

        return VTraceReturns(
            vs=tf.stop_gradient(vs),
            pg_advantages=tf.stop_gradient(pg_advantages),
        )


def baseline_loss(vs, values) -> tf.Tensor:
    """Value loss ``0.5 * mean_{T,B}((stop_gradient(vs) - values)^2)``.

    Args:
      vs: float32 ``[T, B]``. Value targets (no gradient flows into them).
      values: float32 ``[T, B]``. ``V(x_s)`` predicted by the learner.

    Returns:
      float32 scalar.
    """
    with tf.name_scope("baseline_loss"):
        vs = tf.stop_gradient(_as_float32(vs))
        values = _as_float32(values)
        return 0.5 * tf.reduce_mean(tf.square(vs - values))


def clip_rewards(rewards, mode: str) -> tf.Tensor:
    """Reward clipping as used for IMPALA.

    Modes:
      * ``"none"``: rewards unchanged (cast to float32).
      * ``"abs_one"``: clip to ``[-1, 1]``.
      * ``"soft_asymmetric"``: IMPALA's DMLab "optimistic asymmetric"
        clipping: ``s = tanh(r / 5)``, result ``5 * s`` for ``r >= 0`` and
        ``5 * 0.3 * s = 1.5 * s`` for ``r < 0``. Positive rewards saturate
        at 5, negative ones at -1.5.

    Args:
      rewards: float ``[...]`` (any shape, normally ``[T, B]``).
      mode: one of ``REWARD_CLIPPING_MODES``.

    Returns:
      float32 tensor with the shape of ``rewards``.

    Raises:
      ValueError: for an unknown ``mode``.
    """
    if mode not in REWARD_CLIPPING_MODES:
        raise ValueError(
            f"Unknown reward clipping mode {mode!r}; expected one of {REWARD_CLIPPING_MODES}"
        )
    rewards = _as_float32(rewards)
    if mode == "none":
        return rewards
    if mode == "abs_one":
        return tf.clip_by_value(rewards, -1.0, 1.0)
    squeezed = tf.tanh(rewards / 5.0)
    return 5.0 * tf.where(rewards < 0.0, 0.3 * squeezed, squeezed)
