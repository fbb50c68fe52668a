"""The Prometheus metric declarations of the learner and the actors (common/metrics.py)."""

from __future__ import annotations

from seedrl.common import metrics as declared


def test_the_declarations_are_distinct_and_typed():
    metrics = (*declared.LEARNER, *declared.ACTOR)
    assert len({m.name for m in metrics}) == len(metrics)
    assert {m.kind for m in metrics} == {"counter", "gauge", "histogram"}
    assert all(m.name.startswith("seedrl_actor_") for m in declared.ACTOR)
    assert all(m.labels[0] == "experiment" for m in metrics)
