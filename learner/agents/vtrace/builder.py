"""The one place that wires the V-trace agent: network, optimizer and agent."""

from __future__ import annotations

from seedrl.common.config import Experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.vtrace.learner import VTraceAgent
from seedrl.learner import distributions
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.networks import make_actor_critic
from seedrl.learner.optimizers import make_optimizer


def build(
    experiment: Experiment, env_spec: EnvSpec, placement: Placement | None = None
) -> VTraceAgent:
    """Builds a V-trace agent for the Experiment and the actors' environment spec, with its
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
        agent = VTraceAgent(
            network,
            optimizer,
            spec.agent.vtrace,
            env_spec,
            grad_clip_norm=spec.learner.optimizer.grad_clip_norm,
            seed=spec.seed,
            placement=placement,
        )
    agent.num_actors = spec.actors.replicas
    agent.evaluation_actors = spec.agent.vtrace.evaluation_actors
    return agent
