"""Agents: each a folder with config, networks, losses, learner and builder."""

from __future__ import annotations

from seedrl.common.config import Experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent


def build_agent(experiment: Experiment, env_spec: EnvSpec, placement=None) -> Agent:
    """Builds the agent named by ``spec.agent.name`` for the actors' environment spec, on the
    devices of ``placement`` (a :class:`seedrl.learner.devices.Placement`; default: one device)."""
    name = experiment.spec.agent.name
    if name == "vtrace":
        from seedrl.learner.agents.vtrace import builder
        return builder.build(experiment, env_spec, placement)
    if name == "ppo":
        from seedrl.learner.agents.ppo import builder
        return builder.build(experiment, env_spec, placement)
    if name == "r2d2":
        from seedrl.learner.agents.r2d2 import builder
        return builder.build(experiment, env_spec, placement)
    raise ValueError(f"unknown agent {name!r}")
