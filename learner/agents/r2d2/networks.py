"""Networks of the R2D2 agent: a recurrent dueling Q-network over any of the shared torsos."""

from __future__ import annotations

import tensorflow as tf

from seedrl.common.config import NetworkConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner.networks import DuelingQNetwork, make_torso


def make_network(config: NetworkConfig, env_spec: EnvSpec, name: str = "q") -> DuelingQNetwork:
    """Builds the configured Q-network for discrete actions and creates its variables."""
    if not env_spec.discrete:
        raise ValueError(
            f"the r2d2 agent needs discrete actions; {env_spec.env_id} has "
            f"continuous actions of shape {list(env_spec.action_shape)}"
        )
    net = DuelingQNetwork(
        make_torso(config, env_spec, "torso"),
        config.lstm_size,
        env_spec.num_actions,
        head_size=config.dense_size,
        name=name,
        action_reward_inputs=config.action_reward_inputs,
    )
    obs = tf.zeros([1] + list(env_spec.observation_shape), env_spec.observation_dtype)
    net.step(obs, net.initial_state(1))
    return net
