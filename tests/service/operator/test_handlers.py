"""The operator (kopf, service/operator/handlers.py) against the real kube-apiserver v1.37, with
its chart's ServiceAccount token and RBAC (support.operator_harness: no workload controllers, so
the tests write the Job's and Deployment's status as those controllers would), driven with the
real ``kubernetes`` client. Nothing here sleeps: every step waits on a condition with a
timeout."""

from __future__ import annotations

import copy
import datetime
import time
import types
import urllib.request
from pathlib import Path

import jsonschema
import kubernetes
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from seedrl.common.config import GROUP, PLURAL, VERSION, parse_experiment
from seedrl.common.schema import to_json_schema
from seedrl.service.operator import crd
from seedrl.service.operator.render.actors import actor_hash
from seedrl.service.operator.render.common import (
    ANNOTATION_CONFIG_HASH,
    LABEL_EXPERIMENT,
    LABEL_ROLE,
)
from seedrl.service.operator.status import condition
from seedrl.service.operator.metrics import OperatorMetrics
from support.foreign_crds import open_crd
from support.operator_harness import OperatorCluster, OperatorHarness, wait_for

#: The real control plane, and helm to render the operator chart's RBAC.
pytestmark = [pytest.mark.cluster, pytest.mark.helm]

NS = "team-a"
ROOT = Path(__file__).parents[3]
CARTPOLE = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
MERGE = "application/merge-patch+json"
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
CHILDREN = [
    ("ConfigMap", "{}-config"),
    ("Service", "{}-learner"),
    ("NetworkPolicy", "{}-learner"),
    ("Job", "{}-learner"),
    ("Deployment", "{}-actors"),
]


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness(NS) as h:
        yield h
        # The chart's RBAC is enough: the API server refused the operator nothing but what
        # test_a_role_trimmed_by_one_verb_is_reported_in_status_and_events took away.
        assert [r for r in h.cluster.operator_refusals() if "networkpolicies" not in r] == []


class Client:
    """The tests' side: the official kubernetes client against the cluster."""

    def __init__(self, harness):
        self.harness = harness
        self.custom = kubernetes.client.CustomObjectsApi(harness.api)
        self.core = kubernetes.client.CoreV1Api(harness.api)
        self.apps = kubernetes.client.AppsV1Api(harness.api)
        self.batch = kubernetes.client.BatchV1Api(harness.api)
        self.net = kubernetes.client.NetworkingV1Api(harness.api)

    def create(self, name, **spec_changes):
        body = copy.deepcopy(CARTPOLE)
        body["metadata"]["name"] = name
        body["spec"].update(spec_changes)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def get(self, name):
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def patch_spec(self, name, spec):
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, name, {"spec": spec}, _content_type=MERGE
        )

    def status(self, name):
        return self.get(name).get("status") or {}

    def condition(self, name, type_):
        return condition(self.status(name), type_) or {}

    def child(self, kind, name):
        read = {
            "ConfigMap": self.core.read_namespaced_config_map,
            "Service": self.core.read_namespaced_service,
            "NetworkPolicy": self.net.read_namespaced_network_policy,
            "Job": self.batch.read_namespaced_job,
            "Deployment": self.apps.read_namespaced_deployment,
        }[kind]
        try:
            return self.harness.api.sanitize_for_serialization(read(name, NS))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def children(self, name):
        return {kind: self.child(kind, pattern.format(name)) for kind, pattern in CHILDREN}

    def mark_ready(self, name, actors):
        """What the Job and Deployment controllers would write once the pods are ready."""
        self.batch.patch_namespaced_job_status(
            f"{name}-learner",
            NS,
            {"status": {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}},
        )
        self.apps.patch_namespaced_deployment_status(
            f"{name}-actors",
            NS,
            {"status": {"replicas": actors, "readyReplicas": actors, "availableReplicas": actors}},
        )


@pytest.fixture
def k8s(harness):
    return Client(harness)


def running_learner(env_steps=12000, **extra):
    return {
        "state": "running",
        "env_steps": env_steps,
        "learner_steps": 30,
        "episodes": 50,
        "mean_return": 21.5,
        "actors": 4,
        "last_checkpoint": "ckpt-3",
        "stop_reason": None,
        **extra,
    }


def test_apply_creates_every_child_with_owner_references(k8s):
    uid = k8s.create("apply")["metadata"]["uid"]
    children = wait_for(
        lambda: (c := k8s.children("apply")) and all(c.values()) and c, what="all children"
    )
    for kind, obj in children.items():
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "seedrl.dev/v1alpha1",
                "kind": "Experiment",
                "name": "apply",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], kind
    config = yaml.safe_load(children["ConfigMap"]["data"]["config.yaml"])
    assert config["spec"]["actors"]["replicas"] == 4
    assert children["Deployment"]["spec"]["replicas"] == 4
    status = wait_for(lambda: k8s.status("apply").get("phase"), what="a phase") and k8s.status(
        "apply"
    )
    assert status["phase"] == "Pending"
    assert condition(status, "Valid")["status"] == "True"
    assert status["selector"] == "seedrl.dev/experiment=apply,seedrl.dev/role=actor"


