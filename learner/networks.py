"""Networks shared by the agents, with torsos chosen by name in ``spec.agent.network``.

Torsos:
  * ``mlp``: dense layers over flattened vector observations.
  * ``nature_cnn``: the DQN conv net of Mnih et al. (2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, dense.
  * ``impala_resnet``: the deep ResNet of IMPALA (Espeholt et al. 2018): per stack a 3x3 conv,
    a 3x3/2 max-pool and two residual blocks of two 3x3 convs; three stacks (16, 32, 32 channels)
    make 15 conv layers; then a dense layer.
  * ``football_smm``: SEED RL's network for Football's super-minimap, the same residual stacks
    with four stages (16, 32, 32, 32) over the 72x96 planes.

Any torso may be followed by an LSTM core (``lstmSize`` > 0); the policy and value heads read
its output. A feed-forward ``mlp`` keeps separate policy and value streams instead (as BatchPPO
does), so the value loss cannot distort the policy's features; the conv torsos are shared, as in
IMPALA, because a second conv stack would double the cost of inference.

Frames (uint8) are scaled to [0, 1] inside the network so that they travel and are stored as
bytes. Keras 3 layers held in a plain ``tf.Module`` are not tracked, so everything here
subclasses ``tf.keras.Model`` or ``tf.keras.layers.Layer``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from seedrl.common.config import NetworkConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner.distributions import Categorical, DiagGaussian

#: Default residual channels per stack when ``resnetChannels`` is not set.
DEFAULT_RESNET_CHANNELS = {"impala_resnet": (16, 32, 32), "football_smm": (16, 32, 32, 32)}


def _scaled_float(observations) -> tf.Tensor:
    """Casts observations to float32, mapping uint8 frames to [0, 1] (bfloat16 inputs of a
    mixed-precision torso, already scaled, pass through)."""
    if observations.dtype == tf.uint8:
        return tf.cast(observations, tf.float32) * (1.0 / 255.0)
    if observations.dtype == tf.bfloat16:
        return observations
    return tf.cast(observations, tf.float32)


def _dense(units: int, activation, gain: float, name: str) -> tf.keras.layers.Dense:
    # Orthogonal init with gain sqrt(2) is the usual choice for policy-gradient nets.
    return tf.keras.layers.Dense(units, activation=activation, name=name,
                                 kernel_initializer=tf.keras.initializers.Orthogonal(gain))


class MLPTorso(tf.keras.layers.Layer):
    """Dense layers over flattened observations: [N, *obs] -> [N, hidden_sizes[-1]]."""

    def __init__(self, hidden_sizes, activation: str, name: str = "mlp"):
        super().__init__(name=name)
        self.layers_ = [_dense(h, activation, np.sqrt(2), f"{name}_{i}")
                        for i, h in enumerate(hidden_sizes)]

    def call(self, observations):
        x = _scaled_float(observations)
        x = tf.reshape(x, [tf.shape(x)[0], -1])
        for layer in self.layers_:
            x = layer(x)
        return x


class NatureTorso(tf.keras.layers.Layer):
    """The Nature-DQN conv net: frames [N, H, W, C] -> [N, dense_size]."""

    def __init__(self, dense_size: int, name: str = "nature_cnn"):
        super().__init__(name=name)
        gain = np.sqrt(2)
        init = tf.keras.initializers.Orthogonal(gain)
        self.convs = [
            tf.keras.layers.Conv2D(32, 8, 4, activation="relu", kernel_initializer=init),
            tf.keras.layers.Conv2D(64, 4, 2, activation="relu", kernel_initializer=init),
            tf.keras.layers.Conv2D(64, 3, 1, activation="relu", kernel_initializer=init),
        ]
        self.flatten = tf.keras.layers.Flatten()
        self.dense = _dense(dense_size, "relu", gain, "nature_dense")

    def call(self, observations):
        x = _scaled_float(observations)
        for conv in self.convs:
            x = conv(x)
        return self.dense(self.flatten(x))


class ResidualBlock(tf.keras.layers.Layer):
    """relu -> 3x3 conv -> relu -> 3x3 conv, added to the input."""

    def __init__(self, channels: int, name: str):
        super().__init__(name=name)
        self.conv0 = tf.keras.layers.Conv2D(channels, 3, padding="same")
        self.conv1 = tf.keras.layers.Conv2D(channels, 3, padding="same")

    def call(self, x):
        y = self.conv0(tf.nn.relu(x))
        y = self.conv1(tf.nn.relu(y))
        return x + y


class ResNetTorso(tf.keras.layers.Layer):
    """IMPALA's deep ResNet: frames [N, H, W, C] -> [N, dense_size].

    Each stack is a 3x3 conv, a 3x3 max-pool of stride 2 and two residual blocks.
    """

    def __init__(self, channels, dense_size: int, name: str = "resnet"):
        super().__init__(name=name)
        self.stacks = []
        for i, ch in enumerate(channels):
            self.stacks.append((
                tf.keras.layers.Conv2D(ch, 3, padding="same", name=f"stack{i}_conv"),
                tf.keras.layers.MaxPool2D(3, 2, padding="same"),
                ResidualBlock(ch, f"stack{i}_block0"),
                ResidualBlock(ch, f"stack{i}_block1"),
            ))
        self.flatten = tf.keras.layers.Flatten()
        self.dense = _dense(dense_size, "relu", np.sqrt(2), "resnet_dense")

    def call(self, observations):
        x = _scaled_float(observations)
        for conv, pool, block0, block1 in self.stacks:
            x = block1(block0(pool(conv(x))))
        return self.dense(self.flatten(tf.nn.relu(x)))


class _OptionalLSTM(tf.keras.Model):
    """A model with an optional LSTM core ``self.core`` of ``self.lstm_size`` units."""

    core: tf.keras.layers.LSTMCell | None
    lstm_size: int

    @property
    def recurrent(self) -> bool:
        """Whether the network carries an LSTM state between steps."""
        return self.core is not None

    def initial_state(self, batch_size) -> list[tf.Tensor]:
        """The zero state of ``batch_size`` fresh episodes: [h, c] of [B, lstm] or []."""
        if not self.core:
            return []
        return [tf.zeros([batch_size, self.lstm_size]), tf.zeros([batch_size, self.lstm_size])]


class ActorCritic(_OptionalLSTM):
    """Torso, optional LSTM core, and policy and value heads.

    ``call`` and :meth:`step` act on one step of a batch; :meth:`unroll` runs a time-major
    sequence, resetting the recurrent state where an episode begins.

    Args:
      torso: the feature extractor for the policy (and the value, unless ``value_torso``).
      value_torso: a separate feature extractor for the value, or None to share ``torso``.
      lstm_size: units of the LSTM core; 0 for none.
      distribution: the action distribution the policy head parameterises.
    """

    def __init__(self, torso: tf.keras.layers.Layer, value_torso: tf.keras.layers.Layer | None,
                 lstm_size: int, distribution: Categorical | DiagGaussian):
        super().__init__(name="actor_critic")
        self.torso = torso
        self.value_torso = value_torso
        self.lstm_size = lstm_size
        self.core = tf.keras.layers.LSTMCell(lstm_size, name="lstm") if lstm_size else None
        self.distribution = distribution
        if isinstance(distribution, Categorical):
            # A small last layer starts the policy close to uniform.
            self.policy_head = _dense(distribution.param_size, None, 0.01, "policy_logits")
            self.log_std = None
        else:
            self.policy_head = _dense(distribution.action_size, "tanh", 0.01, "policy_mean")
            self.log_std = self.add_weight(name="log_std", shape=(distribution.action_size,),
                                           initializer="zeros", trainable=True)
        self.value_head = _dense(1, None, 1.0, "value")

    def _heads(self, features, value_features):
        head = self.policy_head(features)
        if self.log_std is None:
            params = head
        else:
            params = tf.concat([head, tf.zeros_like(head) + self.log_std], axis=-1)
        return params, tf.squeeze(self.value_head(value_features), axis=-1)

    def step(self, observations, state):
        """One step: observations [N, *obs], state -> (params [N, P], values [N], new state)."""
        features = self.torso(observations)
        value_features = self.value_torso(observations) if self.value_torso else features
        if self.core:
            features, state = self.core(features, state)
            value_features = features
        params, values = self._heads(features, value_features)
        return params, values, state

    def call(self, observations):
        """A feed-forward step from the zero state: observations [N, *obs] -> (params, values)."""
        params, values, _ = self.step(observations,
                                      self.initial_state(tf.shape(observations)[0]))
        return params, values

    def unroll(self, observations, first, state):
        """A time-major sequence.

        Args:
          observations: [T, B, *obs].
          first: bool [T, B], true where x_t starts a new episode (its state is then reset
            to zero before x_t is read, row 0 included).
          state: the recurrent state before row 0.

        Returns:
          params [T, B, P], values [T, B].
        """
        shape = tf.shape(observations)
        t, b = shape[0], shape[1]
        flat = tf.reshape(observations, tf.concat([[t * b], shape[2:]], 0))
        features = self.torso(flat)
        value_features = self.value_torso(flat) if self.value_torso else features
        if self.core:
            features, _ = unroll_core(self.core, tf.reshape(features, [t, b, -1]), first, state)
            features = tf.reshape(features, [t * b, self.lstm_size])
            value_features = features
        params, values = self._heads(features, value_features)
        return (tf.reshape(params, [t, b, self.distribution.param_size]),
                tf.reshape(values, [t, b]))


def unroll_core(core: tf.keras.layers.LSTMCell, features, first, state):
    """Runs an LSTM cell over a time-major sequence, zeroing the state where episodes begin.

    Args:
      core: the cell.
      features: [T, B, F].
      first: bool [T, B]; where true the state is reset to zero before that row is read (the
        zero state is the initial state, so a state that is already reset is unchanged).
      state: [h, c] before row 0, each [B, units].

    Returns:
      outputs [T, B, units] and the final state [h, c].
    """
    keep = 1.0 - tf.cast(first, tf.float32)[:, :, None]

    def _step(carry, inputs):
        h, c, _ = carry
        x, k = inputs
        out, (h, c) = core(x, [h * k, c * k])
        return h, c, out

    zeros = tf.zeros_like(state[0])
    hs, cs, outputs = tf.scan(_step, (features, keep), initializer=(state[0], state[1], zeros))
    return outputs, [hs[-1], cs[-1]]


class DuelingQNetwork(_OptionalLSTM):
    """Torso, optional LSTM core and a dueling head: Q(x, a) = V(x) + A(x, a) - mean_a A(x, a).

    Args:
      torso: the feature extractor.
      lstm_size: units of the LSTM core; 0 for none.
      num_actions: A.
      head_size: hidden units of each of the value and advantage streams.
    """

    def __init__(self, torso: tf.keras.layers.Layer, lstm_size: int, num_actions: int,
                 head_size: int = 256, name: str = "dueling_q"):
        super().__init__(name=name)
        self.torso = torso
        self.lstm_size = lstm_size
        self.num_actions = num_actions
        self.core = tf.keras.layers.LSTMCell(lstm_size, name="lstm") if lstm_size else None
        self.value_hidden = _dense(head_size, "relu", np.sqrt(2), "value_hidden")
        self.value_out = _dense(1, None, 1.0, "value")
        self.advantage_hidden = _dense(head_size, "relu", np.sqrt(2), "advantage_hidden")
        self.advantage_out = _dense(num_actions, None, 1.0, "advantage")

    def _head(self, features):
        value = self.value_out(self.value_hidden(features))
        advantage = self.advantage_out(self.advantage_hidden(features))
        return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)

    def step(self, observations, state):
        """One step: observations [N, *obs], state -> (Q [N, A], new state)."""
        features = self.torso(observations)
        if self.core:
            features, state = self.core(features, state)
        return self._head(features), state

    def call(self, observations):
        """A feed-forward step from the zero state: observations [N, *obs] -> Q [N, A]."""
        return self.step(observations, self.initial_state(tf.shape(observations)[0]))[0]

    def unroll(self, observations, first, state):
        """A time-major sequence: observations [T, B, *obs], first bool [T, B], state ->
        (Q [T, B, A], final state). The state is reset where ``first`` is true."""
        shape = tf.shape(observations)
        t, b = shape[0], shape[1]
        flat = tf.reshape(observations, tf.concat([[t * b], shape[2:]], 0))
        features = self.torso(flat)
        if self.core:
            features, state = unroll_core(self.core, tf.reshape(features, [t, b, -1]), first,
                                          state)
            features = tf.reshape(features, [t * b, self.lstm_size])
        q = self._head(features)
        return tf.reshape(q, [t, b, self.num_actions]), state


class MixedPrecision(tf.keras.layers.Layer):
    """Runs a torso in bfloat16 with float32 variables: [N, *obs] -> float32 features.

    Observations are cast to bfloat16 (uint8 frames scaled to [0, 1] there), so the torso's
    layers (built under the ``mixed_bfloat16`` policy) compute in bfloat16; the features are
    cast back, so the LSTM core, the heads and the losses stay float32.
    """

    def __init__(self, torso: tf.keras.layers.Layer, name: str):
        super().__init__(name=f"{name}_mixed")
        self.torso = torso

    def call(self, observations):
        if observations.dtype == tf.uint8:
            # Straight to bfloat16 (every 0..255 is exact there): float32 first, then
            # bfloat16, cost 8% of a Pong learner's CPU in the conversion alone.
            x = tf.cast(observations, tf.bfloat16) * tf.constant(1.0 / 255.0, tf.bfloat16)
        else:
            x = tf.cast(observations, tf.bfloat16)
        return tf.cast(self.torso(x), tf.float32)


def make_torso(config: NetworkConfig, env_spec: EnvSpec, name: str) -> tf.keras.layers.Layer:
    """The configured torso, checking that it suits the observations."""
    rank = len(env_spec.observation_shape)
    if config.name != "mlp" and rank != 3:
        raise ValueError(f"network {config.name!r} reads frames [H, W, C]; {env_spec.env_id} "
                         f"observes shape {list(env_spec.observation_shape)}")
    if config.precision == "float32":
        return _torso(config, name)
    # Layers take their dtype policy from the global one when they are made.
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        torso = _torso(config, name)
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)
    return MixedPrecision(torso, name)


def _torso(config: NetworkConfig, name: str) -> tf.keras.layers.Layer:
    if config.name == "mlp":
        return MLPTorso(config.hidden_sizes, config.activation, name)
    if config.name == "nature_cnn":
        return NatureTorso(config.dense_size, name)
    channels = config.resnet_channels or DEFAULT_RESNET_CHANNELS[config.name]
    return ResNetTorso(channels, config.dense_size, name)


def make_actor_critic(config: NetworkConfig, env_spec: EnvSpec,
                      distribution: Categorical | DiagGaussian) -> ActorCritic:
    """Builds the configured actor-critic network and creates its variables."""
    torso = make_torso(config, env_spec, "torso")
    separate_value = config.name == "mlp" and not config.lstm_size
    value_torso = make_torso(config, env_spec, "value_torso") if separate_value else None
    net = ActorCritic(torso, value_torso, config.lstm_size, distribution)
    obs = tf.zeros([1] + list(env_spec.observation_shape), env_spec.observation_dtype)
    net.step(obs, net.initial_state(1))
    return net
