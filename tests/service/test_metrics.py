"""The per-Experiment gauges the operator and `seedrl train` export: phase and cost."""

import pytest
from prometheus_client import CollectorRegistry

from seedrl.service import cost
from seedrl.service.cost import PodRecord
from seedrl.service.metrics import CostGauges
from support.cost_data import ACTOR, H, PRICES, T0, TPU_LEARNER


def test_gauges_carry_each_role_and_the_total():
    registry = CollectorRegistry()
    gauges = CostGauges(registry)
    records = [
        PodRecord("l", "learner", TPU_LEARNER, False, ((T0, T0 + H),)),
        PodRecord("a", "actor", ACTOR, True, ((T0, T0 + H),)),
    ]
    gauges.update("exp", "rl", cost.compute_cost(records, PRICES, env_frames=10**6, now=T0 + H))

    def value(name, **labels):
        return registry.get_sample_value(name, labels)

    def usd(role):
        return value("seedrl_experiment_cost_usd", experiment="exp", namespace="rl", role=role)

    assert usd("learner") == pytest.approx(5.28)
    assert usd("actor") == pytest.approx(0.024)
    assert usd("total") == pytest.approx(5.304)
    assert value(
        "seedrl_experiment_cost_usd_per_million_frames", experiment="exp", namespace="rl"
    ) == pytest.approx(5.304)
    gauges.remove("exp", "rl")
    assert (
        value("seedrl_experiment_cost_usd", experiment="exp", namespace="rl", role="total") is None
    )