def test_ready_pods_and_learner_status_advance_the_conditions(k8s, harness):
    k8s.create("ready")
    wait_for(lambda: all(k8s.children("ready").values()), what="children")
    k8s.mark_ready("ready", 4)
    wait_for(lambda: k8s.status("ready").get("phase") == "Running", what="Running")
    wait_for(
        lambda: k8s.condition("ready", "ActorsReady").get("status") == "True", what="ActorsReady"
    )
    # The learner pod is up but its status endpoint does not answer yet.
    wait_for(
        lambda: k8s.condition("ready", "Progressing").get("reason") == "StatusUnavailable",
        what="Progressing Unknown",
    )
    harness.learners.statuses[(NS, "ready")] = {"state": "waiting_for_actors", "mean_return": None}
    wait_for(
        lambda: k8s.condition("ready", "Progressing").get("reason") == "WaitingForActors",
        what="WaitingForActors",
    )
    harness.learners.statuses[(NS, "ready")] = running_learner()
    wait_for(lambda: k8s.condition("ready", "Ready").get("status") == "True", what="Ready")
    status = wait_for(
        lambda: (s := k8s.status("ready")).get("envSteps") == 12000 and s,
        what="progress in status",
    )
    assert status["learnerSteps"] == 30 and status["meanReturn"] == 21.5
    assert status["lastCheckpoint"] == "ckpt-3" and status["actors"]["connected"] == 4
    assert status["startTime"] == "2026-01-01T00:00:00Z"
    assert condition(status, "Progressing")["reason"] == "Training"
    # The learner reaches its budget: the Job completes and the actors are stopped.
    k8s.batch.patch_namespaced_job_status(
        "ready-learner",
        NS,
        {
            "status": {
                "active": 0,
                "ready": 0,
                "succeeded": 1,
                "completionTime": "2026-01-01T01:00:00Z",
                # The Job controller says SuccessCriteriaMet before Complete; the API server
                # refuses a Complete without it ("Jobs: Terminal Job conditions", v1.31+).
                "conditions": [
                    {
                        "type": "SuccessCriteriaMet",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    },
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    },
                ],
            }
        },
    )
    wait_for(lambda: k8s.status("ready").get("phase") == "Succeeded", what="Succeeded")
    wait_for(
        lambda: k8s.child("Deployment", "ready-actors")["spec"]["replicas"] == 0,
        what="actors scaled to zero after success",
    )
    assert k8s.status("ready")["completionTime"] == "2026-01-01T01:00:00Z"
    # ttlSecondsAfterFinished deletes the Job: a finished experiment is not started again.
    k8s.batch.delete_namespaced_job("ready-learner", NS)
    wait_for(
        lambda: k8s.condition("ready", "LearnerReady").get("reason") == "Finished",
        what="LearnerReady Finished",
    )
    assert k8s.child("Job", "ready-learner") is None
    assert k8s.status("ready")["phase"] == "Succeeded"


def test_scaling_the_experiment_scales_the_actors(k8s):
    k8s.create("scale")
    wait_for(lambda: k8s.child("Deployment", "scale-actors"), what="actors")
    # `kubectl scale experiment/scale --replicas=7` goes through the scale subresource.
    k8s.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, NS, PLURAL, "scale", {"spec": {"replicas": 7}}, _content_type=MERGE
    )
    wait_for(
        lambda: k8s.child("Deployment", "scale-actors")["spec"]["replicas"] == 7, what="7 actors"
    )
    k8s.patch_spec("scale", {"actors": {"replicas": 2}})
    wait_for(
        lambda: k8s.child("Deployment", "scale-actors")["spec"]["replicas"] == 2, what="2 actors"
    )
    wait_for(
        lambda: k8s.status("scale").get("actors", {}).get("desired") == 2,
        what="status.actors.desired",
    )
    # The pods' config is the user's Experiment only: none of kopf's bookkeeping annotations,
    # which would roll the actors at every handler run.
    document = copy.deepcopy(CARTPOLE)
    document["metadata"].update(name="scale", namespace=NS)
    document["spec"]["actors"]["replicas"] = 2
    expected = actor_hash(parse_experiment(document))
    template = k8s.child("Deployment", "scale-actors")["spec"]["template"]
    assert template["metadata"]["annotations"][ANNOTATION_CONFIG_HASH] == expected
    generation = k8s.get("scale")["metadata"]["generation"]
    wait_for(
        lambda: k8s.status("scale").get("observedGeneration") == generation,
        what="observedGeneration",
    )


def test_suspend_and_resume(k8s):
    k8s.create("pause")
    wait_for(lambda: all(k8s.children("pause").values()), what="children")
    k8s.mark_ready("pause", 4)
    wait_for(lambda: k8s.status("pause").get("phase") == "Running", what="Running")
    k8s.patch_spec("pause", {"suspend": True})
    # The Job controller then stops the learner pod gracefully (SIGTERM: final checkpoint).
    wait_for(
        lambda: k8s.child("Job", "pause-learner")["spec"]["suspend"] is True, what="Job suspended"
    )
    wait_for(
        lambda: k8s.child("Deployment", "pause-actors")["spec"]["replicas"] == 0,
        what="actors at zero",
    )
    wait_for(lambda: k8s.status("pause").get("phase") == "Suspended", what="Suspended")
    assert k8s.condition("pause", "Suspended")["status"] == "True"
    k8s.patch_spec("pause", {"suspend": False})
    wait_for(
        lambda: k8s.child("Job", "pause-learner")["spec"]["suspend"] is False, what="Job resumed"
    )
    wait_for(
        lambda: k8s.child("Deployment", "pause-actors")["spec"]["replicas"] == 4, what="actors back"
    )
    wait_for(lambda: k8s.status("pause").get("phase") == "Running", what="Running again")
    assert k8s.condition("pause", "Suspended")["status"] == "False"


