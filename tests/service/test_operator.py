"""The operator (kopf, service/operator.py) against kmock's emulated Kubernetes API over HTTP,
driven with the real ``kubernetes`` client. Nothing here sleeps: every step waits on a
condition with a timeout."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes
import pytest
import yaml

from common.config import parse_experiment
from service import crd, reconcile
from support.operator_harness import OperatorHarness, wait_for

NS = "team-a"
ROOT = Path(__file__).parents[2]
CARTPOLE = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
MERGE = "application/merge-patch+json"
CHILDREN = [("ConfigMap", "{}-config"), ("Service", "{}-learner"),
            ("NetworkPolicy", "{}-learner"), ("Job", "{}-learner"), ("Deployment", "{}-actors")]


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness() as h:
        yield h


class Client:
    """The tests' side: the official kubernetes client against the emulator."""

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
        return self.custom.create_namespaced_custom_object(crd.GROUP, crd.VERSION, NS,
                                                           crd.PLURAL, body)

    def get(self, name):
        return self.custom.get_namespaced_custom_object(crd.GROUP, crd.VERSION, NS, crd.PLURAL,
                                                        name)

    def patch_spec(self, name, spec):
        return self.custom.patch_namespaced_custom_object(
            crd.GROUP, crd.VERSION, NS, crd.PLURAL, name, {"spec": spec}, _content_type=MERGE)

    def status(self, name):
        return self.get(name).get("status") or {}

    def condition(self, name, type_):
        return reconcile.condition(self.status(name), type_) or {}

    def child(self, kind, name):
        read = {"ConfigMap": self.core.read_namespaced_config_map,
                "Service": self.core.read_namespaced_service,
                "NetworkPolicy": self.net.read_namespaced_network_policy,
                "Job": self.batch.read_namespaced_job,
                "Deployment": self.apps.read_namespaced_deployment}[kind]
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
        self.batch.patch_namespaced_job_status(f"{name}-learner", NS, {"status": {
            "active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}})
        self.apps.patch_namespaced_deployment_status(f"{name}-actors", NS, {"status": {
            "replicas": actors, "readyReplicas": actors, "availableReplicas": actors}})


@pytest.fixture
def k8s(harness):
    return Client(harness)


def running_learner(env_steps=12000, **extra):
    return {"state": "running", "env_steps": env_steps, "learner_steps": 30, "episodes": 50,
            "mean_return": 21.5, "actors": 4, "last_checkpoint": "ckpt-3", "stop_reason": None,
            **extra}


def test_apply_creates_every_child_with_owner_references(k8s):
    uid = k8s.create("apply")["metadata"]["uid"]
    children = wait_for(lambda: (c := k8s.children("apply")) and all(c.values()) and c,
                        what="all children")
    for kind, obj in children.items():
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "seedrl.dev/v1alpha1", "kind": "Experiment",
                         "name": "apply", "uid": uid, "controller": True,
                         "blockOwnerDeletion": True}], kind
    config = yaml.safe_load(children["ConfigMap"]["data"]["config.yaml"])
    assert config["spec"]["actors"]["replicas"] == 4
    assert children["Deployment"]["spec"]["replicas"] == 4
    status = wait_for(lambda: k8s.status("apply").get("phase"), what="a phase") and \
        k8s.status("apply")
    assert status["phase"] == "Pending"
    assert reconcile.condition(status, "Valid")["status"] == "True"
    assert status["selector"] == "seedrl.dev/experiment=apply,seedrl.dev/role=actor"


def test_ready_pods_and_learner_status_advance_the_conditions(k8s, harness):
    k8s.create("ready")
    wait_for(lambda: all(k8s.children("ready").values()), what="children")
    k8s.mark_ready("ready", 4)
    wait_for(lambda: k8s.status("ready").get("phase") == "Running", what="Running")
    wait_for(lambda: k8s.condition("ready", "ActorsReady").get("status") == "True",
             what="ActorsReady")
    # The learner pod is up but its status endpoint does not answer yet.
    wait_for(lambda: k8s.condition("ready", "Progressing").get("reason") ==
             "StatusUnavailable", what="Progressing Unknown")
    harness.learners.statuses[(NS, "ready")] = {"state": "waiting_for_actors",
                                                "mean_return": None}
    wait_for(lambda: k8s.condition("ready", "Progressing").get("reason") ==
             "WaitingForActors", what="WaitingForActors")
    harness.learners.statuses[(NS, "ready")] = running_learner()
    wait_for(lambda: k8s.condition("ready", "Ready").get("status") == "True", what="Ready")
    status = wait_for(lambda: (s := k8s.status("ready")).get("envFrames") == 12000 and s,
                      what="progress in status")
    assert status["learnerSteps"] == 30 and status["meanReturn"] == 21.5
    assert status["lastCheckpoint"] == "ckpt-3" and status["actors"]["connected"] == 4
    assert status["startTime"] == "2026-01-01T00:00:00Z"
    assert reconcile.condition(status, "Progressing")["reason"] == "Training"
    # The learner reaches its budget: the Job completes and the actors are stopped.
    k8s.batch.patch_namespaced_job_status("ready-learner", NS, {"status": {
        "active": 0, "ready": 0, "succeeded": 1, "completionTime": "2026-01-01T01:00:00Z",
        "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods"}]}})
    wait_for(lambda: k8s.status("ready").get("phase") == "Succeeded", what="Succeeded")
    wait_for(lambda: k8s.child("Deployment", "ready-actors")["spec"]["replicas"] == 0,
             what="actors scaled to zero after success")
    assert k8s.status("ready")["completionTime"] == "2026-01-01T01:00:00Z"
    # ttlSecondsAfterFinished deletes the Job: a finished experiment is not started again.
    k8s.batch.delete_namespaced_job("ready-learner", NS)
    wait_for(lambda: k8s.condition("ready", "LearnerReady").get("reason") == "Finished",
             what="LearnerReady Finished")
    assert k8s.child("Job", "ready-learner") is None
    assert k8s.status("ready")["phase"] == "Succeeded"


