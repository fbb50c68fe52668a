"""The agent registry names exactly the agents the Experiment accepts, each with a builder."""

import importlib

import pytest

from seedrl.common.config import AGENTS, parse_experiment
from seedrl.learner.agents import BUILDERS, build_agent
from support.learner_harness import CARTPOLE


def test_every_agent_the_experiment_accepts_has_a_builder_and_no_other():
    assert set(BUILDERS) == set(AGENTS)
    for name, module in BUILDERS.items():
        assert callable(importlib.import_module(module).build), name


@pytest.mark.parametrize("name", AGENTS)
def test_build_agent_builds_the_named_agent(name):
    exp = parse_experiment(
        {
            "metadata": {"name": "r"},
            "spec": {"agent": {"name": name, "network": {"hiddenSizes": [8]}}},
        }
    )
    agent = build_agent(exp, CARTPOLE)
    assert type(agent).__module__ == BUILDERS[name].replace(".builder", ".learner")
