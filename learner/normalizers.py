"""Streaming normalization (running mean and variance) kept in TensorFlow variables.

The statistics are variables of the agent, so they are saved in every checkpoint and read by
inference and training alike. Batches are merged with Chan et al.'s parallel update, which is
exact for any batch sizes (no exponential decay).
"""

from __future__ import annotations

import tensorflow as tf


class RunningMeanStd(tf.Module):
    """Running mean and variance of vectors of a fixed shape.

    Values are normalized as ``(x - mean) / (sqrt(variance + epsilon) + std_epsilon)``, where
    the variance divides the sum of squared deviations by ``count - ddof``; until more than
    ``ddof`` samples were seen they are only centred (the standard deviation is taken as 1).
    The defaults give the population variance plus 1e-8; BatchPPO's ``StreamingNormalize`` is
    ``ddof=1, epsilon=1e-4, std_epsilon=1e-8``.

    Args:
      shape: the shape of one sample.
      clip: normalized values are clipped to [-clip, clip]; 0 disables clipping.
      epsilon: added to the variance before the square root.
      ddof: delta degrees of freedom of the variance: 0 for the population's, 1 for the
        sample's.
      std_epsilon: added to the standard deviation.
    """

    def __init__(
        self,
        shape,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        name: str = "rms",
        ddof: int = 0,
        std_epsilon: float = 0.0,
    ):
        super().__init__(name=name)
        self.clip = clip
        self.epsilon = epsilon
        self.ddof = ddof
        self.std_epsilon = std_epsilon
        self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")
        self.mean = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="mean")
        self.m2 = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="m2")

    @property
    def variance(self) -> tf.Tensor:
        """The variance so far, with ``ddof`` (1 until more than ``ddof`` samples were seen)."""
        return tf.where(
            self.count > self.ddof,
            self.m2 / tf.maximum(self.count - self.ddof, 1.0),
            tf.ones_like(self.m2),
        )

    @property
    def std(self) -> tf.Tensor:
        """What values are divided by: ``sqrt(variance + epsilon) + std_epsilon``, or exactly 1
        until more than ``ddof`` samples were seen (normalizing then only centres)."""
        return tf.where(
            self.count > self.ddof,
            tf.sqrt(self.variance + self.epsilon) + self.std_epsilon,
            tf.ones_like(self.m2),
        )

    def update(self, batch) -> bool:
        """Merges a batch [N, *shape] into the statistics (eagerly); returns False, changing
        nothing, when the merged statistics would not be finite (values so large that their
        squares overflow): one such batch would otherwise turn every later normalized value
        into NaN."""
        x = tf.cast(batch, tf.float64)
        n = tf.cast(tf.shape(x)[0], tf.float64)
        batch_mean = tf.math.divide_no_nan(tf.reduce_sum(x, axis=0), n)
        batch_m2 = tf.reduce_sum(tf.square(x - batch_mean), axis=0)
        total = self.count + n
        weight = tf.math.divide_no_nan(n, total)  # an empty batch changes nothing
        delta = batch_mean - self.mean
        mean = self.mean + delta * weight
        m2 = self.m2 + batch_m2 + tf.square(delta) * self.count * weight
        if not bool(
            tf.reduce_all(tf.math.is_finite(mean)) and tf.reduce_all(tf.math.is_finite(m2))
        ):
            return False
        self.mean.assign(mean)
        self.m2.assign(m2)
        self.count.assign(total)
        return True

    def normalize(self, x, center: bool = True) -> tf.Tensor:
        """(x - mean) / std, or x / std with ``center=False``, clipped; float32."""
        mean = tf.cast(self.mean, tf.float32) if center else 0.0
        std = tf.cast(self.std, tf.float32)
        out = (tf.cast(x, tf.float32) - mean) / std
        return tf.clip_by_value(out, -self.clip, self.clip) if self.clip else out
