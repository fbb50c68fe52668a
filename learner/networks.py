"""Networks shared by the agents.

Keras 3 layers held inside a plain ``tf.Module`` are not tracked, so networks subclass
``tf.keras.Model``; their variables are then found by optimizers and checkpoints.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def _mlp(hidden_sizes, activation: str, name: str) -> list[tf.keras.layers.Layer]:
    # Orthogonal init with gain sqrt(2) is the usual choice for policy-gradient MLPs.
    return [tf.keras.layers.Dense(h, activation=activation, name=f"{name}_{i}",
                                  kernel_initializer=tf.keras.initializers.Orthogonal(np.sqrt(2)))
            for i, h in enumerate(hidden_sizes)]


class PolicyValueMLP(tf.keras.Model):
    """Separate MLP streams for the policy logits and the value, over flattened observations.

    Separate streams (as in BatchPPO) keep the value loss from distorting the policy features.

    Args:
      num_actions: A, the number of discrete actions.
      hidden_sizes: widths of the hidden layers of each stream.
      activation: activation of the hidden layers.
    """

    def __init__(self, num_actions: int, hidden_sizes, activation: str = "tanh"):
        super().__init__(name="policy_value_mlp")
        self.policy_torso = _mlp(hidden_sizes, activation, "policy")
        self.value_torso = _mlp(hidden_sizes, activation, "value")
        # A small last layer starts the policy close to uniform.
        self.policy_head = tf.keras.layers.Dense(
            num_actions, name="policy_logits",
            kernel_initializer=tf.keras.initializers.Orthogonal(0.01))
        self.value_head = tf.keras.layers.Dense(
            1, name="value", kernel_initializer=tf.keras.initializers.Orthogonal(1.0))

    def call(self, observations):
        """observations [N, *obs_shape] (any numeric dtype) -> (logits [N, A], values [N])."""
        x = tf.cast(observations, tf.float32)
        x = tf.reshape(x, [tf.shape(x)[0], -1])
        p, v = x, x
        for layer in self.policy_torso:
            p = layer(p)
        for layer in self.value_torso:
            v = layer(v)
        return self.policy_head(p), tf.squeeze(self.value_head(v), axis=-1)
