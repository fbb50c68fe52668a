"""What every seedrl pod has: its locked-down container, probes and placement (render/pod.py)."""

from __future__ import annotations

import kubernetes_validate

from seedrl.service.operator.render import render


def test_containers_are_locked_down(exp_of):
    for obj in render(exp_of()):
        if obj["kind"] not in ("Job", "Deployment"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_probes_on_healthz_and_readyz(exp_of, by_kind):
    objs = by_kind(render(exp_of()))
    for kind in ("Job", "Deployment"):
        container = objs[kind]["spec"]["template"]["spec"]["containers"][0]
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert "metrics" in [p["name"] for p in container["ports"]]
        # Five minutes for TensorFlow's import and a checkpoint restore before liveness counts.
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] == 300
    # The actors reach the learner through its Service only once it is ready: a learner that
    # serves is in it within a second, while the many actors are probed every 5 s.
    learner = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    actor = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert (
        learner["startupProbe"]["periodSeconds"] == learner["readinessProbe"]["periodSeconds"] == 1
    )
    assert actor["readinessProbe"]["periodSeconds"] == 5


PLACEMENT = {
    "nodeSelector": {"cloud.google.com/gke-nodepool": "rl", "cloud.google.com/gke-spot": "x"},
    "tolerations": [
        {"key": "team", "value": "rl", "effect": "NoSchedule"},
        {
            "key": "maintenance",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    },
    "priorityClassName": "rl-high",
    "imagePullSecrets": ["regcred"],
}


def test_placement_of_each_role_is_merged_with_the_operators_own(exp_of, by_kind):
    tpu = {"kind": "tpu", "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2"}}
    objs = by_kind(
        render(
            exp_of(
                learner={"accelerator": tpu, "placement": PLACEMENT},
                actors={"spot": True, "placement": {"priorityClassName": "rl-low"}},
            )
        )
    )
    learner = objs["Job"]["spec"]["template"]["spec"]
    # The operator's selectors win on a shared key; the user's are kept.
    assert learner["nodeSelector"]["cloud.google.com/gke-nodepool"] == "rl"
    assert learner["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    # The operator's tolerations first (the TPU taint), then the user's as the API has them.
    assert learner["tolerations"][0]["key"] == "google.com/tpu"
    assert learner["tolerations"][1:] == [
        {"operator": "Equal", "key": "team", "value": "rl", "effect": "NoSchedule"},
        {
            "operator": "Exists",
            "key": "maintenance",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ]
    # Off Spot in every one of the user's terms (ORed), which keep their own expressions.
    terms = learner["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 2
    for term, zone in zip(terms, "ab"):
        keys = [e["key"] for e in term["matchExpressions"]]
        assert keys == ["zone", "cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible"]
        assert term["matchExpressions"][0]["values"] == [zone]
    assert learner["affinity"]["podAntiAffinity"] == PLACEMENT["affinity"]["podAntiAffinity"]
    assert learner["priorityClassName"] == "rl-high"
    assert learner["imagePullSecrets"] == [{"name": "regcred"}]
    actors = objs["Deployment"]["spec"]["template"]["spec"]
    assert actors["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert actors["priorityClassName"] == "rl-low" and "imagePullSecrets" not in actors
    # What the operator renders is a valid pod spec for the API server.
    for obj in objs.values():
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