def test_scaling_the_experiment_scales_the_actors(k8s):
    k8s.create("scale")
    wait_for(lambda: k8s.child("Deployment", "scale-actors"), what="actors")
    # `kubectl scale experiment/scale --replicas=7` goes through the scale subresource.
    k8s.custom.patch_namespaced_custom_object_scale(crd.GROUP, crd.VERSION, NS, crd.PLURAL,
                                                    "scale", {"spec": {"replicas": 7}},
                                                    _content_type=MERGE)
    wait_for(lambda: k8s.child("Deployment", "scale-actors")["spec"]["replicas"] == 7,
             what="7 actors")
    k8s.patch_spec("scale", {"actors": {"replicas": 2}})
    wait_for(lambda: k8s.child("Deployment", "scale-actors")["spec"]["replicas"] == 2,
             what="2 actors")
    wait_for(lambda: k8s.status("scale").get("actors", {}).get("desired") == 2,
             what="status.actors.desired")
    # The pods' config is the user's Experiment only: none of kopf's bookkeeping annotations,
    # which would roll the actors at every handler run.
    document = copy.deepcopy(CARTPOLE)
    document["metadata"].update(name="scale", namespace=NS)
    document["spec"]["actors"]["replicas"] = 2
    expected = reconcile.config_hash(parse_experiment(document))
    template = k8s.child("Deployment", "scale-actors")["spec"]["template"]
    assert template["metadata"]["annotations"][reconcile.ANNOTATION_CONFIG_HASH] == expected
    generation = k8s.get("scale")["metadata"]["generation"]
    wait_for(lambda: k8s.status("scale").get("observedGeneration") == generation,
             what="observedGeneration")


