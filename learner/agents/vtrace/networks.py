"""Networks of the V-trace agent: a policy-logits and value model chosen by name."""

from __future__ import annotations

import tensorflow as tf

from common.config import NetworkConfig
from common.wire import EnvSpec
from learner.networks import PolicyValueMLP


def make_network(config: NetworkConfig, env_spec: EnvSpec) -> tf.keras.Model:
    """Builds the configured network for discrete actions and creates its variables."""
    if not env_spec.discrete:
        raise ValueError(f"the vtrace agent needs discrete actions; {env_spec.env_id} has "
                         f"continuous actions of shape {list(env_spec.action_shape)}")
    if config.name != "mlp":
        raise ValueError(f"unknown network {config.name!r}")
    net = PolicyValueMLP(env_spec.num_actions, config.hidden_sizes, config.activation)
    net(tf.zeros([1] + list(env_spec.observation_shape), env_spec.observation_dtype))
    return net
