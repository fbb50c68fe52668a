"""Faults of the control plane itself (issue 36 item 6), with the real operator on the real
kube-apiserver v1.37 and etcd: the API server restarted mid-run, watches expired by an etcd
compaction (410 Gone), the API server unreachable for 60 s, and the active replica of two
peered operators killed.

The learner and actors do not run here (no kubelet): as in test_handlers.py, the tests write
the Job's and Deployment's status as their controllers would, and the harness's status server
plays the running learner's ``/status``, whose progress the tests advance while the fault lasts.
What each test proves is what the operator owes a run that goes on training meanwhile: it does
not exit or fail anything, no child is made again or replaced (uids kept, the learner Job not
written at all), what changed meanwhile is reconciled and the status catches up with the
learner. The operator reaches the API server through a TCP relay
(:mod:`support.operator_faults`), so that it alone can be cut off while the tests, as the
cluster's admin, go on changing things. Nothing sleeps: every step waits on a condition with a
deadline; the outage itself is a deadline during which the operator is watched.
"""

from __future__ import annotations

import copy
import datetime
import logging
import time
import urllib.request
from pathlib import Path

import kubernetes
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from seedrl.common.config import GROUP, PLURAL, VERSION
from seedrl.service.operator.status import condition
from support.operator_faults import OperatorReplica, ProxiedOperatorHarness, peering_manifest
from support.operator_harness import LearnerStatusServer, OperatorCluster, wait_for

#: The real control plane, and helm to render the operator chart's RBAC.
pytestmark = [pytest.mark.cluster, pytest.mark.helm]

NS = "faults"
ROOT = Path(__file__).parents[3]
CARTPOLE = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
#: The kinds an Experiment's children are among (those it owns are its children).
CHILD_KINDS = (
    "configmaps,services,networkpolicies,jobs,deployments,poddisruptionbudgets,"
    "persistentvolumeclaims"
)
#: How long the API server stays out of the operator's reach (issue 36: "for 60 s"): longer
#: than kopf's request retries (1+1+2+3+5+8+13+21 = 54 s) before a call gives up.
OUTAGE_SECONDS = 60.0
#: kopf's default peering lifetime (the chart sets none): a replica that stops renewing its
#: record is taken for dead that long after its last renewal.
PEERING_LIFETIME = 60.0
#: What a step may take on a shared, loaded machine (a deadline, not an expectation).
SLOW = 90.0


@pytest.fixture(scope="module")
def harness():
    with ProxiedOperatorHarness(NS) as h:
        yield h
        assert h.operator_alive, f"the operator ended: {h.operator_error!r}"
        # Whatever the faults, the chart's RBAC refused the operator nothing; a restarted API
        # server refuses everyone (the controller-manager too) until its RBAC caches are
        # filled, before it reports ready.
        assert refusals(h.cluster, h.restarts) == []


def refusals(
    cluster: OperatorCluster, restarts: list[tuple[datetime.datetime, datetime.datetime]]
) -> list[str]:
    """The operator's requests refused as forbidden (403), but while the API server was
    restarting."""
    assert cluster.plane is not None
    refused = []
    for event in cluster.plane.audit_events():
        if (event.get("user") or {}).get("username") != cluster.operator_user:
            continue
        if (event.get("responseStatus") or {}).get("code") != 403:
            continue
        at = datetime.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
        if any(start <= at <= end for start, end in restarts):
            continue
        ref = event.get("objectRef") or {}
        refused.append(f"{event.get('verb')} {ref.get('resource')} {ref.get('name', '')}")
    return refused


