"""Optimizers from the Experiment's ``spec.learner.optimizer``."""

from __future__ import annotations

import tensorflow as tf

from common.config import OptimizerConfig


def make_optimizer(config: OptimizerConfig, variables) -> tf.keras.optimizers.Optimizer:
    """Creates and builds the configured optimizer over ``variables``.

    Building up front creates the slot variables, so a checkpoint can restore them before the
    first training step.
    """
    if config.name == "adam":
        opt = tf.keras.optimizers.Adam(config.learning_rate, epsilon=config.epsilon)
    elif config.name == "rmsprop":
        opt = tf.keras.optimizers.RMSprop(config.learning_rate, epsilon=config.epsilon,
                                          momentum=config.momentum)
    elif config.name == "sgd":
        opt = tf.keras.optimizers.SGD(config.learning_rate, momentum=config.momentum)
    else:
        raise ValueError(f"unknown optimizer {config.name!r}")
    opt.build(variables)
    return opt


def apply_gradients(optimizer, tape: tf.GradientTape, loss, variables,
                    clip_norm: float) -> tf.Tensor:
    """Takes one optimizer step on ``loss``, clipping gradients to a global norm (0: no
    clipping); returns the global norm before clipping."""
    grads = tape.gradient(loss, variables)
    grad_norm = tf.linalg.global_norm(grads)
    if clip_norm > 0:
        grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=grad_norm)
    optimizer.apply_gradients(zip(grads, variables))
    return grad_norm
