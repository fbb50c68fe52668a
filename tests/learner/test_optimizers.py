"""Optimizers built from spec.learner.optimizer: the configured hyperparameters reach the update."""

import numpy as np
import pytest
import tensorflow as tf

from seedrl.common.config import OptimizerConfig
from seedrl.learner.optimizers import make_optimizer


def _rmsprop_reference(x, grads, lr, rho, epsilon):
    """RMSProp as Keras defines it: v <- rho v + (1 - rho) g^2, x <- x - lr g / sqrt(v + eps),
    with v starting at zero."""
    v = np.zeros_like(x)
    for g in grads:
        v = rho * v + (1 - rho) * g * g
        x = x - lr * g / np.sqrt(v + epsilon)
    return x


@pytest.mark.parametrize("rho", [0.9, 0.99])
def test_rmsprop_uses_the_configured_decay(rho):
    """spec.learner.optimizer.rho is the decay of RMSProp's mean square (IMPALA: 0.99)."""
    config = OptimizerConfig(name="rmsprop", learning_rate=0.01, epsilon=1e-6, rho=rho)
    start = np.array([1.0, -2.0, 0.5], np.float32)
    var = tf.Variable(start)
    opt = make_optimizer(config, [var])
    grads = [
        np.array(g, np.float32) for g in ([0.3, -0.1, 2.0], [0.1, 0.4, -1.0], [-0.2, 0.2, 0.5])
    ]
    for g in grads:
        opt.apply_gradients([(tf.constant(g), var)])
    expected = _rmsprop_reference(start.astype(np.float64), grads, 0.01, rho, 1e-6)
    # float32 arithmetic over three steps: a few units in the last place of values ~1.
    np.testing.assert_allclose(var.numpy(), expected, rtol=0, atol=16 * np.finfo(np.float32).eps)
    other = 0.99 if rho == 0.9 else 0.9
    assert np.max(np.abs(_rmsprop_reference(start, grads, 0.01, other, 1e-6) - expected)) > 1e-3
