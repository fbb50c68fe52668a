"""What the Experiment scenarios on a :class:`~support.cluster.KubeCluster` share: installing the
operator chart, Experiment documents, and reading an Experiment's status, pods and logs as
kubectl shows them (tests/e2e/test_cluster_scenarios.py,
tests/e2e/test_cluster_control_plane_faults.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import yaml

from support.cluster import ROOT, KubeCluster
from support.control_plane import wait_until_served
from support.pods import free_port
from support.waiting import wait_until

EXPERIMENTS = ("seedrl.dev", "v1alpha1", "experiments")
EXPERIMENTS_CRD = "experiments.seedrl.dev"


def install_operator(c: KubeCluster, *sets: str) -> None:
    """`helm install` of the operator chart (two replicas, a 1 s poll; ``sets`` more values),
    then waits for both replicas to run.

    The Experiment CRD is ``k8s/crd/``'s (``v1alpha1`` alone), applied first, and the chart's
    is left out (``crd.install=false``): the chart's converts through the webhook Service,
    which this API server cannot reach (no kube-proxy plays ClusterIPs here, and Endpoints
    refuse the loopback addresses our kubelet gives pods), and ``kubectl`` reads ``v1beta1``
    when it is served. tests/service/operator/test_conversion.py runs the webhook by URL."""
    c.kubectl("apply", "--server-side", "-f", str(ROOT / "k8s" / "crd" / f"{EXPERIMENTS_CRD}.yaml"))
    wait_until_served(c.plane, EXPERIMENTS_CRD)
    args = [f"--set={s}" for s in ("operator.pollSeconds=1", "crd.install=false", *sets)]
    install = (
        "install",
        "seedrl",
        str(ROOT / "helm" / "seedrl-operator"),
        "-n",
        "seedrl-system",
        "--create-namespace",
        *args,
        "--wait=false",
    )
    first = c.helm(*install, check=False)
    if first.returncode and "ensure CRDs are installed first" in first.stderr:
        # helm made the chart's CRDs (crds/) and waited for them Established, which comes
        # before the API server's discovery serves their kinds: on a loaded machine the rest
        # of the chart then fails to map (ClusterKopfPeering), and no release is stored. Once
        # the kinds are served, the same install goes through.
        for crd in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev", EXPERIMENTS_CRD):
            wait_until_served(c.plane, crd)
        c.helm("uninstall", "seedrl", "-n", "seedrl-system", check=False)
        c.helm(*install)
    elif first.returncode:
        raise AssertionError(
            f"helm {' '.join(install)} exited {first.returncode}:\n{first.stdout}\n{first.stderr}"
        )
    wait_until(
        lambda: (
            len([p for p in c.pods("seedrl-system") if p["status"].get("phase") == "Running"]) == 2
        ),
        120,
        "both operator replicas running",
        c,
    )
    # Each replica serves the conversion webhook with the certificate one of them made, with
    # the chart's RBAC and admission policy (its own Secret, in its own namespace).
    wait_until(
        lambda: c.get("", "v1", "secrets", "seedrl-system", "seedrl-seedrl-operator-webhook-tls"),
        60,
        "the conversion webhook's certificate made by the operator",
        c,
    )


def experiment(name: str, **spec) -> dict:
    """A small CartPole Experiment; ``spec`` keys are merged in (dicts one level deep)."""
    base = {
        "agent": {"name": "vtrace", "vtrace": {"rewardScale": 0.1}},
        "learner": {
            "batchSize": 8,
            "port": free_port(),
            "resources": {"cpu": "1", "memory": "4Gi"},
            "terminationGracePeriodSeconds": 30,
        },
        "actors": {"replicas": 2, "envsPerActor": 8, "resources": {"cpu": "500m", "memory": "1Gi"}},
        "budget": {"maxEnvSteps": 40000, "targetReturn": None, "returnWindow": 20},
        "checkpoint": {"intervalSeconds": 3, "intervalSteps": 0},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return {
        "apiVersion": "seedrl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": base,
    }


def apply(cluster, namespace: str, document: dict, tmp_path: Path) -> None:
    """`kubectl apply -f` of a document, in its own namespace (created if missing)."""
    if cluster.get("", "v1", "namespaces", "", namespace) is None:
        cluster.kubectl("create", "namespace", namespace)
    path = tmp_path / f"{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))


def status(cluster, namespace: str, name: str) -> dict:
    return ((cluster.get(*EXPERIMENTS, namespace, name) or {}).get("status")) or {}


def condition(cluster, namespace: str, name: str, type_: str) -> dict:
    return next(
        (c for c in status(cluster, namespace, name).get("conditions") or [] if c["type"] == type_),
        {},
    )


def learner_pods(cluster, namespace: str, name: str) -> list[dict]:
    return sorted(
        cluster.pods(namespace, **{"seedrl.dev__experiment": name, "seedrl.dev__role": "learner"}),
        key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"],
    )


def actor_pods(cluster, namespace: str, name: str) -> list[dict]:
    return [
        p
        for p in cluster.pods(
            namespace, **{"seedrl.dev__experiment": name, "seedrl.dev__role": "actor"}
        )
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


def wait_for_pod(cluster, namespace: str, name: str, old: dict) -> bool:
    """Waits for a learner pod other than ``old``; fails with a diagnosis."""
    try:
        wait_until(
            lambda: [
                p
                for p in learner_pods(cluster, namespace, name)
                if p["metadata"]["uid"] != old["metadata"]["uid"]
            ],
            180,
            "a new learner pod",
            cluster,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}{diagnosis(cluster, namespace, name)}") from None
    return True


def resumed(cluster, namespace: str, name: str, old: dict, what: str) -> dict:
    """Waits for a learner pod other than ``old`` to say it resumed; returns it."""
    return wait_until(
        lambda: next(
            (
                p
                for p in learner_pods(cluster, namespace, name)
                if p["metadata"]["uid"] != old["metadata"]["uid"]
                and "resumed from" in cluster.pod_log(p)
            ),
            None,
        ),
        240,
        what,
        cluster,
    )


class PhaseRecorder:
    """Records every phase and envFrames an Experiment's status shows, from a thread."""

    def __init__(self, cluster, namespace: str, name: str):
        self.seen: list[tuple[str | None, int]] = []
        self._stop = threading.Event()

        def run():
            # One last reading after the stop: the phase a caller waited for is recorded even
            # when its wait saw it first.
            while True:
                stopping = self._stop.is_set()
                s = status(cluster, namespace, name)
                entry = (s.get("phase"), int(s.get("envFrames") or 0))
                if not self.seen or self.seen[-1] != entry:
                    self.seen.append(entry)
                if stopping:
                    return
                self._stop.wait(0.2)

        self._thread = threading.Thread(target=run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def peers(cluster) -> dict:
    """The operator replicas in the kopf peering (by id), as the peering object lists them."""
    peering = cluster.get("kopf.dev", "v1", "clusterkopfpeerings", "", "seedrl-seedrl-operator")
    return (peering or {}).get("status") or {}


def diagnosis(cluster, namespace: str, name: str) -> str:
    """What to look at when a scenario times out: the Job, the learner pods and their logs."""
    job = cluster.get("batch", "v1", "jobs", namespace, f"{name}-learner") or {}
    pods = learner_pods(cluster, namespace, name)
    return (
        f"\nJob status: {json.dumps(job.get('status'))}\nExperiment status phase: "
        f"{status(cluster, namespace, name).get('phase')}\nlearner pods: "
        f"{[(p['metadata']['name'], p['status']) for p in pods]}\n{logs(cluster, pods)}"
    )


def logs(cluster, pods) -> str:
    return "\n".join(f"--- {p['metadata']['name']}\n{cluster.pod_log(p)[-3000:]}" for p in pods)
