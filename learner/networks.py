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
its output. As in SEED RL's networks and the R2D2 paper, the core also reads the previous action
(one-hot, or the normalised vector of a continuous action) and the reward that followed it,
clipped to [-1, 1], unless ``actionRewardInputs`` is off. Both are zero on an episode's first
step. The previous action rides in the recurrent state (its last entry), so an unroll that starts
mid-episode knows it; the reward is an input of each step. A feed-forward ``mlp`` keeps separate
policy and value streams instead (as BatchPPO does), so the value loss cannot distort the
policy's features; the conv torsos are shared, as in IMPALA, because a second conv stack would
double the cost of inference.

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
    return tf.keras.layers.Dense(
        units,
        activation=activation,
        name=name,
        kernel_initializer=tf.keras.initializers.Orthogonal(gain),
    )


class MLPTorso(tf.keras.layers.Layer):
    """Dense layers over flattened observations: [N, *obs] -> [N, hidden_sizes[-1]]."""

    def __init__(self, hidden_sizes, activation: str, name: str = "mlp"):
        super().__init__(name=name)
        self.layers_ = [
            _dense(h, activation, np.sqrt(2), f"{name}_{i}") for i, h in enumerate(hidden_sizes)
        ]

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
            self.stacks.append(
                (
                    tf.keras.layers.Conv2D(ch, 3, padding="same", name=f"stack{i}_conv"),
                    tf.keras.layers.MaxPool2D(3, 2, padding="same"),
                    ResidualBlock(ch, f"stack{i}_block0"),
                    ResidualBlock(ch, f"stack{i}_block1"),
                )
            )
        self.flatten = tf.keras.layers.Flatten()
        self.dense = _dense(dense_size, "relu", np.sqrt(2), "resnet_dense")

    def call(self, observations):
        x = _scaled_float(observations)
        for conv, pool, block0, block1 in self.stacks:
            x = block1(block0(pool(conv(x))))
        return self.dense(self.flatten(tf.nn.relu(x)))


class _OptionalLSTM(tf.keras.Model):
    """A model with an optional LSTM core ``self.core`` of ``self.lstm_size`` units that may also
    read the previous action and reward (``self.action_size`` > 0: the width of an encoded
    action; 0 when the core reads only the torso's features)."""

    core: tf.keras.layers.LSTMCell | None
    lstm_size: int
    action_size: int = 0
    discrete_actions: bool = True

    def _init_core(self, lstm_size: int, action_size: int, discrete: bool) -> None:
        self.lstm_size = lstm_size
        self.core = tf.keras.layers.LSTMCell(lstm_size, name="lstm") if lstm_size else None
        self.action_size = action_size if lstm_size else 0
        self.discrete_actions = discrete

    @property
    def recurrent(self) -> bool:
        """Whether the network carries an LSTM state between steps."""
        return self.core is not None

    def initial_state(self, batch_size) -> list[tf.Tensor]:
        """The state of ``batch_size`` fresh episodes: [] for a feed-forward network, else
        [h, c] of [B, lstm] zeros, plus the encoded previous action [B, action_size] (zeros)
        when the core reads it."""
        if not self.core:
            return []
        state = [tf.zeros([batch_size, self.lstm_size]), tf.zeros([batch_size, self.lstm_size])]
        if self.action_size:
            state.append(tf.zeros([batch_size, self.action_size]))
        return state

    def encode_actions(self, actions) -> tf.Tensor:
        """Actions [..] (int) or [.., D] (float, normalised) -> the core's input [.., action_size]:
        one-hot for discrete actions, clipped to [-1, 1] for continuous ones."""
        if self.discrete_actions:
            return tf.one_hot(tf.cast(actions, tf.int32), self.action_size)
        return tf.clip_by_value(tf.cast(actions, tf.float32), -1.0, 1.0)

    def record_action(self, state, actions) -> list:
        """The state with ``actions`` [N, ...] as the previous action of the next step (for the
        caller that chose them after :meth:`step`); unchanged when the core does not read
        actions."""
        if not self.action_size:
            return list(state)
        return list(state[:2]) + [self.encode_actions(actions)]

    def _core_inputs(self, features, state, rewards):
        """One step's core input: features, then the clipped reward and the previous action."""
        if not self.action_size:
            return features
        if rewards is None:
            rewards = tf.zeros(tf.shape(features)[:1])
        reward = tf.clip_by_value(tf.cast(rewards, tf.float32), -1.0, 1.0)[:, None]
        return tf.concat([features, reward, state[2]], axis=-1)

    def _core_step(self, features, state, rewards):
        """Runs the core on one step; returns (output, new state) (the previous-action entry is
        kept; :meth:`record_action` replaces it)."""
        out, (h, c) = self.core(self._core_inputs(features, state, rewards), list(state[:2]))
        return out, [h, c] + list(state[2:])

    def _core_unroll(self, features, first, state, actions, rewards):
        """Runs the core over [T, B, F] features (see :func:`unroll_core`), building each row's
        previous action from ``actions`` [T, B, ...] (row 0's from ``state``) and zeroing the
        action and reward inputs where an episode begins."""
        if not self.action_size:
            out, final = unroll_core(self.core, features, first, state[:2])
            return out, final
        keep = 1.0 - tf.cast(first, tf.float32)
        encoded = self.encode_actions(actions)  # [T, B, D]
        prev = tf.concat([state[2][None], encoded[:-1]], axis=0) * keep[:, :, None]
        if rewards is None:
            rewards = tf.zeros_like(keep)
        reward = tf.clip_by_value(tf.cast(rewards, tf.float32), -1.0, 1.0) * keep
        inputs = tf.concat([features, reward[:, :, None], prev], axis=-1)
        out, final = unroll_core(self.core, inputs, first, state[:2])
        return out, final + [encoded[-1]]


