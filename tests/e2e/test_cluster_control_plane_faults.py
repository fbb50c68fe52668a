"""Faults of the control plane itself while an Experiment trains (issue 36 item 6), with
everything real but the kubelet: the real control plane v1.37.2, the real operator (its chart's
two replicas, installed with helm, electing one through kopf's peering), the real learner and
actors running as pods (tests/support/cluster.py).

Each scenario brings one fault on the run of the module's cluster: kube-apiserver restarted;
kube-apiserver gone for 60 s for everyone (a zonal GKE control plane being upgraded: the process
stopped, started again at the same address); the active operator replica SIGKILLed while the
other one waits in the peering. What each proves is what a platform engineer expects of the
run: its learner and actor pods are the same ones (uids, restart counts), the learner's env steps
rise all through the fault (read from its own ``/status``, which needs no API server), the
Experiment never shows Failed nor a condition turning, its status catches up with the learner
after the fault within a deadline, and no Warning Event is posted in its namespace. Nothing
sleeps: every step waits on a condition with a deadline; the outage itself is a deadline during
which the run is watched.

A 60 s outage outlasts the node lifecycle controller's ``--node-monitor-grace-period`` (50 s),
so every node's Lease is stale when the API server is back. What v1.37's controller then does
depends on who is first: its lease circuit breaker (``NodeControllerLeaseCircuitBreaker``, beta,
on) skips the nodes while its lease cache is behind the live Leases the kubelets renewed; if it
reads the live Leases before they are renewed it sets every node Ready Unknown, marks their pods
Ready=False ("NodeNotReady" events), sees every zone fully disrupted and enters "master
disruption mode": no taint, no eviction, until the kubelets report again. Both were seen here;
either way the pods must survive (same uids, no restart), and whatever the controller marked
must be Ready again within a deadline.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import threading
import time
import urllib.request
from typing import Any, Callable

import pytest

from support.cluster import KubeCluster
from support.cluster_scenarios import (
    EXPERIMENTS,
    actor_pods,
    apply,
    diagnosis,
    experiment,
    install_operator,
    learner_pods,
    logs,
    peers,
    status,
)
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

NS, NAME = "faults", "cartpole"
#: How long the API server is gone (issue 36: "unreachable for 60 s"): longer than the node
#: lifecycle controller's ``--node-monitor-grace-period`` (50 s in v1.37), so that every
#: node's Lease is stale when it comes back.
OUTAGE_SECONDS = 60.0
#: kopf's peering lifetime (the chart sets none): a replica that stops renewing its record is
#: taken for dead that long after its last renewal, and the other one takes over.
PEERING_LIFETIME = 60.0
#: The longest the learner's env steps may stand still during a fault (it steps thousands a
#: second; a loaded machine stalls it for seconds, not this long).
MAX_STALL_SECONDS = 30.0
#: What a step may take on a shared, loaded machine (a deadline, not an expectation).
SLOW = 240.0


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def learner_status(cluster: KubeCluster) -> dict:
    """The running learner's own ``/status`` (its metrics port on its pod's address), read as
    the operator reads it, but from the kubelet's view of the pod: it needs no API server."""
    assert cluster.kubelet is not None
    worker = next(
        w
        for node in cluster.kubelet.nodes.values()
        for w in node.workers.values()
        if w.namespace == NS
        and (w.pod["metadata"].get("labels") or {}).get("seedrl.dev/role") == "learner"
        and not w.done.is_set()
    )
    (port,) = [
        p["containerPort"]
        for c in worker.pod["spec"]["containers"]
        for p in c.get("ports") or []
        if p.get("name") == "metrics"
    ]
    # Only the loopback pod address our kubelet gave it.
    with urllib.request.urlopen(f"http://{worker.ip}:{port}/status", timeout=5) as answer:
        return json.loads(answer.read())


def run_pods(cluster: KubeCluster) -> dict[str, tuple[str, int]]:
    """The run's learner and actor pods: ``name -> (uid, restart count)``."""
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []),
        )
        for p in [*learner_pods(cluster, NS, NAME), *actor_pods(cluster, NS, NAME)]
    }


