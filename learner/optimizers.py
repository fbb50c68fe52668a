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
