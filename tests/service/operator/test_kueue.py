"""The operator with a queued Experiment (``spec.queueName``) against the real Kueue v0.17
(support.kueue: its controller manager, CRDs, RBAC and webhooks, the ``batch/job`` and ``pod``
integrations) on the real kube-apiserver, with kube-controller-manager running the Job,
Deployment and ReplicaSet controllers (no scheduler: pods stay Pending, which Kueue's
admission does not wait for). Kueue, not the test, makes the Workloads, admits the learner Job
by unsuspending it, gates each actor pod until its quota is reserved, and suspends the Job
when the operator deactivates its Workload."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes
import pytest
import yaml

from seedrl.common.config import GROUP, PLURAL, VERSION
from seedrl.service.operator.status import condition
from support.kueue import Kueue, describe
from support.operator_harness import (
    WORKLOAD_CONTROLLERS,
    OperatorHarness,
    wait_for,
)

#: The real control plane and Kueue, and helm to render the operator chart's RBAC.
pytestmark = [pytest.mark.cluster, pytest.mark.helm]

NS = "team-k"
ROOT = Path(__file__).parents[3]
CARTPOLE = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
KUEUE = ("kueue.x-k8s.io", "v1beta2")
MERGE = "application/merge-patch+json"
#: Kueue's scheduling gate on a pod it has not admitted yet (pod integration).
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: Kueue's label on a Workload: the uid of the Job or pod it stands for.
JOB_UID = "kueue.x-k8s.io/job-uid"
#: Steps of Kueue and the controllers take well under a second on an idle machine; a cluster
#: step on two shared, loaded cores may take far longer.
STEP = 120.0


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    with OperatorHarness(NS, controllers=WORKLOAD_CONTROLLERS) as h:
        assert h.cluster.plane is not None
        with Kueue(h.cluster.plane, tmp_path_factory.mktemp("kueue")) as kueue:
            print(describe(kueue))
            yield h
            # Kueue ran with its own ServiceAccount: its release's RBAC was enough.
            assert kueue.refusals() == []
        # The chart's RBAC is enough for what the operator does with Kueue's Workloads.
        assert h.cluster.operator_refusals() == []


class Cluster:
    """The tests' side: the admin's client for Experiments, Kueue's objects and pods."""

    def __init__(self, harness: OperatorHarness):
        self.harness = harness
        self.custom = kubernetes.client.CustomObjectsApi(harness.api)
        self.core = kubernetes.client.CoreV1Api(harness.api)
        self.apps = kubernetes.client.AppsV1Api(harness.api)
        self.batch = kubernetes.client.BatchV1Api(harness.api)

    def queue(self, name: str, cpu: str, memory: str) -> str:
        """A ClusterQueue ``name`` with that quota of one ResourceFlavor, and a LocalQueue of
        the same name in the tests' namespace pointing at it; returns the LocalQueue's name."""
        group, version = KUEUE
        flavor = {"apiVersion": f"{group}/{version}", "kind": "ResourceFlavor"}
        try:
            self.custom.create_cluster_custom_object(
                group, version, "resourceflavors", {**flavor, "metadata": {"name": "default"}}
            )
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:  # made by an earlier test
                raise
        resources = [
            {"name": "cpu", "nominalQuota": cpu},
            {"name": "memory", "nominalQuota": memory},
        ]
        self.custom.create_cluster_custom_object(
            group,
            version,
            "clusterqueues",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [{"name": "default", "resources": resources}],
                        }
                    ],
                },
            },
        )
        self.custom.create_namespaced_custom_object(
            group,
            version,
            NS,
            "localqueues",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "LocalQueue",
                "metadata": {"name": name},
                "spec": {"clusterQueue": name},
            },
        )
        return name

    def experiment(self, name: str, **spec) -> None:
        body = copy.deepcopy(CARTPOLE)
        body["metadata"]["name"] = name
        body["spec"].update(spec)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def patch_spec(self, name: str, spec: dict) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, name, {"spec": spec}, _content_type=MERGE
        )

    def condition(self, name: str, type_: str) -> dict:
        exp = self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        return condition(exp.get("status") or {}, type_) or {}

    def job(self, name: str) -> dict:
        return self.harness.api.sanitize_for_serialization(
            self.batch.read_namespaced_job(f"{name}-learner", NS)
        )

    def actor_replicas(self, name: str) -> int:
        return self.apps.read_namespaced_deployment(f"{name}-actors", NS).spec.replicas

    def workload_of(self, uid: str) -> dict | None:
        """Kueue's Workload for the Job or pod of that uid, or None while there is none."""
        group, version = KUEUE
        items = self.custom.list_namespaced_custom_object(
            group, version, NS, "workloads", label_selector=f"{JOB_UID}={uid}"
        )["items"]
        assert len(items) <= 1, items
        return items[0] if items else None

    def actor_pods(self, name: str) -> list[dict]:
        pods = self.core.list_namespaced_pod(
            NS, label_selector=f"seedrl.dev/experiment={name},seedrl.dev/role=actor"
        ).items
        return [self.harness.api.sanitize_for_serialization(p) for p in pods]


def workload_condition(workload: dict | None, type_: str) -> dict:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return {}


def gated(pod: dict) -> bool:
    return any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


@pytest.fixture
def cluster(harness):
    return Cluster(harness)


