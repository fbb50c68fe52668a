"""The learner's Service (render/service.py)."""

from __future__ import annotations

from seedrl.service.operator.render.service import render_service


def test_the_service_reaches_the_learners_named_ports_by_their_protocol(exp_of, owner):
    exp = exp_of(learner={"port": 7000, "metricsPort": 7001})
    service = render_service(exp, owner, "team-a")
    assert service["metadata"]["name"] == "exp-learner"
    assert service["metadata"]["namespace"] == "team-a"
    assert service["metadata"]["ownerReferences"] == [owner]
    spec = service["spec"]
    # In-cluster only: the actors and the operator reach it by its DNS name.
    assert spec["type"] == "ClusterIP"
    assert spec["selector"] == {"seedrl.dev/experiment": "exp", "seedrl.dev/role": "learner"}
    # The target ports are the learner container's port names, so a port change in the spec
    # moves both sides together.
    assert [(p["name"], p["port"], p["targetPort"], p["appProtocol"]) for p in spec["ports"]] == [
        ("grpc", 7000, "grpc", "grpc"),
        ("metrics", 7001, "metrics", "http"),
    ]
