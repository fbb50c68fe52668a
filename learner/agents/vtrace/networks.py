"""Networks of the V-trace agent: the shared actor-critic, with a policy head for the env's
action space (logits for discrete actions, a diagonal Gaussian for continuous ones)."""

from __future__ import annotations

from seedrl.common.config import NetworkConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner import distributions
from seedrl.learner.networks import ActorCritic, make_actor_critic


def make_network(config: NetworkConfig, env_spec: EnvSpec) -> ActorCritic:
    """Builds the configured network for the env's actions and creates its variables."""
    return make_actor_critic(config, env_spec, distributions.for_env(env_spec))