def test_changing_an_immutable_field_is_refused(k8s):
    k8s.create("fixed")
    wait_for(lambda: k8s.status("fixed").get("appliedImmutable"), what="applied spec")
    k8s.patch_spec("fixed", {"env": {"id": "Acrobot-v1"}, "actors": {"replicas": 9}})
    cond = wait_for(
        lambda: (c := k8s.condition("fixed", "SpecApplied")).get("status") == "False" and c,
        what="SpecApplied False",
    )
    assert cond["reason"] == "ImmutableFieldChanged" and "spec.env.id" in cond["message"]
    # Nothing of the refused spec reached the learner; the count did reach the actors (a
    # scale is never held up by a refused edit: test_refused_edit_controls.py).
    config = yaml.safe_load(k8s.child("ConfigMap", "fixed-config")["data"]["config.yaml"])
    assert config["spec"]["env"]["id"] == "CartPole-v1"
    wait_for(
        lambda: k8s.child("Deployment", "fixed-actors")["spec"]["replicas"] == 9, what="9 actors"
    )
    # Reverting the immutable field applies the rest.
    k8s.patch_spec("fixed", {"env": {"id": "CartPole-v1"}})
    wait_for(
        lambda: k8s.condition("fixed", "SpecApplied").get("status") == "True",
        what="SpecApplied True",
    )


def test_invalid_experiment_fails_and_others_still_reconcile(k8s):
    # Invalid across fields, which the CRD's schema cannot say, so the API server stores it and
    # the operator refuses it: the metrics port is the gRPC port (8686 by default).
    k8s.create("broken", learner={"metricsPort": 8686})
    k8s.create("healthy")
    cond = wait_for(
        lambda: (c := k8s.condition("broken", "Valid")).get("status") == "False" and c,
        what="ValidationFailed",
    )
    assert cond["reason"] == "ValidationFailed"
    assert "spec.learner.metricsPort: must differ from spec.learner.port (8686)" in cond["message"]
    assert k8s.status("broken")["phase"] == "Failed"
    wait_for(lambda: all(k8s.children("healthy").values()), what="healthy's children")
    assert not any(k8s.children("broken").values())
    # Fixing the spec brings it up.
    k8s.patch_spec("broken", {"learner": {"metricsPort": 9090}})
    wait_for(lambda: all(k8s.children("broken").values()), what="fixed one's children")
    wait_for(lambda: k8s.condition("broken", "Valid").get("status") == "True", what="Valid")


def test_deletion_needs_no_finalizer_and_children_are_owned(k8s):
    uid = k8s.create("gone")["metadata"]["uid"]
    children = wait_for(
        lambda: (c := k8s.children("gone")) and all(c.values()) and c, what="children"
    )
    wait_for(lambda: k8s.status("gone").get("phase"), what="a status")
    # No finalizer: the deletion never waits for the operator (it may be down). The children
    # go with their owner, through the cluster's garbage collector.
    assert not k8s.get("gone")["metadata"].get("finalizers")
    for obj in children.values():
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "gone")

    def experiment_gone():
        try:
            k8s.get("gone")
        except kubernetes.client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(experiment_gone, what="the Experiment itself")
    wait_for(lambda: not any(k8s.children("gone").values()), what="the children collected")


# ------------------------------------------------------------------------------------------
# Cost: the pods' requests x the time they ran, priced with service/cost/prices.yaml
# ------------------------------------------------------------------------------------------

# Rates from service/cost/prices.yaml (table gke-us-central1-2026-11-29), USD per hour.
CPU, CPU_SPOT = 0.0445, 0.0133  # per vCPU
MEM, MEM_SPOT = 0.0049225, 0.0014767  # per GiB
V5E = 1.20  # per TPU v5e chip, on demand
PRICE_TABLE = "gke-us-central1-2026-11-29"
ACTOR_SPOT_HOURLY = 2 * CPU_SPOT + 2 * MEM_SPOT  # an actor pod: 2 vCPU, 2 GiB, Spot


def iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name, experiment, role, start, end=None, phase=None, tpu=False, spot=False):
    """A pod as the Job or Deployment controller and the kubelet would leave it: requests,
    node selectors, status.startTime and container states (terminated at ``end``); made
    with :func:`run_pod`."""
    requests = (
        {"cpu": "4", "memory": "16Gi"}
        if role == "learner"
        else {"cpu": "2000m", "memory": "2048Mi"}
    )
    limits = {}
    selector = {}
    if tpu:
        requests["google.com/tpu"] = "4"
        limits["google.com/tpu"] = "4"
        selector.update(
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            }
        )
    if spot:
        selector["cloud.google.com/gke-spot"] = "true"
    state = (
        {"terminated": {"exitCode": 0, "startedAt": start, "finishedAt": end}}
        if end
        else {"running": {"startedAt": start}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {LABEL_EXPERIMENT: experiment, LABEL_ROLE: role},
        },
        "spec": {
            "nodeSelector": selector,
            "containers": [
                {
                    "name": role,
                    "image": "seedrl",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
        "status": {
            "phase": phase or ("Succeeded" if end else "Running"),
            "startTime": start,
            "containerStatuses": [
                {
                    "name": role,
                    "ready": not end,
                    "image": "seedrl",
                    "imageID": "seedrl@sha256:" + "0" * 64,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        },
    }


def run_pod(api, body):
    """Creates the pod ``body`` in NS, then writes its ``status`` as its kubelet would report
    it (the API server keeps no status a pod is created with); returns the pod."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(NS, {k: v for k, v in body.items() if k != "status"})
    reported = core.patch_namespaced_pod_status(
        body["metadata"]["name"], NS, {"status": body["status"]}
    )
    return api.sanitize_for_serialization(reported)


def test_cost_is_priced_from_the_pods_and_kept_for_pods_that_are_gone(k8s, harness):
    name = "priced"
    # Pong: 4 emulator frames per agent step (its frame skip) are what a frame costs.
    k8s.create(name, env={"id": "ALE/Pong-v5"}, actors={"replicas": 2})
    wait_for(lambda: all(k8s.children(name).values()), what="children")
    k8s.mark_ready(name, 2)
    # A learner on a v5e 2x2 slice (4 chips) for 2 h, two Spot actors for 1.5 h and 0.5 h,
    # and another Experiment's pod, which must not be counted.
    pods = [
        pod(
            "priced-learner-x1",
            name,
            "learner",
            "2026-01-01T00:00:00Z",
            "2026-01-01T02:00:00Z",
            tpu=True,
        ),
        pod(
            "priced-actors-a",
            name,
            "actor",
            "2026-01-01T00:10:00Z",
            "2026-01-01T01:40:00Z",
            phase="Failed",
            spot=True,
        ),
        pod(
            "priced-actors-b",
            name,
            "actor",
            "2026-01-01T00:10:00Z",
            "2026-01-01T00:40:00Z",
            spot=True,
        ),
        pod(
            "other-learner-x1",
            "other",
            "learner",
            "2026-01-01T00:00:00Z",
            "2026-01-01T05:00:00Z",
            tpu=True,
        ),
    ]
    uids = {p["metadata"]["name"]: run_pod(harness.api, p)["metadata"]["uid"] for p in pods}
    # Only now the learner reports frames: a cost with them was priced from every pod above
    # (the operator reads the learner before it lists the pods).
    harness.learners.statuses[(NS, name)] = running_learner(env_steps=500_000, env_frames=2_000_000)
    learner = 2.0 * (4 * CPU + 16 * MEM + 4 * V5E)  # 10.11352
    actors = 1.5 * ACTOR_SPOT_HOURLY + 0.5 * ACTOR_SPOT_HOURLY  # 0.0591068
    total = learner + actors  # 10.1726268
    # The operator sees pods through its watch cache, so a refresh may price before the pods
    # created above reach it: wait for a cost that has the learner's frames and every pod.

    def priced_everything():
        s = k8s.status(name)
        c = s.get("cost", {})
        b = c.get("breakdown", {})
        return (
            c.get("envFrames") == 2_000_000
            and b.get("learner", {}).get("pods") == 1
            and b.get("actor", {}).get("pods") == 2
            and s
        )

    status = wait_for(priced_everything, what="status.cost with the learner's frames")
    cost = status["cost"]
    assert cost["totalUsd"] == pytest.approx(total, abs=1e-6)
    assert cost["usdPerMillionFrames"] == pytest.approx(total / 2, abs=1e-6)
    assert cost["usdPerHour"] == 0  # nothing runs any more
    assert cost["priceTable"] == PRICE_TABLE and cost["currency"] == "USD"
    b = cost["breakdown"]
    assert b["learner"]["pods"] == 1 and b["actor"]["pods"] == 2
    assert b["learner"]["totalUsd"] == pytest.approx(learner, abs=1e-6)
    assert b["learner"]["acceleratorUsd"] == pytest.approx(2.0 * 4 * V5E, abs=1e-6)
    assert b["learner"]["cpuUsd"] == pytest.approx(2.0 * 4 * CPU, abs=1e-6)
    assert b["actor"]["totalUsd"] == pytest.approx(actors, abs=1e-6)
    assert b["actor"]["podHours"] == pytest.approx(2.0)
    records = {r["name"]: r for r in status["costRecords"]}
    assert set(records) == {
        uids["priced-learner-x1"],
        uids["priced-actors-a"],
        uids["priced-actors-b"],
    }
    assert records[uids["priced-learner-x1"]]["acceleratorType"] == "v5e"
    assert records[uids["priced-actors-a"]]["spot"] is True
    # What was written is what the CRD declares, key for key: an API server prunes the rest.
    schema = to_json_schema(crd.status_schema(), closed=True)
    jsonschema.validate({"cost": cost, "costRecords": status["costRecords"]}, schema)

    # A pod that disappears is still counted, from the stored record.
    k8s.core.delete_namespaced_pod("priced-actors-a", NS)
    after = iso(time.time() + 1)
    status = wait_for(
        lambda: (s := k8s.status(name))["cost"]["asOf"] >= after and s,
        what="a pricing after the pod was deleted",
    )
    assert status["cost"]["totalUsd"] == pytest.approx(total, abs=1e-6)
    assert uids["priced-actors-a"] in {r["name"] for r in status["costRecords"]}

    # A pod that cannot be priced (TPU chips without the accelerator's node selector) leaves
    # the stored cost alone: polls go on, the reconcile does not fail.
    bad = pod("priced-actors-bad", name, "actor", "2026-01-01T00:00:00Z")
    # An extended resource is requested and limited alike (the API server refuses a request
    # alone: "Manage extended resources").
    bad["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = "1"
    bad["spec"]["containers"][0]["resources"].setdefault("limits", {})["google.com/tpu"] = "1"
    errors = sample(harness, "seedrl_operator_reconcile_errors_total", trigger="poll")
    run_pod(harness.api, bad)
    created = time.time()
    polls = poll_count(harness)
    # Polls run every 0.3 s; over 2.5 s a priced status would have a later asOf.
    wait_for(
        lambda: poll_count(harness) >= polls + 5 and time.time() > created + 2.5,
        what="polls with the unpriceable pod",
    )
    kept = k8s.status(name)
    # The last pricing is the one that may have been under way when the pod appeared.
    assert kept["cost"]["asOf"] <= iso(created + 1)
    assert kept["cost"]["totalUsd"] == status["cost"]["totalUsd"]
    assert len(kept["costRecords"]) == 3
    assert kept["phase"] == "Running"
    assert sample(harness, "seedrl_operator_reconcile_errors_total", trigger="poll") == errors
    k8s.core.delete_namespaced_pod("priced-actors-bad", NS)

    # A pod still running is priced up to the report's asOf, and sets the burn rate.
    started = time.time() - 3600
    run_pod(harness.api, pod("priced-actors-c", name, "actor", iso(started), spot=True))
    status = wait_for(
        lambda: (s := k8s.status(name)) and len(s["costRecords"]) == 4 and s,
        what="the running pod's record",
    )
    cost = status["cost"]
    as_of = datetime.datetime.fromisoformat(cost["asOf"].replace("Z", "+00:00")).timestamp()
    running_hours = (as_of - int(started)) / 3600
    # asOf is cut to the second: the pod may have been priced up to 1 s later.
    assert cost["totalUsd"] == pytest.approx(
        total + running_hours * ACTOR_SPOT_HOURLY, abs=ACTOR_SPOT_HOURLY / 3600 + 1e-6
    )
    assert cost["usdPerHour"] == pytest.approx(ACTOR_SPOT_HOURLY, abs=1e-6)
    assert cost["breakdown"]["actor"]["pods"] == 3


# ------------------------------------------------------------------------------------------
# The operator's own metrics, scraped over HTTP
# ------------------------------------------------------------------------------------------


def scrape(harness) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of the operator's /metrics."""
    with urllib.request.urlopen(harness.metrics_url, timeout=5) as response:  # noqa: S310 - http://127.0.0.1
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(harness, name, **labels):
    return scrape(harness).get((name, tuple(sorted(labels.items()))))


def poll_count(harness) -> float:
    return sample(harness, "seedrl_operator_reconciles_total", trigger="poll") or 0.0


def experiment_series(harness, experiment):
    return {k for k in scrape(harness) if ("experiment", experiment) in k[1]}


def test_operator_metrics_count_reconciles_and_follow_experiments(k8s, harness):
    changes = sample(harness, "seedrl_operator_reconciles_total", trigger="change")
    assert sample(harness, "seedrl_operator_reconcile_errors_total", trigger="change") == 0
    k8s.create("metered")
    k8s.create("badmeter", learner={"metricsPort": 8686})  # the gRPC port: invalid
    wait_for(
        lambda: (
            sample(harness, "seedrl_operator_reconciles_total", trigger="change") >= changes + 2
        ),
        what="change reconciles counted",
    )
    polls = poll_count(harness)
    wait_for(lambda: poll_count(harness) >= polls + 2, what="poll reconciles counted")

    wait_for(
        lambda: (
            sample(
                harness,
                "seedrl_experiment_phase",
                experiment="badmeter",
                namespace=NS,
                phase="Failed",
            )
            == 1
        ),
        what="phase Failed = 1",
    )
    assert (
        sample(
            harness, "seedrl_experiment_phase", experiment="badmeter", namespace=NS, phase="Running"
        )
        == 0
    )
    wait_for(
        lambda: (
            sample(
                harness,
                "seedrl_experiment_phase",
                experiment="metered",
                namespace=NS,
                phase="Pending",
            )
            == 1
        ),
        what="phase Pending = 1",
    )

    # One closed actor pod: 1 h of 2 vCPU/2 GiB on demand.
    run_pod(
        harness.api,
        pod("metered-actors-a", "metered", "actor", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"),
    )
    expected = 2 * CPU + 2 * MEM
    wait_for(
        lambda: (
            sample(
                harness,
                "seedrl_experiment_cost_usd",
                experiment="metered",
                namespace=NS,
                role="total",
            )
            == pytest.approx(expected)
        ),
        what="cost gauge",
    )
    assert sample(
        harness, "seedrl_experiment_cost_usd", experiment="metered", namespace=NS, role="actor"
    ) == pytest.approx(expected)
    assert (
        sample(
            harness,
            "seedrl_experiment_cost_usd",
            experiment="metered",
            namespace=NS,
            role="learner",
        )
        == 0
    )
    # The gauge is set as the cost is computed; the status patch that carries it follows.
    wait_for(
        lambda: (
            (k8s.status("metered").get("cost") or {}).get("totalUsd")
            == pytest.approx(expected, abs=1e-6)
        ),
        what="the cost in the status",
    )

    for name in ("metered", "badmeter"):
        k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    wait_for(
        lambda: (
            not experiment_series(harness, "metered") and not experiment_series(harness, "badmeter")
        ),
        what="series removed on delete",
    )
    assert sample(harness, "seedrl_operator_reconcile_errors_total", trigger="poll") == 0


def test_a_raising_reconcile_is_counted_as_an_error_and_raised_again():
    metrics = OperatorMetrics()
    with pytest.raises(RuntimeError, match="API down"):
        with metrics.reconciling("poll"):
            raise RuntimeError("API down")
    with metrics.reconciling("poll"):
        pass
    reg = metrics.registry
    assert reg.get_sample_value("seedrl_operator_reconciles_total", {"trigger": "poll"}) == 2
    assert reg.get_sample_value("seedrl_operator_reconcile_errors_total", {"trigger": "poll"}) == 1
    assert (
        reg.get_sample_value("seedrl_operator_reconcile_errors_total", {"trigger": "change"}) == 0
    )


def test_an_experiment_keeps_the_images_of_its_first_reconcile(k8s):
    from seedrl.common.config import RELEASE

    k8s.create("pinned")
    wait_for(lambda: k8s.status("pinned").get("images"), what="status.images")
    assert k8s.status("pinned")["images"] == {"registry": "ghcr.io/seedrl", "release": RELEASE}
    job = wait_for(lambda: k8s.child("Job", "pinned-learner"), what="the learner Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/seedrl/learner:{RELEASE}"
    )
    env_spec = wait_for(lambda: k8s.child("Job", "pinned-envspec"), what="the env-spec Job")
    assert env_spec["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/seedrl/actors:{RELEASE}"
    )
    # As an older operator recorded them: a learner replaced under a newer operator (an edit
    # of what it runs) still runs the release the actors were made with.
    k8s.custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "pinned",
        {"status": {"images": {"registry": "old.example/seedrl", "release": "0.0.9"}}},
        _content_type=MERGE,
    )
    wait_for(lambda: k8s.status("pinned")["images"]["release"] == "0.0.9", what="the older images")
    old_uid = job["metadata"]["uid"]
    k8s.patch_spec("pinned", {"budget": {"maxEnvSteps": 123456}})

    def replaced():
        try:
            new = k8s.child("Job", "pinned-learner")
        except kubernetes.client.ApiException:
            return None
        if new is None or new["metadata"]["uid"] == old_uid:
            return None
        return new

    new = wait_for(replaced, what="the replaced learner Job")
    pod = new["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "old.example/seedrl/learner:0.0.9"
    assert "initContainers" not in pod
    actors = k8s.child("Deployment", "pinned-actors")["spec"]["template"]["spec"]["containers"][0]
    assert actors["image"] == "old.example/seedrl/actors:0.0.9"


# ------------------------------------------------------------------------------------------
# Peering per namespace, and the cache after a re-list (kopf's watches miss deletions then).
# The poller is driven by hand here, against a cluster of its own, with no kopf: what its
# handlers would have delivered is put into the cache directly.
# ------------------------------------------------------------------------------------------


@pytest.fixture
def cluster():
    with OperatorCluster("team-a", "team-b", "team-c") as c:
        yield c


def standalone_poller(cluster, **config):
    """A Poller (not started) with its Reconciler and an empty ChildCache."""
    from seedrl.service.operator.poller import Poller
    from seedrl.service.operator.reconciler import OperatorConfig, Reconciler
    from seedrl.service.operator.watch_cache import ChildCache

    cfg = OperatorConfig(api_client=cluster.api_client(), metrics=OperatorMetrics())
    for key, value in config.items():
        setattr(cfg, key, value)
    cache = ChildCache()
    return Poller(cfg, Reconciler(cfg), cache), cache


def create_experiment(api, name, namespace=NS):
    body = copy.deepcopy(CARTPOLE)
    body["metadata"]["name"] = name
    return kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )


def test_the_poller_follows_the_peering_of_each_experiments_namespace(cluster):
    from seedrl.service.operator.poller import PeeringGate

    # kopf's peering resources are served: the chart's CRDs are installed.
    api = cluster.api_client()
    custom = kubernetes.client.CustomObjectsApi(api)
    fresh = datetime.datetime.now(datetime.timezone.utc).isoformat()

    def peering(namespace, peers):
        body = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering" if namespace else "ClusterKopfPeering",
            "metadata": {"name": "seedrl"},
            "status": {
                who: {"priority": prio, "lifetime": 60, "lastseen": fresh}
                for who, prio in peers.items()
            },
        }
        if namespace:
            custom.create_namespaced_custom_object(
                "kopf.dev", "v1", namespace, "kopfpeerings", body
            )
        else:
            custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)

    # Namespace-scoped, kopf keeps a KopfPeering in each watched namespace: here this replica
    # leads in team-a, another one (of a higher priority) in team-b, and team-c has none
    # (kopf stays paused without one).
    peering("team-a", {"me": 5, "other": 1})
    peering("team-b", {"me": 5, "other": 9})
    gate = PeeringGate(api, "seedrl", "me", 5, clusterwide=False)
    assert [gate(ns) for ns in ("team-a", "team-b", "team-c")] == [True, False, False]
    poller, _ = standalone_poller(cluster, active=gate)
    refreshed = []
    poller.refresh = lambda namespace, name: refreshed.append((namespace, name))
    targets = [("team-a", "x"), ("team-b", "y"), ("team-c", "z"), ("team-a", "w")]
    poller.poll(targets)
    assert refreshed == [("team-a", "x"), ("team-a", "w")]
    # Cluster-wide, the ClusterKopfPeering decides for every namespace.
    peering(None, {"me": 5, "other": 1})
    refreshed.clear()
    poller.active = PeeringGate(api, "seedrl", "me", 5, clusterwide=True)
    poller.poll(targets)
    assert refreshed == targets


def test_the_poller_pauses_while_the_api_server_cannot_be_reached():
    """The API server unreachable (no answer at all, not a refusal): the gate says pause
    rather than raising, which ended the poller's thread and with it every status update of
    the active replica for good (seen on the real cluster after a network cut)."""
    from seedrl.service.operator.poller import PeeringGate
    from support.control_plane import free_port

    configuration = kubernetes.client.Configuration()
    configuration.host = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    api = kubernetes.client.ApiClient(configuration)
    for clusterwide in (True, False):
        gate = PeeringGate(api, "seedrl", "me", 5, clusterwide=clusterwide)
        assert gate("team-a") is False


def test_a_replica_taking_over_lists_afresh_before_it_writes(cluster):
    """A standby replica's cache is what kopf's watches delivered before they paused. After a
    60 s outage (longer than the peering lifetime) every record has expired and the standby's
    gate may say active at once: writing status from that cache would show what it last saw,
    e.g. a learner still starting (once on the real cluster the Experiment read phase Pending
    after such an outage while its learner trained). Becoming active, the poller resyncs its
    cache before refreshing anything, once."""
    poller, _ = standalone_poller(cluster)
    calls = []
    poller.resync = lambda: calls.append("resync")
    poller.refresh = lambda namespace, name: calls.append(f"refresh {name}")
    working = {"team-a": False}
    poller.active = lambda namespace: working[namespace]
    poller.poll([("team-a", "x")])
    assert calls == []
    working["team-a"] = True
    poller.poll([("team-a", "x"), ("team-a", "y")])
    assert calls == ["resync", "refresh x", "refresh y"]
    calls.clear()
    poller.poll([("team-a", "x")])
    assert calls == ["refresh x"]  # still active: its watches keep the cache current


def test_an_experiment_gone_without_its_deleted_event_is_not_healed_again(cluster):
    api = cluster.api_client()
    k8s = Client(types.SimpleNamespace(api=api))
    poller, cache = standalone_poller(cluster)
    body = create_experiment(api, "lost")
    cache.update("Experiment", None, body)  # as kopf's listing delivers it
    poller.refresh(NS, "lost")
    assert all(k8s.children("lost").values())
    assert any(k[0] == "seedrl_experiment_phase" for k in _series(poller, "lost"))
    # Deleted while the watch was down: kopf's re-list brings no DELETED event, so the cache
    # still has it. The garbage collector deletes its children.
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "lost")
    wait_for(lambda: not any(k8s.children("lost").values()), what="the children collected")
    assert cache.experiment(NS, "lost") is not None
    poller.refresh(NS, "lost")
    # Not reconciled again: no child made for the dead owner, nothing of it kept.
    assert not any(k8s.children("lost").values())
    assert cache.experiment(NS, "lost") is None and not cache.experiments()
    assert not _series(poller, "lost")
    poller.refresh(NS, "lost")
    assert not any(k8s.children("lost").values())


def _series(poller, experiment):
    """The operator's samples labelled with ``experiment``."""
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in poller.config.metrics.registry.collect()
        for s in family.samples
        if s.labels.get("experiment") == experiment
    }


def test_a_pod_gone_without_its_deleted_event_stops_being_priced_after_the_resync(cluster):
    api = cluster.api_client()
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    poller, cache = standalone_poller(cluster)
    create_experiment(api, "stale")
    poller.resync()  # kopf's first listing, in effect
    poller.refresh(NS, "stale")  # makes the children
    started = time.time() - 3600
    created = run_pod(api, pod("stale-actors-a", "stale", "actor", iso(started), spot=True))
    cache.update("Pod", "ADDED", created)
    poller.resync()
    assert [p["metadata"]["name"] for p in cache.observed(NS, "stale").pods] == ["stale-actors-a"]

    def cost():
        poller.refresh(NS, "stale")
        body = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "stale")
        # The MODIFIED event of the status just written, as the Experiments' watch delivers
        # it (the poller refreshes from its cache).
        cache.update("Experiment", "MODIFIED", body)
        return body["status"]

    running = cost()
    assert running["cost"]["usdPerHour"] == pytest.approx(ACTOR_SPOT_HOURLY, abs=1e-6)
    # Deleted while the watch was down: no DELETED event reaches the cache, and the pod would
    # be priced as running for ever.
    core.delete_namespaced_pod("stale-actors-a", NS)
    assert cost()["cost"]["usdPerHour"] > 0
    poller.resync()
    assert cache.observed(NS, "stale").pods == []
    gone = cost()
    assert gone["cost"]["usdPerHour"] == 0
    (record,) = gone["costRecords"]
    assert all(end is not None for _, end in record["intervals"])
    # The cost stops growing: a later pricing has a later asOf and the same total.
    wait_for(lambda: iso(time.time()) > gone["cost"]["asOf"], what="the next second")
    later = cost()
    assert later["cost"]["asOf"] > gone["cost"]["asOf"]
    assert later["cost"]["totalUsd"] == gone["cost"]["totalUsd"]
    assert cache.experiment(NS, "stale") is not None  # what exists stays


