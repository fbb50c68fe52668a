"""The learner's PodDisruptionBudget and its other shields from disruption
(render/disruption_budget.py)."""

from __future__ import annotations

from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import ANNOTATION_SAFE_TO_EVICT


def test_learner_is_protected_from_voluntary_disruption_and_kept_off_spot(exp_of, by_kind):
    objs = by_kind(render(exp_of()))
    pod_template = objs["Job"]["spec"]["template"]
    assert pod_template["metadata"]["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"
    pdb = objs["PodDisruptionBudget"]["spec"]
    # A Job has no scale subresource: only an integer minAvailable is honoured for its pods.
    assert pdb["minAvailable"] == 1 and "maxUnavailable" not in pdb
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["selector"]["matchLabels"].items() <= pod_template["metadata"]["labels"].items()
    terms = pod_template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # Off Spot and off the older preemptible VMs alike: both give a pod 15 s.
    assert terms == [
        {
            "matchExpressions": [
                {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
                {"key": "cloud.google.com/gke-preemptible", "operator": "DoesNotExist"},
            ]
        }
    ]
    # Asked for, it goes to Spot nodes.
    spot = by_kind(render(exp_of(learner={"spot": True})))["Job"]["spec"]["template"]["spec"]
    assert "affinity" not in spot
    assert spot["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert spot["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