def test_suspend_and_resume(k8s):
    k8s.create("pause")
    wait_for(lambda: k8s.child("Job", "pause-learner"), what="learner")
    k8s.mark_ready("pause", 4)
    wait_for(lambda: k8s.status("pause").get("phase") == "Running", what="Running")
    k8s.patch_spec("pause", {"suspend": True})
    # The Job controller then stops the learner pod gracefully (SIGTERM: final checkpoint).
    wait_for(lambda: k8s.child("Job", "pause-learner")["spec"]["suspend"] is True,
             what="Job suspended")
    wait_for(lambda: k8s.child("Deployment", "pause-actors")["spec"]["replicas"] == 0,
             what="actors at zero")
    wait_for(lambda: k8s.status("pause").get("phase") == "Suspended", what="Suspended")
    assert k8s.condition("pause", "Suspended")["status"] == "True"
    k8s.patch_spec("pause", {"suspend": False})
    wait_for(lambda: k8s.child("Job", "pause-learner")["spec"]["suspend"] is False,
             what="Job resumed")
    wait_for(lambda: k8s.child("Deployment", "pause-actors")["spec"]["replicas"] == 4,
             what="actors back")
    wait_for(lambda: k8s.status("pause").get("phase") == "Running", what="Running again")
    assert k8s.condition("pause", "Suspended")["status"] == "False"


def test_changing_an_immutable_field_is_refused(k8s):
    k8s.create("fixed")
    wait_for(lambda: k8s.status("fixed").get("appliedImmutable"), what="applied spec")
    k8s.patch_spec("fixed", {"env": {"id": "Acrobot-v1"}, "actors": {"replicas": 9}})
    cond = wait_for(lambda: (c := k8s.condition("fixed", "SpecApplied")).get("status") ==
                    "False" and c, what="SpecApplied False")
    assert cond["reason"] == "ImmutableFieldChanged" and "spec.env.id" in cond["message"]
    # Nothing of the refused spec reached the children.
    config = yaml.safe_load(k8s.child("ConfigMap", "fixed-config")["data"]["config.yaml"])
    assert config["spec"]["env"]["id"] == "CartPole-v1"
    assert k8s.child("Deployment", "fixed-actors")["spec"]["replicas"] == 4
    # Reverting the immutable field lets the rest through.
    k8s.patch_spec("fixed", {"env": {"id": "CartPole-v1"}})
    wait_for(lambda: k8s.condition("fixed", "SpecApplied").get("status") == "True",
             what="SpecApplied True")
    wait_for(lambda: k8s.child("Deployment", "fixed-actors")["spec"]["replicas"] == 9,
             what="9 actors")


def test_invalid_experiment_fails_and_others_still_reconcile(k8s):
    k8s.create("broken", learner={"unrollLength": 0})
    k8s.create("healthy")
    cond = wait_for(lambda: (c := k8s.condition("broken", "Valid")).get("status") == "False"
                    and c, what="ValidationFailed")
    assert cond["reason"] == "ValidationFailed"
    assert "spec.learner.unrollLength: must be >= 2, got 0" in cond["message"]
    assert k8s.status("broken")["phase"] == "Failed"
    wait_for(lambda: all(k8s.children("healthy").values()), what="healthy's children")
    assert not any(k8s.children("broken").values())
    # Fixing the spec brings it up.
    k8s.patch_spec("broken", {"learner": {"unrollLength": 20}})
    wait_for(lambda: all(k8s.children("broken").values()), what="fixed one's children")
    wait_for(lambda: k8s.condition("broken", "Valid").get("status") == "True", what="Valid")


def test_deletion_removes_every_child(k8s):
    k8s.create("gone")
    wait_for(lambda: all(k8s.children("gone").values()), what="children")
    k8s.custom.delete_namespaced_custom_object(crd.GROUP, crd.VERSION, NS, crd.PLURAL, "gone")
    wait_for(lambda: not any(k8s.children("gone").values()), what="children deleted")

    def experiment_gone():
        try:
            k8s.get("gone")
        except kubernetes.client.ApiException as exc:
            return exc.status == 404
        return False
    wait_for(experiment_gone, what="the Experiment itself (finalizer released)")
