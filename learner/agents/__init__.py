"""Agents: each a folder with config, networks, losses, learner and builder."""

from __future__ import annotations

from common.config import Experiment
from common.wire import EnvSpec
from learner.agents.base import Agent


def build_agent(experiment: Experiment, env_spec: EnvSpec) -> Agent:
    """Builds the agent named by ``spec.agent.name`` for the actors' environment spec."""
    name = experiment.spec.agent.name
    if name == "vtrace":
        from learner.agents.vtrace import builder
        return builder.build(experiment, env_spec)
    if name == "ppo":
        from learner.agents.ppo import builder
        return builder.build(experiment, env_spec)
    if name == "r2d2":
        from learner.agents.r2d2 import builder
        return builder.build(experiment, env_spec)
    raise ValueError(f"unknown agent {name!r}")