class Run:
    """One Experiment of the tests, driven as the cluster's admin."""

    def __init__(self, cluster: OperatorCluster, learners: LearnerStatusServer, name: str):
        self.cluster, self.learners, self.name = cluster, learners, name
        api = cluster.api_client()
        self.api = api
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.apps = kubernetes.client.AppsV1Api(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        self.core = kubernetes.client.CoreV1Api(api)

    def create(self) -> dict:
        body = copy.deepcopy(CARTPOLE)
        body["metadata"]["name"] = self.name
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def experiment(self) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, self.name)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self) -> dict:
        return (self.experiment() or {}).get("status") or {}

    def children(self) -> dict[str, dict]:
        """What the Experiment owns now, by ``Kind/name``."""
        listed = yaml.safe_load(self.cluster.kubectl("get", CHILD_KINDS, "-n", NS, "-o", "json"))[
            "items"
        ]
        return {
            f"{o['kind']}/{o['metadata']['name']}": o
            for o in listed
            if any(
                r.get("kind") == "Experiment" and r.get("name") == self.name
                for r in o["metadata"].get("ownerReferences") or []
            )
        }

    def deployment(self) -> dict | None:
        return self.children().get(f"Deployment/{self.name}-actors")

    def job(self) -> dict:
        return self.children()[f"Job/{self.name}-learner"]

    def mark_ready(self, actors: int) -> None:
        """What the Job and Deployment controllers write once the pods are ready."""
        self.batch.patch_namespaced_job_status(
            f"{self.name}-learner",
            NS,
            {"status": {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}},
        )
        self.apps.patch_namespaced_deployment_status(
            f"{self.name}-actors",
            NS,
            {"status": {"replicas": actors, "readyReplicas": actors, "availableReplicas": actors}},
        )

    def learner_reports(self, env_steps: int) -> None:
        """The running learner's ``/status`` now says ``env_steps``."""
        self.learners.statuses[(NS, self.name)] = {
            "state": "running",
            "env_steps": env_steps,
            "learner_steps": env_steps // 400,
            "episodes": env_steps // 200,
            "mean_return": 21.5,
            "actors": 4,
            "last_checkpoint": f"ckpt-{env_steps}",
            "stop_reason": None,
        }

    def caught_up(self, env_steps: int) -> bool:
        """Whether the status says Running and Ready with ``env_steps``."""
        status = self.status()
        return (
            status.get("phase") == "Running"
            and status.get("envSteps") == env_steps
            and (condition(status, "Ready") or {}).get("status") == "True"
        )

    def wait_caught_up(self, env_steps: int, actors: int, timeout: float = SLOW) -> None:
        """Waits for the actor Deployment to ask for ``actors`` replicas, plays the Deployment
        controller making them ready, then waits for :meth:`caught_up`; fails saying what the
        status and actors are."""
        try:
            wait_for(
                lambda: ((self.deployment() or {}).get("spec") or {}).get("replicas") == actors,
                timeout,
                "",
            )
            self.apps.patch_namespaced_deployment_status(
                f"{self.name}-actors",
                NS,
                {
                    "status": {
                        "replicas": actors,
                        "readyReplicas": actors,
                        "availableReplicas": actors,
                    }
                },
            )
            wait_for(lambda: self.caught_up(env_steps), timeout, "")
        except AssertionError:
            status = self.status()
            spec = (self.deployment() or {}).get("spec")
            raise AssertionError(
                f"{self.name} not caught up with {env_steps} env steps and {actors} actors in "
                f"{timeout:.0f} s: phase {status.get('phase')}, envSteps "
                f"{status.get('envSteps')}, conditions {status.get('conditions')}, "
                f"actor replicas {spec and spec.get('replicas')}"
            ) from None

    def start(self, env_steps: int = 1000) -> dict[str, str]:
        """Creates the run, plays its pods ready and its learner at ``env_steps``, waits for
        the status to say so; returns its children's uids by ``Kind/name``."""
        self.create()
        wait_for(
            lambda: (
                {f"Job/{self.name}-learner", f"Deployment/{self.name}-actors"}
                <= set(self.children())
            ),
            SLOW,
            f"{self.name}'s children",
        )
        self.mark_ready(4)
        self.learner_reports(env_steps)
        wait_for(lambda: self.caught_up(env_steps), SLOW, f"{self.name} Running at {env_steps}")
        return self.uids()

    def uids(self) -> dict[str, str]:
        return {key: obj["metadata"]["uid"] for key, obj in self.children().items()}

    def scale(self, replicas: int) -> None:
        """``kubectl scale experiment/NAME --replicas=N`` (the scale subresource)."""
        self.cluster.kubectl(
            "scale", "-n", NS, f"experiments.{GROUP}/{self.name}", f"--replicas={replicas}"
        )

    def warnings(self) -> list[str]:
        """The Warning Events posted about the Experiment."""
        return [
            f"{e.reason}: {e.message}"
            for e in self.core.list_namespaced_event(NS).items
            if e.involved_object.name == self.name and e.type == "Warning"
        ]


def reconciles(harness: ProxiedOperatorHarness, trigger: str) -> float:
    """``seedrl_operator_reconciles_total{trigger}`` as the operator exports it."""
    for family in text_string_to_metric_families(_scrape(harness)):
        for sample in family.samples:
            if (
                sample.name == "seedrl_operator_reconciles_total"
                and sample.labels.get("trigger") == trigger
            ):
                return sample.value
    raise AssertionError(f"no seedrl_operator_reconciles_total{{trigger={trigger!r}}}")


def _scrape(harness: ProxiedOperatorHarness) -> str:
    with urllib.request.urlopen(harness.metrics_url, timeout=10) as answer:  # noqa: S310
        return answer.read().decode()