def test_kueue_admits_the_learner_gates_the_actors_and_suspend_deactivates_it(cluster, harness):
    # Quota for the learner (2 CPU, 4Gi) and two of the four actors (500m, 1Gi each).
    queue = cluster.queue("team-k", cpu="3", memory="6Gi")
    cluster.experiment("queued", queueName=queue)
    job = wait_for(lambda: cluster.job("queued"), STEP, "the learner Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue
    uid = job["metadata"]["uid"]
    # Kueue makes the Job's Workload, reserves its quota and admits it by unsuspending the Job.
    workload = wait_for(
        lambda: (
            workload_condition(cluster.workload_of(uid), "Admitted").get("status") == "True"
            and cluster.workload_of(uid)
        ),
        STEP,
        "Kueue to admit the learner's Workload",
    )
    assert workload["status"]["admission"]["clusterQueue"] == queue
    wait_for(lambda: cluster.job("queued")["spec"]["suspend"] is False, STEP, "Job unsuspended")
    wait_for(
        lambda: cluster.condition("queued", "LearnerReady").get("reason") not in (None, "Queued"),
        STEP,
        "the status to leave Queued",
    )
    # Admitted: the operator scales the actors up, the ReplicaSet controller makes their pods
    # and Kueue's pod webhook gates each one until its own Workload has quota: two fit.
    wait_for(lambda: cluster.actor_replicas("queued") == 4, STEP, "four actors wanted")

    def split():
        pods = cluster.actor_pods("queued")
        workloads = [cluster.workload_of(p["metadata"]["uid"]) for p in pods]
        admitted = [p for p in pods if not gated(p)]
        # Kueue has tried the others, and said why they wait.
        waiting = [
            w for w in workloads if workload_condition(w, "QuotaReserved").get("status") == "False"
        ]
        if len(pods) == 4 and len(admitted) == 2 and len(waiting) == 2:
            return admitted, waiting
        return None

    admitted, waiting = wait_for(split, STEP, "two actor pods admitted, two gated")
    for pod in admitted:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    for w in waiting:
        message = workload_condition(w, "QuotaReserved")["message"]
        assert "insufficient unused quota for cpu" in message

    # Suspend: the operator deactivates the Workload, Kueue evicts it and suspends the Job.
    cluster.patch_spec("queued", {"suspend": True})
    wait_for(lambda: cluster.workload_of(uid)["spec"]["active"] is False, STEP, "Workload inactive")
    wait_for(lambda: cluster.job("queued")["spec"]["suspend"] is True, STEP, "Kueue suspends")
    wait_for(lambda: cluster.actor_replicas("queued") == 0, STEP, "actors scaled to zero")
    wait_for(lambda: not cluster.actor_pods("queued"), STEP, "actor pods gone")
    evicted = workload_condition(cluster.workload_of(uid), "Evicted")
    assert evicted.get("status") == "True" and evicted.get("reason") == "Deactivated", evicted
    # The operator never writes a queued Job's spec.suspend, which Kueue owns: no patch fight.
    assert not [
        e
        for e in harness.cluster.plane.audit_events()
        if (e.get("user") or {}).get("username") == harness.cluster.operator_user
        and e.get("verb") in ("patch", "update")
        and (e.get("objectRef") or {}).get("resource") == "jobs"
    ]

    # Resume: active again, Kueue admits it again and unsuspends the Job; the actors return.
    cluster.patch_spec("queued", {"suspend": False})
    wait_for(
        lambda: workload_condition(cluster.workload_of(uid), "Admitted").get("status") == "True",
        STEP,
        "Kueue to admit the Workload again",
    )
    wait_for(lambda: cluster.job("queued")["spec"]["suspend"] is False, STEP, "Job resumed")
    wait_for(lambda: cluster.actor_replicas("queued") == 4, STEP, "actors back")


def test_a_cluster_queue_without_quota_keeps_the_experiment_queued(cluster):
    # 1 CPU: less than the learner asks for.
    queue = cluster.queue("starved", cpu="1", memory="6Gi")
    cluster.experiment("starved", queueName=queue)
    job = wait_for(lambda: cluster.job("starved"), STEP, "the learner Job")
    uid = job["metadata"]["uid"]
    workload = wait_for(
        lambda: (
            workload_condition(cluster.workload_of(uid), "QuotaReserved")
            and cluster.workload_of(uid)
        ),
        STEP,
        "Kueue to try the Workload",
    )
    reserved = workload_condition(workload, "QuotaReserved")
    assert reserved["status"] == "False" and "insufficient quota for cpu" in reserved["message"]
    assert cluster.job("starved")["spec"]["suspend"] is True
    assert cluster.actor_replicas("starved") == 0
    ready = wait_for(
        lambda: (
            cluster.condition("starved", "LearnerReady").get("reason") == "Queued"
            and cluster.condition("starved", "LearnerReady")
        ),
        STEP,
        "LearnerReady Queued",
    )
    assert queue in ready["message"]
    # Why, in Kueue's own words: the learner asks for more than the ClusterQueue holds.
    assert reserved["message"] in wait_for(
        lambda: (
            "insufficient" in cluster.condition("starved", "LearnerReady")["message"]
            and cluster.condition("starved", "LearnerReady")["message"]
        ),
        STEP,
        "Kueue's reason in LearnerReady",
    )
