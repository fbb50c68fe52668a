"""The one place that wires the R2D2 agent: online and target networks, optimizer, replay."""

from __future__ import annotations

from seedrl.common.config import Experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.r2d2.learner import R2D2Agent
from seedrl.learner.agents.r2d2.networks import make_network
from seedrl.learner.devices import Placement, default_placement
from seedrl.learner.optimizers import make_optimizer


def build(
    experiment: Experiment, env_spec: EnvSpec, placement: Placement | None = None
) -> R2D2Agent:
    """Builds an R2D2 agent for the Experiment and the actors' environment spec, with its
    variables placed by ``placement`` (default: one device)."""
    spec = experiment.spec
    placement = placement or default_placement()
    with placement.scope():
        online = make_network(spec.agent.network, env_spec, "online_q")
        target = make_network(spec.agent.network, env_spec, "target_q")
        optimizer = make_optimizer(
            spec.learner.optimizer, online.trainable_variables, pre_reduced=placement.distributed
        )
        return R2D2Agent(
            online,
            target,
            optimizer,
            spec.agent.r2d2,
            env_spec,
            batch_size=spec.learner.batch_size,
            num_actors=spec.actors.replicas,
            grad_clip_norm=spec.learner.optimizer.grad_clip_norm,
            seed=spec.seed,
            placement=placement,
            envs_per_actor=spec.actors.envs_per_actor,
        )