def has_series(harness: ProxiedOperatorHarness, experiment: str) -> bool:
    """Whether the operator exports any series of ``experiment``."""
    return any(
        s.labels.get("experiment") == experiment
        for family in text_string_to_metric_families(_scrape(harness))
        for s in family.samples
    )


def operator_writes(harness: ProxiedOperatorHarness, since: int, names: str) -> list[str]:
    """What the operator created or deleted (and the API server did) of the objects whose
    name starts with ``names``, among the audit events after the first ``since``: creates,
    server-side applies that created (201), deletes."""
    found = []
    for event in harness.cluster.operator_requests(since, names):
        ref = event.get("objectRef") or {}
        verb, code = event.get("verb"), (event.get("responseStatus") or {}).get("code", 0)
        # A create-only child (the run volume) that exists answers 409: nothing made.
        made = (verb == "create" and code < 300) or (verb == "patch" and code == 201)
        if made or (verb in ("delete", "deletecollection") and code < 300):
            found.append(f"{verb} {ref.get('resource')} {ref.get('name')} ({code})")
    return found


def audit_mark(harness: ProxiedOperatorHarness) -> int:
    plane = harness.cluster.plane
    assert plane is not None
    return len(plane.audit_events())


# ------------------------------------------------------------------------------------------


def test_an_api_server_restarted_mid_run_loses_nothing(harness):
    run = Run(harness.cluster, harness.learners, "restart")
    uids = run.start(env_steps=1000)
    job_version = run.job()["metadata"]["resourceVersion"]
    changes = reconciles(harness, "change")
    plane = harness.cluster.plane
    assert plane is not None
    since = audit_mark(harness)

    harness.restart_apiserver()
    # Meanwhile the learner trained on; the user scales the run on the new API server.
    run.learner_reports(5000)
    run.scale(2)

    run.wait_caught_up(5000, 2)
    # kopf's own handler applied the new spec: its watch of Experiments is back.
    wait_for(lambda: reconciles(harness, "change") > changes, SLOW, "kopf's change handler")
    assert harness.operator_alive, harness.operator_error
    assert run.uids() == uids
    assert run.job()["metadata"]["resourceVersion"] == job_version, "the learner Job was written"
    assert operator_writes(harness, since, "restart") == []
    assert run.warnings() == []


@pytest.fixture
def watch_restarts():
    """The resources whose watch kopf restarted after a 410 Gone (its debug log says so)."""
    restarted: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Restarting the watch-stream for "):
                restarted.append(message)

    logger = logging.getLogger("kopf._cogs.clients.watching")
    handler, level = Handler(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield restarted
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_watches_expired_by_an_etcd_compaction_relist_and_miss_nothing(harness, watch_restarts):
    scaled = Run(harness.cluster, harness.learners, "relist-scaled")
    healed = Run(harness.cluster, harness.learners, "relist-healed")
    gone = Run(harness.cluster, harness.learners, "relist-gone")
    uids = {run.name: run.start(env_steps=1000) for run in (scaled, healed)}
    gone.start(env_steps=1000)
    jobs = {run.name: run.job()["metadata"]["resourceVersion"] for run in (scaled, healed)}
    plane = harness.cluster.plane
    assert plane is not None

    # The operator is cut off; what changes meanwhile reaches no watch of its own: one run is
    # scaled and trains on, another loses its actor Deployment (nothing in its spec changes,
    # so only noticing the deletion brings it back), a third is deleted.
    harness.cut()
    scaled.scale(3)
    scaled.learner_reports(7000)
    healed.apps.delete_namespaced_deployment("relist-healed-actors", NS)
    gone.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "relist-gone")
    wait_for(lambda: not gone.children(), SLOW, "relist-gone's children collected")
    # That history is compacted away, and the API server restarts with a fresh watch cache:
    # the operator's watches can resume from what they last saw neither from the cache nor
    # from etcd (a long partition, or a cache that moved on, ends the same way).
    revision = plane.compact_etcd()
    harness.restart_apiserver()
    since = audit_mark(harness)
    harness.restore()

    # kopf was told 410 Gone and listed again.
    for plural in ("experiments", "deployments"):
        wait_for(
            lambda plural=plural: any(plural in r for r in watch_restarts),
            SLOW,
            f"kopf restarting its {plural} watch after 410 Gone (compacted at {revision})",
        )
    scaled.wait_caught_up(7000, 3)
    # The re-list delivered no DELETED for the Deployment: the resync it triggers noticed it
    # gone, and the poller made it again (with a 300 s resync alone, not in this deadline).
    healed.wait_caught_up(1000, 4)
    now = healed.uids()
    assert now.pop("Deployment/relist-healed-actors") != uids[healed.name].pop(
        "Deployment/relist-healed-actors"
    )
    assert now == uids[healed.name]  # the rest kept
    assert operator_writes(harness, since, "relist-healed") == [
        "patch deployments relist-healed-actors (201)"  # server-side apply, creating
    ]
    assert scaled.uids() == uids[scaled.name]
    for run in (scaled, healed):
        assert run.job()["metadata"]["resourceVersion"] == jobs[run.name]
    # The Experiment deleted unseen is forgotten: its series go, nothing of it is made again.
    wait_for(lambda: not has_series(harness, "relist-gone"), SLOW, "relist-gone forgotten")
    assert gone.children() == {} and gone.experiment() is None
    assert operator_writes(harness, since, "relist-gone") == []
    assert harness.operator_alive, harness.operator_error


