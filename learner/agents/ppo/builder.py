"""The one place that wires the PPO agent: network, optimizer, normalizers and agent."""

from __future__ import annotations

from seedrl.common.config import Experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.ppo.learner import PPOAgent
from seedrl.learner import distributions
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.networks import make_actor_critic
from seedrl.learner.optimizers import make_optimizer


def build(
    experiment: Experiment, env_spec: EnvSpec, placement: Placement | None = None
) -> PPOAgent:
    """Builds a PPO agent for the Experiment and the actors' environment spec, with its
    variables placed by ``placement`` (default: one device)."""
    spec = experiment.spec
    placement = placement or default_placement()
    with placement.scope():
        # The shared actor-critic, with a policy head for the env's actions (a softmax, or a
        # diagonal Gaussian with tanh-bounded means and a learned log-std).
        network = make_actor_critic(spec.agent.network, env_spec, distributions.for_env(env_spec))
        optimizer = make_optimizer(
            spec.learner.optimizer, network.trainable_variables, pre_reduced=placement.distributed
        )
        agent = PPOAgent(
            network,
            optimizer,
            spec.agent.ppo,
            env_spec,
            grad_clip_norm=spec.learner.optimizer.grad_clip_norm,
            seed=spec.seed,
            placement=placement,
        )
    agent.num_actors = spec.actors.replicas
    agent.evaluation_actors = spec.agent.ppo.evaluation_actors
    return agent
