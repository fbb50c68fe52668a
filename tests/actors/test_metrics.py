"""An actor's Prometheus metrics (actors/metrics.py): what it serves is what common/metrics.py
declares, with the counts of its streams."""

from __future__ import annotations

import types

from seedrl.actors.metrics import ActorMetrics
from seedrl.common import metrics as declared


def _client(steps, envs, connected, connections):
    return types.SimpleNamespace(
        env_steps=steps,
        envs=types.SimpleNamespace(num_envs=envs, restarts=1),
        connected=connected,
        connections=connections,
        observer=None,
    )


def test_every_family_served_is_declared_in_common_with_the_streams_counts():
    clients = [_client(10, 4, True, 1), _client(5, 4, False, 3)]
    metrics = ActorMetrics("exp", 2, clients)
    metrics.env_step(0.01)
    metrics.round_trip(0.002)
    assert all(c.observer is metrics for c in clients)
    by_name = {m.name: m for m in declared.ACTOR}
    values = {}
    for family in metrics.registry.collect():
        m = by_name.pop(family.name)  # docs/reference/metrics.md is written from these
        assert (family.type, family.documentation) == (m.kind, m.help)
        for sample in family.samples:
            assert {k: v for k, v in sample.labels.items() if k != "le"} == {
                "experiment": "exp",
                "actor": "2",
            }
            values[sample.name] = sample.value
    assert not by_name  # every declared family is served
    assert values["seedrl_actor_env_steps_total"] == 15
    assert values["seedrl_actor_batch_size"] == 8
    assert values["seedrl_actor_connected_streams"] == 1
    assert values["seedrl_actor_reconnects_total"] == 2
    assert values["seedrl_actor_env_restarts_total"] == 2
    assert values["seedrl_actor_round_trip_seconds_count"] == 1
