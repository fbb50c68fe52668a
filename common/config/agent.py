"""The learning algorithm (``spec.agent``): which agent, its network, and each agent's section.

A new agent adds its name to :data:`AGENTS`, a module of its own beside :mod:`.vtrace`,
:mod:`.r2d2` and :mod:`.ppo` for its hyperparameters (with a ``problems(spec)`` method for its
rules that involve other fields, which :mod:`.validate` calls), and that section to
:class:`AgentConfig`.
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.fields import param
from seedrl.common.config.network import NetworkConfig
from seedrl.common.config.ppo import PPOConfig
from seedrl.common.config.r2d2 import R2D2Config
from seedrl.common.config.vtrace import VTraceConfig


#: Agents the learner knows how to build; ``spec.agent.name`` must be one of these.
AGENTS = ("vtrace", "r2d2", "ppo")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """The learning algorithm and its network (``spec.agent``)."""

    name: str = param("vtrace", "Agent, one of: " + ", ".join(AGENTS) + ".", choices=AGENTS)
    network: NetworkConfig = param(doc="The network the agent trains.", factory=NetworkConfig)
    vtrace: VTraceConfig = param(doc="Hyperparameters of the vtrace agent.", factory=VTraceConfig)
    r2d2: R2D2Config = param(doc="Hyperparameters of the r2d2 agent.", factory=R2D2Config)
    ppo: PPOConfig = param(doc="Hyperparameters of the ppo agent.", factory=PPOConfig)