def test_sixty_seconds_without_the_api_server_fail_nothing(harness):
    run = Run(harness.cluster, harness.learners, "outage")
    uids = run.start(env_steps=1000)
    job_version = run.job()["metadata"]["resourceVersion"]
    before = run.status()
    since = audit_mark(harness)

    harness.cut()
    deadline = time.monotonic() + OUTAGE_SECONDS
    # The run goes on: the learner trains, the user scales it, on an API server the operator
    # cannot reach.
    run.learner_reports(9000)
    run.scale(3)
    watched = 0
    while time.monotonic() < deadline:
        assert harness.operator_alive, f"the operator ended: {harness.operator_error!r}"
        status = run.status()
        assert status.get("phase") == "Running", status
        assert status.get("envSteps") == 1000  # nobody wrote it meanwhile
        watched += 1
        time.sleep(0.5)  # the interval of the watch; the deadline bounds it
    assert watched > 10
    harness.restore()

    run.wait_caught_up(9000, 3)
    after = run.status()
    assert after["startTime"] == before["startTime"]
    assert [c["type"] for c in after["conditions"] if c["status"] != "True"] == [
        c["type"] for c in before["conditions"] if c["status"] != "True"
    ]
    assert run.uids() == uids
    assert run.job()["metadata"]["resourceVersion"] == job_version
    assert operator_writes(harness, since, "outage") == []
    assert run.warnings() == []
    assert harness.operator_alive, harness.operator_error


# ------------------------------------------------------------------------------------------
# Two replicas, as the chart runs them by default (replicaCount: 2, kopf peering).
# ------------------------------------------------------------------------------------------


def peers(cluster: OperatorCluster, name: str) -> dict:
    """The ClusterKopfPeering's records, by identity."""
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    body = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
    return body.get("status") or {}


def test_a_killed_leader_is_replaced_by_its_peer_within_the_peering_lifetime(tmp_path):
    learners = LearnerStatusServer()
    learners.serve()
    try:
        with OperatorCluster(NS) as cluster:
            peering = peering_manifest()
            cluster.create(peering)
            replicas: list[OperatorReplica] = []
            try:
                peered_run(cluster, learners, tmp_path, peering["metadata"]["name"], replicas)
            finally:
                for replica in replicas:
                    replica.stop()
    finally:
        learners.close()


#: What kopf logs when a paused replica becomes the active one.
RESUMING = "Resuming operations after the pause"


def peered_run(
    cluster: OperatorCluster,
    learners: LearnerStatusServer,
    tmp_path: Path,
    name: str,
    replicas: list[OperatorReplica],
) -> None:
    """Two replicas peered through the ClusterKopfPeering ``name``; the leader killed."""

    def replica(role: str, priority: int) -> OperatorReplica:
        started = OperatorReplica(
            cluster, learners, tmp_path, role, peering=name, priority=priority
        ).start()
        replicas.append(started)
        wait_for(
            lambda: started.identity in peers(cluster, name),
            SLOW,
            f"the {role} in the peering\n{started.tail()}",
        )
        return started

    leader = replica("leader", 200)
    follower = replica("follower", 100)
    run = Run(cluster, learners, "peered")
    uids = run.start(env_steps=1000)
    job_version = run.job()["metadata"]["resourceVersion"]
    # The leader did that; the follower stands by (kopf starts paused, and resumes only where
    # no live peer has a higher priority).
    assert RESUMING in leader.output()
    assert RESUMING not in follower.output(), follower.tail()

    leader.kill()
    killed = time.monotonic()
    run.learner_reports(4000)
    run.scale(3)
    run.wait_caught_up(4000, 3, PEERING_LIFETIME + SLOW)
    print(f"the follower caught up {time.monotonic() - killed:.1f} s after the leader's kill")
    assert RESUMING in follower.output()
    assert follower.alive, follower.tail()
    assert run.uids() == uids
    assert run.job()["metadata"]["resourceVersion"] == job_version
    assert run.warnings() == []
    assert cluster.operator_refusals() == []
