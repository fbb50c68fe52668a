"""Action distributions parameterised by one flat vector per step, shared by the agents.

A network's policy head emits ``params`` [..., P]; the distribution turns them into samples,
log-probabilities and entropies. Storing the behaviour policy as that one vector lets the
trajectory code and the losses treat discrete and continuous actions alike.
"""

from __future__ import annotations

import math

import tensorflow as tf

from seedrl.common.wire import EnvSpec

_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Categorical:
    """A softmax policy over A discrete actions; ``params`` are the logits [..., A]."""

    discrete = True

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.param_size = num_actions
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = tf.int32

    def sample(self, params, seed) -> tf.Tensor:
        """params [N, A], a stateless seed [2] -> actions [N] int32."""
        return tf.random.stateless_categorical(params, 1, seed=seed, dtype=tf.int32)[:, 0]

    def mode(self, params) -> tf.Tensor:
        """params [N, A] -> the most likely actions [N] int32 (greedy evaluation)."""
        return tf.argmax(params, axis=-1, output_type=tf.int32)

    def log_prob(self, params, actions) -> tf.Tensor:
        """params [..., A], actions [...] -> log pi(a) [...]."""
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(actions, tf.int32), logits=params
        )

    def entropy(self, params) -> tf.Tensor:
        """params [..., A] -> entropy [...] in nats."""
        log_p = tf.nn.log_softmax(params, axis=-1)
        return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)

    def kl(self, params_p, params_q) -> tf.Tensor:
        """KL(p || q) between two softmax policies [..., A] -> [...]."""
        log_p = tf.nn.log_softmax(params_p, axis=-1)
        log_q = tf.nn.log_softmax(params_q, axis=-1)
        return tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), axis=-1)


class DiagGaussian:
    """A diagonal Gaussian over D continuous action dimensions.

    ``params`` [..., 2D] are the mean followed by the log standard deviation. Samples are not
    squashed: the actor clips them to the action space's bounds before stepping, and the learner
    scores the unclipped sample it drew, so log-probabilities stay exact.
    """

    discrete = False

    def __init__(self, action_size: int):
        self.action_size = action_size
        self.param_size = 2 * action_size
        self.action_shape = (action_size,)
        self.action_dtype = tf.float32

    def split(self, params) -> tuple[tf.Tensor, tf.Tensor]:
        """params [..., 2D] -> (mean [..., D], log_std [..., D])."""
        return params[..., : self.action_size], params[..., self.action_size :]

    def sample(self, params, seed) -> tf.Tensor:
        """params [N, 2D], a stateless seed [2] -> actions [N, D] float32."""
        mean, log_std = self.split(params)
        noise = tf.random.stateless_normal(tf.shape(mean), seed=seed)
        return mean + tf.exp(log_std) * noise

    def mode(self, params) -> tf.Tensor:
        """params [N, 2D] -> the means [N, D] (greedy evaluation)."""
        return self.split(params)[0]

    def log_prob(self, params, actions) -> tf.Tensor:
        """params [..., 2D], actions [..., D] -> log density summed over dimensions [...]."""
        mean, log_std = self.split(params)
        z = (tf.cast(actions, tf.float32) - mean) * tf.exp(-log_std)
        return tf.reduce_sum(-0.5 * tf.square(z) - log_std - _HALF_LOG_2PI, axis=-1)

    def entropy(self, params) -> tf.Tensor:
        """params [..., 2D] -> differential entropy [...] in nats."""
        _, log_std = self.split(params)
        return tf.reduce_sum(log_std + _HALF_LOG_2PI_E, axis=-1)

    def kl(self, params_p, params_q) -> tf.Tensor:
        """KL(p || q) between two diagonal Gaussians [..., 2D] -> [...], summed over
        dimensions."""
        mean_p, log_std_p = self.split(params_p)
        mean_q, log_std_q = self.split(params_q)
        var_p, var_q = tf.exp(2.0 * log_std_p), tf.exp(2.0 * log_std_q)
        return tf.reduce_sum(
            log_std_q - log_std_p + (var_p + tf.square(mean_p - mean_q)) / (2.0 * var_q) - 0.5,
            axis=-1,
        )


def for_env(env_spec: EnvSpec) -> Categorical | DiagGaussian:
    """The distribution matching an environment's action space."""
    if env_spec.discrete:
        return Categorical(env_spec.num_actions)
    if len(env_spec.action_shape) != 1:
        raise ValueError(
            f"{env_spec.env_id}: continuous actions must be a vector, got shape "
            f"{list(env_spec.action_shape)}"
        )
    return DiagGaussian(int(env_spec.action_shape[0]))
