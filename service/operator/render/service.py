"""The learner's Service: the actors' gRPC port and the metrics and status port."""

from __future__ import annotations

from typing import Any

from seedrl.common.config import Experiment
from seedrl.service.operator.render.common import names, object_meta, selector_labels


def render_service(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner's Service: gRPC for the actors, HTTP metrics/status."""
    learner = exp.spec.learner
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(exp, names(exp.metadata.name).service, "learner", owner, namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(exp.metadata.name, "learner"),
            "ports": [
                {
                    "name": "grpc",
                    "port": learner.port,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                {
                    "name": "metrics",
                    "port": learner.metrics_port,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
            ],
        },
    }
