"""Optimizers from the Experiment's ``spec.learner.optimizer``."""

from __future__ import annotations

import tensorflow as tf

from seedrl.common.config import OptimizerConfig


class _PreReduced:
    """Mixin for an optimizer whose gradients arrive already all-reduced over the training
    replicas (and clipped to their global norm), as :class:`seedrl.learner.devices.ReplicatedStep`
    hands them over: Keras would otherwise sum them across replicas a second time, in replica
    context, before it applies them. (Keras 3's hook for that sum is this private method; the
    multi-replica equivalence tests fail loudly if it ever stops being called.)"""

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars


_OPTIMIZERS = {
    "adam": tf.keras.optimizers.Adam,
    "rmsprop": tf.keras.optimizers.RMSprop,
    "sgd": tf.keras.optimizers.SGD,
}
_PRE_REDUCED = {
    name: type(f"PreReduced{cls.__name__}", (_PreReduced, cls), {})
    for name, cls in _OPTIMIZERS.items()
}


def make_optimizer(
    config: OptimizerConfig, variables, pre_reduced: bool = False
) -> tf.keras.optimizers.Optimizer:
    """Creates and builds the configured optimizer over ``variables``.

    Building up front creates the slot variables, so a checkpoint can restore them before the
    first training step. Under a distribution strategy, create it inside the strategy's scope
    with ``pre_reduced=True`` (gradients come all-reduced from the replicated step).
    """
    if config.name not in _OPTIMIZERS:
        raise ValueError(f"unknown optimizer {config.name!r}")
    cls = (_PRE_REDUCED if pre_reduced else _OPTIMIZERS)[config.name]
    if config.name == "adam":
        opt = cls(config.learning_rate, epsilon=config.epsilon)
    elif config.name == "rmsprop":
        opt = cls(
            config.learning_rate,
            rho=config.rho,
            epsilon=config.epsilon,
            momentum=config.momentum,
        )
    else:
        opt = cls(config.learning_rate, momentum=config.momentum)
    opt.build(variables)
    return opt


def apply_gradients(
    optimizer, tape: tf.GradientTape, loss, variables, clip_norm: float
) -> tf.Tensor:
    """Takes one optimizer step on ``loss``, clipping gradients to a global norm (0: no
    clipping); returns the global norm before clipping. The step is skipped when that norm is
    not finite (see :func:`clip_and_apply`)."""
    return clip_and_apply(optimizer, tape.gradient(loss, variables), variables, clip_norm)


def clip_and_apply(optimizer, grads, variables, clip_norm: float) -> tf.Tensor:
    """Clips ``grads`` to a global norm (0: no clipping), applies them and returns the global
    norm before clipping.

    When that norm is NaN or infinite (a NaN or infinite loss or gradient anywhere, e.g. from
    an observation large enough to overflow the network), nothing changes: not the variables,
    not the optimizer's moments or step count. The caller sees the non-finite norm and counts a
    skipped update; one bad batch costs one update, never the run. One device only: under a
    distribution strategy the check runs between two replicated calls (see
    ``seedrl.learner.devices.ReplicatedStep``), as a condition cannot hold a cross-replica
    update.
    """
    grad_norm = tf.linalg.global_norm(grads)

    def apply():
        clip_and_apply_finite(optimizer, grads, variables, clip_norm, grad_norm)
        return tf.constant(True)

    tf.cond(tf.math.is_finite(grad_norm), apply, lambda: tf.constant(False))
    return grad_norm


def clip_and_apply_finite(
    optimizer, grads, variables, clip_norm: float, grad_norm: tf.Tensor
) -> None:
    """Clips ``grads`` (whose global norm is ``grad_norm``, known to be finite) to
    ``clip_norm`` (0: no clipping) and applies them."""
    if clip_norm > 0:
        grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=grad_norm)
    optimizer.apply_gradients(zip(grads, variables))