@pytest.fixture
def cert_manager(harness):
    """cert-manager's Issuers and Certificates served while the test runs (the harness is the
    module's: the other tests run without cert-manager)."""
    definitions = [
        open_crd("cert-manager.io", "Issuer", "issuers"),
        open_crd("cert-manager.io", "Certificate", "certificates"),
    ]
    for definition in definitions:
        harness.cluster.create(definition)
    yield
    extensions = kubernetes.client.ApiextensionsV1Api(harness.api)
    for definition in definitions:
        extensions.delete_custom_resource_definition(definition["metadata"]["name"])


def test_with_cert_manager_the_learner_is_signed_by_a_ca_and_owns_its_secrets(k8s, cert_manager):
    # A cluster that serves cert-manager's API: the operator asks it for the certificate.
    uid = k8s.create("certs")["metadata"]["uid"]

    def custom(plural, name):
        try:
            return k8s.custom.get_namespaced_custom_object(
                "cert-manager.io", "v1", NS, plural, name
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    leaf = wait_for(lambda: custom("certificates", "certs-learner-tls"), what="the leaf")
    ca = custom("certificates", "certs-learner-ca")
    assert ca["spec"]["isCA"] is True
    assert leaf["spec"]["issuerRef"]["name"] == "certs-learner-ca"
    assert custom("issuers", "certs-learner-ca")["spec"] == {
        "ca": {"secretName": "certs-learner-ca"}
    }
    # What cert-manager then writes (with each Certificate's secretTemplate labels); it does
    # not delete them with their Certificates, so the operator makes the Experiment own
    # them, and they go with it.
    for name in ("certs-learner-tls", "certs-learner-ca"):
        labels = custom("certificates", name)["spec"]["secretTemplate"]["labels"]
        k8s.core.create_namespaced_secret(
            NS,
            # A kubernetes.io/tls Secret must hold both keys (the API server validates it).
            {
                "metadata": {"name": name, "labels": labels},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": "", "tls.key": ""},
            },
        )

    def owned(name):
        secret = k8s.core.read_namespaced_secret(name, NS)
        return any(r.uid == uid for r in secret.metadata.owner_references or [])

    k8s.patch_spec("certs", {"budget": {"maxEnvSteps": 2000000}})  # a reconcile
    for name in ("certs-learner-tls", "certs-learner-ca"):
        wait_for(lambda name=name: owned(name), what=f"{name} owned by the Experiment")


def test_a_role_trimmed_by_one_verb_is_reported_in_status_and_events(k8s, harness):
    rbac = kubernetes.client.RbacAuthorizationV1Api(harness.api)
    role = rbac.read_cluster_role(harness.cluster.operator_role)
    original = harness.api.sanitize_for_serialization(role)["rules"]
    # An administrator trimmed the operator's role: NetworkPolicies read only (server-side
    # apply, which creates what is missing, is authorized as patch).
    trimmed = [
        {**r, "verbs": ["get"]} if "networkpolicies" in r.get("resources", []) else r
        for r in original
    ]
    rbac.patch_cluster_role(harness.cluster.operator_role, {"rules": trimmed})
    name = "trimmed"
    try:
        k8s.create(name)
        applied = wait_for(
            lambda: (c := k8s.condition(name, "SpecApplied")).get("reason") == "Forbidden" and c,
            60,
            "SpecApplied=False, reason Forbidden",
        )
        assert 'cannot patch resource "networkpolicies"' in applied["message"], applied
        assert harness.cluster.operator_user in applied["message"]
        events = wait_for(
            lambda: [
                e
                for e in k8s.core.list_namespaced_event(NS).items
                if e.involved_object.name == name and e.reason == "Forbidden"
            ],
            what="the Forbidden event",
        )
        assert len(events) == 1 and events[0].type == "Warning", events
        # Nothing that needs the missing right was made; the learner was never started.
        assert k8s.child("Job", f"{name}-learner") is None
        assert any("networkpolicies" in r for r in harness.cluster.operator_refusals())
    finally:
        rbac.patch_cluster_role(harness.cluster.operator_role, {"rules": original})
    # Granted again, the next poll makes the rest: nothing was lost meanwhile.
    wait_for(
        lambda: (
            k8s.condition(name, "SpecApplied").get("status") == "True"
            and k8s.child("Job", f"{name}-learner")
        ),
        60,
        "the children made once the role allows it",
    )
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