def conditions(cluster: KubeCluster) -> dict[str, str]:
    """The Experiment's conditions: ``type -> status``."""
    return {c["type"]: c["status"] for c in status(cluster, NS, NAME).get("conditions") or []}


def ready_since(objects: list[dict]) -> dict[str, str]:
    """When each object's Ready condition last turned (a node's or a pod's)."""
    return {
        o["metadata"]["name"]: next(
            (
                f"{c['status']} since {c.get('lastTransitionTime')}"
                for c in o["status"].get("conditions") or []
                if c["type"] == "Ready"
            ),
            "no Ready condition",
        )
        for o in objects
    }


class Watch:
    """Watches the run from a thread while a fault lasts: the learner's env steps (always
    readable), and whatever of the Experiment's status and pods the API server answers."""

    def __init__(self, cluster: KubeCluster, mirrored: tuple[str, ...] = ()):
        self.cluster = cluster
        self.steps: list[tuple[float, int]] = []
        self.seen: list[str] = []
        #: The conditions that mirror pods' readiness (``mirrored``) seen changed, apart.
        self.dips: list[str] = []
        self.mirrored = set(mirrored)
        self.unanswered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="watch-run")
        self.conditions = conditions(cluster)
        assert self.conditions.get("Ready") == "True", self.conditions

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.steps.append(
                    (time.monotonic(), int(learner_status(self.cluster)["env_steps"]))
                )
            except (OSError, ValueError, StopIteration) as exc:
                self.seen.append(f"learner /status unreadable: {exc!r}")
            try:
                # None while a starting API server does not serve the kind yet.
                found = self.cluster.get(*EXPERIMENTS, NS, NAME)
            except Exception:  # noqa: BLE001 - the API server is away: nothing to read
                found = None
            if found is None:
                self.unanswered += 1
            else:
                shown = found.get("status") or {}
                now = {c["type"]: c["status"] for c in shown.get("conditions") or []}
                changed = {
                    t for t in {*now, *self.conditions} if now.get(t) != self.conditions.get(t)
                }
                if shown.get("phase") != "Running" or changed - self.mirrored:
                    self.seen.append(f"phase {shown.get('phase')}, conditions {now}")
                elif changed:
                    self.dips.append(f"{sorted(changed)} at {time.monotonic():.0f}")
            self._stop.wait(0.5)  # a sampling interval, not a wait for anything

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)

    def latest_steps(self) -> int:
        return self.steps[-1][1] if self.steps else 0

    def stalls(self, since: float, until: float) -> float:
        """The longest time the learner's env steps stood still in ``[since, until]``."""
        window = [(t, s) for t, s in self.steps if since <= t <= until]
        assert len(window) >= 2, f"the learner was read {len(window)} times during the fault"
        longest, last_t, last_s = 0.0, *window[0]
        for t, s in window[1:]:
            if s > last_s:
                last_t, last_s = t, s
            longest = max(longest, t - last_t)
        return longest


def warnings_since(cluster: KubeCluster, since: datetime.datetime) -> list[str]:
    """The Warning Events posted in the run's namespace at or after ``since``."""
    found = []
    for event in cluster.list("", "v1", "events", NS):
        at = event.get("lastTimestamp") or event.get("eventTime") or ""
        if event.get("type") != "Warning" or not at:
            continue
        if event["reason"] in ("FailedToUpdateEndpoint", "FailedToUpdateEndpointSlices"):
            # Our kubelet's pod IPs are loopback addresses, which Endpoints and EndpointSlices
            # refuse: their controllers never get the learner Service's written, so they retry
            # at every sync and say so (also when the API server is restarting, as "connection
            # refused"). An artifact of the tests' kubelet (pods as local processes); on GKE the
            # objects are written once and a restart finds nothing to write.
            continue
        when = datetime.datetime.fromisoformat(at.replace("Z", "+00:00"))
        if when >= since.replace(microsecond=0):
            involved = event.get("involvedObject") or {}
            found.append(
                f"{involved.get('kind')}/{involved.get('name')}: {event['reason']}: "
                f"{event.get('message')}"
            )
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KubeCluster(tmp_path_factory.mktemp("cluster")) as c:
        install_operator(c)
        yield c
        assert not c.errors(), c.errors()


