"""Agents: each a folder with its losses, learner and builder (see docs/architecture.md).

:data:`BUILDERS` is the registry: ``spec.agent.name`` -> the module whose ``build(experiment,
env_spec, placement)`` wires that agent. A test checks that it names exactly the agents of
:data:`seedrl.common.config.AGENTS`, which the Experiment accepts.
"""

from __future__ import annotations

import importlib

from seedrl.common.config import Experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent

#: Each agent's builder module, by name. Imported when that agent is built, so a learner loads
#: only the agent it runs.
BUILDERS = {
    "vtrace": "seedrl.learner.agents.vtrace.builder",
    "ppo": "seedrl.learner.agents.ppo.builder",
    "r2d2": "seedrl.learner.agents.r2d2.builder",
}


def build_agent(experiment: Experiment, env_spec: EnvSpec, placement=None) -> Agent:
    """Builds the agent named by ``spec.agent.name`` for the actors' environment spec, on the
    devices of ``placement`` (a :class:`seedrl.learner.devices.Placement`; default: one device).

    Raises:
      ValueError: an agent that is not registered, or one that cannot be built for the spec.
    """
    name = experiment.spec.agent.name
    if name not in BUILDERS:
        raise ValueError(f"unknown agent {name!r}; known: {', '.join(BUILDERS)}")
    return importlib.import_module(BUILDERS[name]).build(experiment, env_spec, placement)