class ActorCritic(_OptionalLSTM):
    """Torso, optional LSTM core, and policy and value heads.

    ``call`` and :meth:`step` act on one step of a batch; :meth:`unroll` runs a time-major
    sequence, resetting the recurrent state where an episode begins.

    Args:
      torso: the feature extractor for the policy (and the value, unless ``value_torso``).
      value_torso: a separate feature extractor for the value, or None to share ``torso``.
      lstm_size: units of the LSTM core; 0 for none.
      distribution: the action distribution the policy head parameterises.
      action_reward_inputs: whether the core also reads the previous action and reward.
      initial_std: a Gaussian policy's standard deviation before training.
    """

    def __init__(
        self,
        torso: tf.keras.layers.Layer,
        value_torso: tf.keras.layers.Layer | None,
        lstm_size: int,
        distribution: Categorical | DiagGaussian,
        action_reward_inputs: bool = False,
        initial_std: float = 1.0,
    ):
        super().__init__(name="actor_critic")
        self.torso = torso
        self.value_torso = value_torso
        action_size = (
            distribution.num_actions if distribution.discrete else distribution.action_size
        )
        self._init_core(
            lstm_size, action_size if action_reward_inputs else 0, distribution.discrete
        )
        self.distribution = distribution
        if isinstance(distribution, Categorical):
            # A small last layer starts the policy close to uniform.
            self.policy_head = _dense(distribution.param_size, None, 0.01, "policy_logits")
            self.log_std = None
        else:
            self.policy_head = _dense(distribution.action_size, "tanh", 0.01, "policy_mean")
            self.log_std = self.add_weight(
                name="log_std",
                shape=(distribution.action_size,),
                initializer=tf.keras.initializers.Constant(float(np.log(initial_std))),
                trainable=True,
            )
        self.value_head = _dense(1, None, 1.0, "value")

    def _heads(self, features, value_features):
        head = self.policy_head(features)
        if self.log_std is None:
            params = head
        else:
            params = tf.concat([head, tf.zeros_like(head) + self.log_std], axis=-1)
        return params, tf.squeeze(self.value_head(value_features), axis=-1)

    def step(self, observations, state, rewards=None):
        """One step: observations [N, *obs], state, the rewards [N] that led to them (zero on an
        episode's first step; read only by a core with action and reward inputs) -> (params
        [N, P], values [N], new state)."""
        features = self.torso(observations)
        value_features = self.value_torso(observations) if self.value_torso else features
        if self.core:
            features, state = self._core_step(features, state, rewards)
            value_features = features
        params, values = self._heads(features, value_features)
        return params, values, state

    def call(self, observations):
        """A feed-forward step from the zero state: observations [N, *obs] -> (params, values)."""
        params, values, _ = self.step(observations, self.initial_state(tf.shape(observations)[0]))
        return params, values

    def unroll(self, observations, first, state, actions=None, rewards=None):
        """A time-major sequence.

        Args:
          observations: [T, B, *obs].
          first: bool [T, B], true where x_t starts a new episode (its state is then reset
            to zero before x_t is read, row 0 included).
          state: the recurrent state before row 0.
          actions: [T, B, ...] the action taken at each row (row t - 1's is row t's previous
            action); needed only by a core with action and reward inputs.
          rewards: [T, B] the reward that led to each row's observation; ditto.

        Returns:
          params [T, B, P], values [T, B].
        """
        shape = tf.shape(observations)
        t, b = shape[0], shape[1]
        flat = tf.reshape(observations, tf.concat([[t * b], shape[2:]], 0))
        features = self.torso(flat)
        value_features = self.value_torso(flat) if self.value_torso else features
        if self.core:
            features, _ = self._core_unroll(
                tf.reshape(features, [t, b, -1]), first, state, actions, rewards
            )
            features = tf.reshape(features, [t * b, self.lstm_size])
            value_features = features
        params, values = self._heads(features, value_features)
        return (
            tf.reshape(params, [t, b, self.distribution.param_size]),
            tf.reshape(values, [t, b]),
        )


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
      action_reward_inputs: whether the core also reads the previous action and reward.
    """

    def __init__(
        self,
        torso: tf.keras.layers.Layer,
        lstm_size: int,
        num_actions: int,
        head_size: int = 256,
        name: str = "dueling_q",
        action_reward_inputs: bool = False,
    ):
        super().__init__(name=name)
        self.torso = torso
        self.num_actions = num_actions
        self._init_core(lstm_size, num_actions if action_reward_inputs else 0, True)
        self.value_hidden = _dense(head_size, "relu", np.sqrt(2), "value_hidden")
        self.value_out = _dense(1, None, 1.0, "value")
        self.advantage_hidden = _dense(head_size, "relu", np.sqrt(2), "advantage_hidden")
        self.advantage_out = _dense(num_actions, None, 1.0, "advantage")

    def _head(self, features):
        value = self.value_out(self.value_hidden(features))
        advantage = self.advantage_out(self.advantage_hidden(features))
        return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)

    def step(self, observations, state, rewards=None):
        """One step: observations [N, *obs], state, the rewards [N] that led to them (read only
        by a core with action and reward inputs) -> (Q [N, A], new state)."""
        features = self.torso(observations)
        if self.core:
            features, state = self._core_step(features, state, rewards)
        return self._head(features), state

    def call(self, observations):
        """A feed-forward step from the zero state: observations [N, *obs] -> Q [N, A]."""
        return self.step(observations, self.initial_state(tf.shape(observations)[0]))[0]

    def unroll(self, observations, first, state, actions=None, rewards=None):
        """A time-major sequence: observations [T, B, *obs], first bool [T, B], state, and for
        a core with action and reward inputs the actions [T, B] and rewards [T, B] of the rows
        -> (Q [T, B, A], final state). The state is reset where ``first`` is true."""
        shape = tf.shape(observations)
        t, b = shape[0], shape[1]
        flat = tf.reshape(observations, tf.concat([[t * b], shape[2:]], 0))
        features = self.torso(flat)
        if self.core:
            features, state = self._core_unroll(
                tf.reshape(features, [t, b, -1]), first, state, actions, rewards
            )
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
        raise ValueError(
            f"network {config.name!r} reads frames [H, W, C]; {env_spec.env_id} "
            f"observes shape {list(env_spec.observation_shape)}"
        )
    precision = config.precision
    if precision == "auto":
        # Resolved by the learner for its devices before it builds the agent; a network
        # built on its own (a policy evaluated here, a benchmark) resolves it for this one.
        from seedrl.learner.devices import choose_precision

        precision = choose_precision(config).precision
    if precision == "float32":
        return _torso(config, name)
    # Layers take their dtype policy from the global one when they are made.
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        torso = _torso(config, name)
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)
    # Created here, outside the wrapper's name scope, the variables are named as a float32
    # torso's are: a checkpoint restores into either precision (auto may pick bfloat16 where
    # a run trains and float32 where its policy is evaluated or the run resumes).
    torso(tf.zeros([1, *env_spec.observation_shape], tf.bfloat16))
    return MixedPrecision(torso, name)


def _torso(config: NetworkConfig, name: str) -> tf.keras.layers.Layer:
    if config.name == "mlp":
        return MLPTorso(config.hidden_sizes, config.activation, name)
    if config.name == "nature_cnn":
        return NatureTorso(config.dense_size, name)
    channels = config.resnet_channels or DEFAULT_RESNET_CHANNELS[config.name]
    return ResNetTorso(channels, config.dense_size, name)


def make_actor_critic(
    config: NetworkConfig, env_spec: EnvSpec, distribution: Categorical | DiagGaussian
) -> ActorCritic:
    """Builds the configured actor-critic network and creates its variables."""
    torso = make_torso(config, env_spec, "torso")
    separate_value = config.name == "mlp" and not config.lstm_size
    value_torso = make_torso(config, env_spec, "value_torso") if separate_value else None
    net = ActorCritic(
        torso,
        value_torso,
        config.lstm_size,
        distribution,
        action_reward_inputs=config.action_reward_inputs,
        initial_std=config.initial_std,
    )
    obs = tf.zeros([1] + list(env_spec.observation_shape), env_spec.observation_dtype)
    net.step(obs, net.initial_state(1))
    return net
