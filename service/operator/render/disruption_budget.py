"""The learner's PodDisruptionBudget, which keeps voluntary disruptions off a healthy learner."""

from __future__ import annotations

from typing import Any

from seedrl.common.config import Experiment
from seedrl.service.operator.render.common import names, object_meta, selector_labels


def render_disruption_budget(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """A PodDisruptionBudget that refuses voluntary evictions (drains, node upgrades, the
    autoscaler) of a healthy learner pod. An unhealthy one (not ready: starting, restoring,
    crashing) may still be evicted, so that it never blocks a drain for nothing. GKE's node
    upgrades respect it for up to an hour, then delete the pod: the learner then checkpoints
    and resumes elsewhere, as it does after any disruption."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(
            exp, names(exp.metadata.name).disruption_budget, "learner", owner, namespace
        ),
        "spec": {
            # An integer minAvailable: a Job has no scale subresource, and for such pods
            # Kubernetes honours only that ("Specifying a Disruption Budget for your
            # Application": maxUnavailable and percentages need a scalable controller; the
            # disruption controller otherwise marks the budget failed).
            "minAvailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": selector_labels(exp.metadata.name, "learner")},
        },
    }