@pytest.fixture(scope="module")
def training(cluster, tmp_path_factory):
    """The run the faults hit: a CartPole Experiment with no budget in reach, training."""
    apply(
        cluster, NS, experiment(NAME, budget={"maxEnvSteps": 10**9}), tmp_path_factory.mktemp("run")
    )
    wait_until(
        lambda: (
            (status(cluster, NS, NAME).get("envSteps") or 0) > 2000
            and len(actor_pods(cluster, NS, NAME)) == 2
            and conditions(cluster).get("Ready") == "True"
        ),
        SLOW,
        lambda: "the run training" + diagnosis(cluster, NS, NAME),
        cluster,
    )
    # Both operator replicas in the peering: one active, one waiting.
    wait_until(lambda: len(peers(cluster)) == 2, SLOW, lambda: f"peering {peers(cluster)}", cluster)
    return cluster


#: The Experiment's conditions that mirror its pods' Ready conditions.
MIRRORED = ("Ready", "LearnerReady", "ActorsReady")


def through(
    cluster: KubeCluster,
    fault: Callable[[Watch], None],
    catch_up: float = SLOW,
    node_loss: bool = False,
) -> dict:
    """Brings ``fault`` on the run and checks what it owes the run (see the module docstring);
    returns figures: how long the fault lasted and the status took to catch up.

    With ``node_loss`` the fault may let the node lifecycle controller take the nodes for lost
    (their Leases stale): it then marks them Unknown and their pods Ready=False until the
    kubelets report again, and the conditions that mirror the pods' readiness follow. That is
    allowed only if it happened to the nodes, and everything must be Ready again after."""
    pods = run_pods(cluster)
    assert len(pods) == 3, pods
    nodes = ready_since(cluster.list("", "v1", "nodes"))
    pod_ready = ready_since([*learner_pods(cluster, NS, NAME), *actor_pods(cluster, NS, NAME)])
    started_at = utcnow()
    with Watch(cluster, MIRRORED if node_loss else ()) as watch:
        start = time.monotonic()
        fault(watch)
        end = time.monotonic()
        wait_until(lambda: watch.steps and watch.steps[-1][0] > end, 30, "a reading after it")
        trained = watch.latest_steps()
        # The status catches up with where the learner was when the fault ended.
        wait_until(
            lambda: (status(cluster, NS, NAME).get("envSteps") or 0) >= trained,
            catch_up,
            lambda: f"status.envSteps to reach {trained}: {status(cluster, NS, NAME)}",
            cluster,
        )
        caught_up = time.monotonic()
    assert watch.seen == [], (
        f"{watch.seen}\n{logs(cluster, cluster.pods('seedrl-system'))}\n"
        f"{json.dumps([p['status'] for p in learner_pods(cluster, NS, NAME)])}"
    )
    # From the fault until the status caught up (a crash is over at once; what it owes the
    # run lasts until the other replica took over).
    stall = watch.stalls(start, caught_up)
    assert stall < MAX_STALL_SECONDS, f"training stood still {stall:.0f} s during the fault"
    first = next(s for t, s in watch.steps if t >= start)
    last = max(s for t, s in watch.steps if t <= caught_up)
    assert last > first, (first, last)
    # The same pods, never restarted: nothing was evicted or killed.
    assert run_pods(cluster) == pods
    lost = sorted(
        n for n, was in ready_since(cluster.list("", "v1", "nodes")).items() if nodes.get(n) != was
    )
    expected = ("NodeNotReady",) if lost else ()
    if not node_loss:
        # Nodes and pods never went NotReady.
        assert lost == [], ready_since(cluster.list("", "v1", "nodes"))
        assert (
            ready_since([*learner_pods(cluster, NS, NAME), *actor_pods(cluster, NS, NAME)])
            == pod_ready
        )
    else:
        assert lost or not watch.dips, f"conditions dipped with every node Ready: {watch.dips}"
        # Every node Ready again, every pod of the run too, and the conditions with them.
        wait_until(
            lambda: (
                all(
                    r.startswith("True")
                    for r in ready_since(cluster.list("", "v1", "nodes")).values()
                )
                and all(
                    r.startswith("True")
                    for r in ready_since(
                        [*learner_pods(cluster, NS, NAME), *actor_pods(cluster, NS, NAME)]
                    ).values()
                )
                and conditions(cluster) == watch.conditions
            ),
            SLOW,
            lambda: f"nodes, pods and conditions Ready again: {conditions(cluster)}",
            cluster,
        )
        assert run_pods(cluster) == pods
    warnings = [w for w in warnings_since(cluster, started_at) if w.split(": ")[1] not in expected]
    assert warnings == [], "\n".join(warnings)
    return {
        "nodes_taken_for_lost": len(lost),
        "condition_dips": len(watch.dips),
        "fault_s": round(end - start, 1),
        "catch_up_s": round(caught_up - end, 1),
        "env_steps_during": last - first,
        "longest_stall_s": round(stall, 1),
        "unanswered_reads": watch.unanswered,
    }


