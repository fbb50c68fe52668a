"""V-trace for softmax policies given as logits, and the IMPALA losses of such a policy, as
seed_rl writes them: reference helpers for the tests of ``learner/agents/vtrace/losses.py``.

The agent itself works through :mod:`seedrl.learner.distributions` (discrete and continuous
actions alike), so these logits-only forms are used by the tests alone: they check
:func:`~seedrl.learner.agents.vtrace.losses.vtrace_from_importance_weights` and
:func:`~seedrl.learner.agents.vtrace.losses.baseline_loss` through the paper's softmax case.
"""

from typing import Any, NamedTuple

import tensorflow as tf

from seedrl.learner.agents.vtrace.losses import vtrace_from_importance_weights


class VTraceFromLogitsReturns(NamedTuple):
    """Output of :func:`vtrace_from_logits`.

    The first two fields are the same as :class:`VTraceReturns` (so
    ``result.vs`` / ``result.pg_advantages`` work for both types); note
    however that this tuple has five fields, so it cannot be unpacked into
    two names.

    Attributes:
      vs: float32 ``[T, B]``. V-trace value targets (no gradient).
      pg_advantages: float32 ``[T, B]``. Policy-gradient advantages (no
        gradient).
      log_rhos: float32 ``[T, B]``. ``log pi(a|x) - log mu(a|x)``; carries
        gradient through the target-policy logits.
      behaviour_action_log_probs: float32 ``[T, B]``. ``log mu(a_s|x_s)``.
      target_action_log_probs: float32 ``[T, B]``. ``log pi(a_s|x_s)``;
        carries gradient through the target-policy logits.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor
    log_rhos: tf.Tensor
    behaviour_action_log_probs: tf.Tensor
    target_action_log_probs: tf.Tensor


def log_probs_from_logits_and_actions(policy_logits, actions) -> tf.Tensor:
    """Log-probabilities of the taken actions under a softmax policy.

    Args:
      policy_logits: float ``[T, B, A]`` un-normalized log-probabilities.
      actions: int32 or int64 ``[T, B]`` indices in ``[0, A)``.

    Returns:
      float32 ``[T, B]``: ``log pi(actions | x)``. Differentiable wrt
      ``policy_logits``.
    """
    policy_logits = tf.cast(policy_logits, tf.float32)
    actions = tf.convert_to_tensor(actions)
    if not actions.dtype.is_integer:
        raise TypeError(f"actions must be an integer tensor, got {actions.dtype}")
    policy_logits.shape.with_rank(3)
    actions.shape.with_rank(2)
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=policy_logits)


def vtrace_from_logits(
    behaviour_policy_logits, target_policy_logits, actions, *args: Any, **kwargs: Any
) -> VTraceFromLogitsReturns:
    """V-trace for softmax policies given as logits.

    Computes ``log_rhos = log pi(a|x) - log mu(a|x)`` and passes them, with the remaining
    arguments as given, to :func:`vtrace_from_importance_weights`.

    Args:
      behaviour_policy_logits: float32 ``[T, B, A]``. Logits of ``mu`` (the
        actor's policy when the data was generated).
      target_policy_logits: float32 ``[T, B, A]``. Logits of ``pi`` (the
        learner's current policy).
      actions: int32/int64 ``[T, B]``. Actions sampled from ``mu``.
      *args: what :func:`vtrace_from_importance_weights` takes after ``log_rhos``, in its
        order: ``discounts``, ``rewards``, ``values`` (float32 ``[T, B]``) and
        ``bootstrap_value`` (float32 ``[B]``).
      **kwargs: the same by name, and its thresholds and ``lambda_``.

    Returns:
      :class:`VTraceFromLogitsReturns` with fields ``vs``, ``pg_advantages``
      (float32 ``[T, B]``, no gradient), ``log_rhos``,
      ``behaviour_action_log_probs`` and ``target_action_log_probs`` (float32
      ``[T, B]``; the ones depending on ``target_policy_logits`` keep their
      gradient).
    """
    with tf.name_scope("vtrace_from_logits"):
        behaviour_action_log_probs = log_probs_from_logits_and_actions(
            behaviour_policy_logits, actions
        )
        target_action_log_probs = log_probs_from_logits_and_actions(target_policy_logits, actions)
        log_rhos = target_action_log_probs - behaviour_action_log_probs
        returns = vtrace_from_importance_weights(log_rhos, *args, **kwargs)
        return VTraceFromLogitsReturns(
            vs=returns.vs,
            pg_advantages=returns.pg_advantages,
            log_rhos=log_rhos,
            behaviour_action_log_probs=behaviour_action_log_probs,
            target_action_log_probs=target_action_log_probs,
        )


def policy_gradient_loss(policy_logits, actions, advantages) -> tf.Tensor:
    """Policy-gradient loss ``mean_{T,B}(-log pi(a|x) * stop_gradient(A))``.

    Args:
      policy_logits: float32 ``[T, B, A]``. Target-policy logits.
      actions: int32/int64 ``[T, B]``.
      advantages: float32 ``[T, B]`` (e.g. ``VTraceReturns.pg_advantages``);
        no gradient flows into them.

    Returns:
      float32 scalar.
    """
    with tf.name_scope("policy_gradient_loss"):
        log_probs = log_probs_from_logits_and_actions(policy_logits, actions)
        advantages = tf.stop_gradient(tf.cast(advantages, tf.float32))
        return tf.reduce_mean(-log_probs * advantages)


def entropy_loss(policy_logits) -> tf.Tensor:
    """Negative policy entropy, ``mean_{T,B}(sum_a pi(a|x) log pi(a|x))``.

    Minimizing this loss maximizes the entropy of the policy.

    Args:
      policy_logits: float32 ``[..., A]`` (normally ``[T, B, A]``).

    Returns:
      float32 scalar (``<= 0``; equals ``-log(A)`` for a uniform policy).
    """
    with tf.name_scope("entropy_loss"):
        policy_logits = tf.cast(policy_logits, tf.float32)
        log_policy = tf.nn.log_softmax(policy_logits, axis=-1)
        policy = tf.exp(log_policy)
        negative_entropy = tf.reduce_sum(policy * log_policy, axis=-1)
        return tf.reduce_mean(negative_entropy)
