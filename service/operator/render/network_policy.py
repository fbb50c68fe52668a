"""The learner's NetworkPolicy: only this experiment's actor pods may reach its gRPC port; the
metrics port (``GET /metrics`` for Prometheus, ``GET /status`` for the operator) is open to any
pod, since it only serves read-only progress and Prometheus and the operator usually run in
other namespaces."""

from __future__ import annotations

from typing import Any

from seedrl.common.config import Experiment
from seedrl.service.operator.render.common import names, object_meta, selector_labels


def render_network_policy(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """Only this experiment's actors reach the learner's gRPC port; metrics are open."""
    learner = exp.spec.learner
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(
            exp, names(exp.metadata.name).network_policy, "learner", owner, namespace
        ),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(exp.metadata.name, "learner")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": selector_labels(exp.metadata.name, "actor")
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": learner.port}],
                },
                # Read-only progress for Prometheus and the operator, which run in
                # namespaces this policy cannot know.
                {"ports": [{"protocol": "TCP", "port": learner.metrics_port}]},
            ],
        },
    }