# ------------------------------------------------------------------------------------------


def test_an_api_server_restarted_mid_run_loses_nothing(training):
    cluster = training
    figures = through(cluster, lambda watch: cluster.plane.restart_apiserver())
    print(f"restart: {figures}")


def test_sixty_seconds_without_an_api_server_stop_nothing(training):
    cluster = training

    def outage(watch: Watch) -> None:
        cluster.plane.stop_apiserver()
        try:
            # The outage lasts its 60 s whatever happens; meanwhile the run is watched.
            ends = time.monotonic() + OUTAGE_SECONDS
            wait_until(lambda: time.monotonic() >= ends, OUTAGE_SECONDS + 5, "the outage's end")
        finally:
            cluster.plane.start_apiserver()

    figures = through(cluster, outage, node_loss=True)
    assert cluster.kubelet is not None
    print(f"60 s outage: {figures}; kubelet calls retried: {cluster.kubelet.unavailable}")
    # What the node lifecycle controller made of the stale Leases (its log, for the record).
    manager = next(c for c in cluster.plane.components if c.name == "kube-controller-manager")
    said = [
        line
        for line in manager.log.read_text(errors="replace").splitlines()
        if "node_lifecycle" in line and ("disruption" in line or "ease" in line)
    ]
    print("node lifecycle controller:\n" + "\n".join(said[-10:]))


def test_the_active_operator_killed_the_other_replica_takes_over(training):
    cluster = training
    assert cluster.kubelet is not None
    # Both replicas in the peering: after an outage longer than its lifetime each took the
    # other's record for dead and removed it, until that one's next keep-alive (kopf's
    # autoclean), so wait for the standby to be back in it.
    live = wait_until(
        lambda: (lambda found: found if len(found) == 2 else None)(peers(cluster)),
        SLOW + PEERING_LIFETIME,
        lambda: f"both replicas in the peering: {peers(cluster)}",
        cluster,
    )
    leader = max(live, key=lambda identity: live[identity]["priority"])
    pid = int(leader.rsplit("/", 1)[1])
    pod, process = next(
        (w.name, c.proc)
        for node in cluster.kubelet.nodes.values()
        for w in node.workers.values()
        if w.namespace == "seedrl-system"
        for c in w.apps
        if c.proc is not None and c.proc.pid == pid and c.proc.returncode is None
    )

    killed_at: list[str] = []

    def kill(watch: Watch) -> None:
        # The operator's log lines start with the local time, as logging's asctime writes it.
        killed_at.append(datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
        # SIGKILL, as a crash or an OOM kill ends it: no cleanup, its peering record stays
        # until it expires, then the other replica takes over.
        os.killpg(pid, signal.SIGKILL)
        wait_until(lambda: process.returncode is not None, 30, "the operator process gone")

    figures = through(cluster, kill, catch_up=SLOW + PEERING_LIFETIME)
    # Who took over: the standby once the dead leader's record expired (kopf logs its
    # resuming), or the killed pod's restarted container if it drew a higher priority first.
    standby = "".join(
        cluster.pod_log(p) for p in cluster.pods("seedrl-system") if p["metadata"]["name"] != pod
    )
    resumed = any(
        "Resuming operations after the pause" in line and line[:19] >= killed_at[0]
        for line in standby.splitlines()
    )
    print(f"leader killed ({pod}): {figures}; the standby resumed: {resumed}")
