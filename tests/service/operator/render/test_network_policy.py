"""Who may reach the learner's ports (render/network_policy.py, with the Service it guards)."""

from __future__ import annotations

from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import LABEL_EXPERIMENT


def test_network_policy_admits_only_this_experiments_actors_to_grpc(exp_of, by_kind):
    objs = by_kind(render(exp_of(learner={"port": 7000, "metricsPort": 7001})))
    policy = objs["NetworkPolicy"]["spec"]
    learner_labels = objs["Job"]["spec"]["template"]["metadata"]["labels"]
    actor_labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]

    def selects(selector, labels):
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(policy["podSelector"]["matchLabels"], learner_labels)
    assert not selects(policy["podSelector"]["matchLabels"], actor_labels)
    grpc_rule, metrics_rule = policy["ingress"]
    assert grpc_rule["ports"] == [{"protocol": "TCP", "port": 7000}]
    assert selects(grpc_rule["from"][0]["podSelector"]["matchLabels"], actor_labels)
    other = dict(actor_labels, **{LABEL_EXPERIMENT: "other"})
    assert not selects(grpc_rule["from"][0]["podSelector"]["matchLabels"], other)
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 7001}]}
    service = objs["Service"]["spec"]
    assert selects(service["selector"], learner_labels)
    assert [p["port"] for p in service["ports"]] == [7000, 7001]
