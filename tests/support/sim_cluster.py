"""A simulated Kubernetes cluster that runs the real thing, for the scenario tests.

:class:`SimulatedCluster` serves the API of :mod:`support.sim_apiserver` on loopback, runs the
controllers of :mod:`support.sim_controllers` and the kubelet of :mod:`support.sim_kubelet`
(pods are real local processes) on one event loop in a thread, and drives it the way users do:
:meth:`kubectl` and :meth:`helm` run the real binaries (``make kubectl helm``) against it with a
kubeconfig of its own.

Nodes (labels as GKE sets them, :data:`NODES`), in two zones: four on-demand CPU nodes of node
pool ``cpu`` (two per zone) and two Spot nodes of pool ``spot`` (``cloud.google.com/gke-spot:
"true"``; GKE does not taint Spot nodes by itself, and neither does this), each of 8 CPUs and
32Gi; a TPU v5e host of pool ``tpu`` (2x2, 4 ``google.com/tpu`` chips) and an L4 GPU node of
pool ``gpu`` (1 ``nvidia.com/gpu``), labelled and tainted as GKE does
(:data:`ACCELERATOR_POOLS`). :meth:`preempt` plays a Spot preemption: the node's graceful
shutdown (DisruptionTarget, SIGTERM, at most 15 s), then the node goes and its managed
instance group brings up a fresh one of the same pool in the same zone.

With ``workloads=False`` it is the API server alone and the nodes, with the garbage collector
(a controller of kube-controller-manager in Kubernetes; :mod:`support.sim_apiserver` runs it
after each deletion and each creation of an owned object): no scheduler, no Job, ReplicaSet
or Deployment controllers, no kubelet. That is a control plane whose workload controllers are
not running: objects are stored and watched, but nothing acts on a Job or a Deployment, so a
test writes their ``status`` as the controllers would ("Jobs: Job status", "Deployments:
Deployment status") and plays any pod it needs; a pod is removed at once on deletion, as the
API server removes a pod no kubelet runs (no ``spec.nodeName``: "Pod Lifecycle: Termination
of Pods"). The operator tests (:mod:`support.operator_harness`) run on it.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import kubernetes
import yaml
from aiohttp import web

from support.sim_apiserver import ApiServer, now_rfc3339
from support.sim_controllers import Controllers
from support.sim_kubelet import Kubelet

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
#: The CustomResourceDefinitions the operator chart installs before its templates (Helm:
#: "Custom Resource Definitions", the ``crds/`` folder): Experiments and kopf's peerings.
OPERATOR_CRDS = ROOT / "helm" / "seedrl-operator" / "crds"


#: Accelerator node pools as GKE makes them ("Plan TPUs in GKE", "About GPUs in GKE"): the
#: accelerator labels, the taint GKE puts on them, and the chips as an extended resource.
ACCELERATOR_POOLS = {
    # ct5lp-hightpu-4t: one v5e host of 4 chips, topology 2x2.
    "tpu": (
        "ct5lp-hightpu-4t",
        {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x2",
        },
        {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
        {"google.com/tpu": "4"},
    ),
    # g2-standard-8: one NVIDIA L4.
    "gpu": (
        "g2-standard-8",
        {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"nvidia.com/gpu": "1"},
    ),
}


#: The nodes: (name, node pool, Spot, zone). The CPU pool has two nodes in each of two zones,
#: so that a learner pinned to a zone by its disk still has a node to go to when one drains.
NODES = (
    ("gke-cpu-0", "cpu", False, "us-central1-a"),
    ("gke-cpu-1", "cpu", False, "us-central1-a"),
    ("gke-cpu-2", "cpu", False, "us-central1-b"),
    ("gke-cpu-3", "cpu", False, "us-central1-b"),
    ("gke-spot-0", "spot", True, "us-central1-a"),
    ("gke-spot-1", "spot", True, "us-central1-b"),
    ("gke-tpu-0", "tpu", False, "us-central1-a"),
    ("gke-gpu-0", "gpu", False, "us-central1-b"),
)


def _node(name: str, pool: str, spot: bool, zone: str = "us-central1-a") -> dict:
    machine, extra_labels, taint, chips = ACCELERATOR_POOLS.get(
        pool, ("e2-standard-8", {}, None, {})
    )
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "cloud.google.com/gke-nodepool": pool,
        "node.kubernetes.io/instance-type": machine,
        "topology.kubernetes.io/zone": zone,
        **extra_labels,
    }
    if spot:
        labels["cloud.google.com/gke-spot"] = "true"
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", **chips}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [taint]} if taint else {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastTransitionTime": now_rfc3339(),
                }
            ],
            "capacity": dict(resources),
            "allocatable": dict(resources),
        },
    }


class SimulatedCluster:
    """The simulated cluster, as a context manager.

    Attributes:
      url: the API server's URL.
      kubeconfig: a kubeconfig file for it (kubectl, helm, the official client).
      api: the API server (its ``store`` holds every object).
      kubelet: the kubelet (its ``runs`` hold the pods' processes); None with
        ``workloads=False``.
    """

    def __init__(
        self,
        root: Path | None = None,
        node_env: dict[str, str] | None = None,
        workloads: bool = True,
    ):
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="simcluster-")
        self.root = Path(root or self._tmp.name)
        self.node_env = dict(node_env or {})
        self.workloads = workloads
        self.api = ApiServer()
        self.controllers = Controllers(self.api)
        self.kubelet: Kubelet | None = None
        self.url = ""
        self.kubeconfig = self.root / "kubeconfig"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._dirty = False
        self._spare = 0
        self._thread = threading.Thread(target=self._main, name="simulated-cluster", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        runner = web.AppRunner(
            self.api.app, access_log=None, handler_cancellation=True, shutdown_timeout=1
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: sim, cluster: {{server: '{self.url}'}}}}]\n"
            "users: [{name: sim, user: {token: simulated}}]\n"
            "contexts: [{name: sim, context: {cluster: sim, user: sim, namespace: default}}]\n"
            "current-context: sim\n"
        )
        if self.workloads:
            self.kubelet = Kubelet(self.api, self.root, port, self.kubeconfig, self.node_env)
        store = self.api.store
        for ns in ("default", "kube-system"):
            self.api.create(store.resource("", "v1", "namespaces"), "", {"metadata": {"name": ns}})
        for name, pool, spot, zone in NODES:
            self.api.create(store.resource("", "v1", "nodes"), "", _node(name, pool, spot, zone))
        loop_task = None
        if self.kubelet is not None:
            store.listeners.append(lambda event: self._mark())
            loop_task = asyncio.ensure_future(self._control_loop(self.kubelet))
        self._ready.set()
        await self._stopping.wait()
        if loop_task is not None:
            loop_task.cancel()
        if self.kubelet is not None:
            await self.kubelet.stop_all()
        await runner.cleanup()

    def _mark(self) -> None:
        self._dirty = True

    async def _control_loop(self, kubelet: Kubelet) -> None:
        last = 0.0
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            if self._dirty or now - last >= 0.5:
                self._dirty = False
                last = now
                for step in (self.controllers.sync, kubelet.sync):
                    try:
                        step()
                    except Exception as exc:  # noqa: BLE001 - keep the cluster running
                        kubelet.errors.append(f"{step.__qualname__}: {exc!r}")

    def __enter__(self) -> "SimulatedCluster":
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the simulated cluster did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(30)
        if self._tmp is not None:
            self._tmp.cleanup()

    # -- talking to it ------------------------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs ``fn`` on the cluster's event loop (where every object lives) and returns
        its result."""

        async def run():
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def configuration(self) -> kubernetes.client.Configuration:
        """A configuration of the official ``kubernetes`` client for this cluster (as its
        administrator: no service-account token, so RBAC lets everything through)."""
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        return cfg

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new ``kubernetes`` ApiClient for this cluster."""
        return kubernetes.client.ApiClient(self.configuration())

    def create(self, obj: dict) -> dict:
        """Creates ``obj`` (its apiVersion and kind name the resource, its
        ``metadata.namespace`` the namespace) as the administrator would; returns a copy of
        what was stored. A CustomResourceDefinition is served as soon as it is stored."""

        def write():
            resource = self.api.store.by_kind(obj["apiVersion"], obj["kind"])
            namespace = obj["metadata"].get("namespace") or ""
            return copy.deepcopy(self.api.create(resource, namespace, copy.deepcopy(obj)))

        return self.call(write)

    def create_namespaces(self, *names: str) -> None:
        """Creates these namespaces (objects go only into a namespace that exists)."""
        for name in names:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def install_operator_crds(self) -> None:
        """Installs the CustomResourceDefinitions of the operator chart's ``crds/`` folder, as
        ``helm install`` does before anything else."""
        for path in sorted(OPERATOR_CRDS.glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    self.create(document)

    def env(self) -> dict[str, str]:
        """The environment kubectl and helm run with: this cluster's kubeconfig, a home of
        its own (kubectl caches discovery there)."""
        home = self.root / "home"
        home.mkdir(exist_ok=True)
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(home)}

    def _run(
        self, binary: str, args: tuple[str, ...], check: bool, timeout: float
    ) -> subprocess.CompletedProcess:
        path = BIN / binary
        if not os.access(path, os.X_OK):
            raise AssertionError(f"no {binary} at {path}: run `make {binary}`")
        proc = subprocess.run(
            [str(path), *args], env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{binary} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Runs the real kubectl against this cluster."""
        return self._run("kubectl", args, check, timeout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess:
        """Runs the real helm against this cluster."""
        return self._run("helm", args, check, timeout)

    def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
        """A stored object (a copy), or None."""

        def read():
            obj = self.api.store.get(
                self.api.store.resource(group, version, plural), namespace, name
            )
            return copy.deepcopy(obj)

        return self.call(read)

    def list(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> list[dict]:
        """Stored objects (copies), optionally of one namespace and with these labels."""

        def read():
            items = self.api.store.list(self.api.store.resource(group, version, plural), namespace)
            return [
                copy.deepcopy(o)
                for o in items
                if all(
                    (o["metadata"].get("labels") or {}).get(k) == v
                    for k, v in (labels or {}).items()
                )
            ]

        return self.call(read)

    def pods(self, namespace: str, **labels: str) -> list[dict]:
        """The pods of a namespace with these labels."""
        return self.list(
            "", "v1", "pods", namespace, {k.replace("__", "/"): v for k, v in labels.items()}
        )

    def pod_log(self, pod: dict) -> str:
        """The log of a pod's container (as the kubelet keeps it)."""
        path = (pod["metadata"].get("annotations") or {}).get("sim.seedrl.dev/log")
        try:
            return Path(path).read_text(errors="replace") if path else ""
        except OSError:
            return ""

    def events(self, namespace: str, name: str) -> list[dict]:
        """The Events about an object."""
        return [
            e
            for e in self.list("", "v1", "events", namespace)
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    # -- what happens to nodes ----------------------------------------------------------

    def watches_down(self):
        """A context manager: every watch is ended and held back while it is open, and
        resuming from before it gets 410 Gone after (kopf then lists again, seeing no
        DELETED event for what was deleted meanwhile)."""
        import contextlib

        @contextlib.contextmanager
        def down():
            self.call(self.api.expire_watches)
            try:
                yield self
            finally:
                self.call(self.api.release_watches)

        return down()

    def preempt(self, node: str, replace: bool = True) -> str | None:
        """A Spot preemption of ``node``: graceful node shutdown of its pods (at most 15 s),
        then the node is gone; with ``replace`` the instance group brings up a new node of
        the same pool. Returns the new node's name. Blocks until the node is gone."""
        info = self.get("", "v1", "nodes", "", node)
        assert info is not None, f"no node {node}"
        self.call(lambda: self.kubelet.shut_down_node(node))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            busy = self.call(
                lambda: [
                    r
                    for r in self.kubelet.runs.values()
                    if r.proc is not None
                    and r.proc.returncode is None
                    and (r.current() or {}).get("spec", {}).get("nodeName") == node
                ]
            )
            if not busy:
                break
            time.sleep(0.1)
        self.call(lambda: self.api.delete(self.api.store.resource("", "v1", "nodes"), "", node, {}))
        if not replace:
            return None
        labels = info["metadata"]["labels"]
        self._spare += 1
        name = f"gke-{labels['cloud.google.com/gke-nodepool']}-r{self._spare}"
        self.call(
            lambda: self.api.create(
                self.api.store.resource("", "v1", "nodes"),
                "",
                _node(
                    name,
                    labels["cloud.google.com/gke-nodepool"],
                    labels.get("cloud.google.com/gke-spot") == "true",
                    labels.get("topology.kubernetes.io/zone", "us-central1-a"),
                ),
            )
        )
        return name

    def errors(self) -> list[str]:
        """What went wrong inside the cluster's machinery (should stay empty)."""
        return list(self.kubelet.errors) if self.kubelet else []


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str],
    cluster: SimulatedCluster | None = None,
) -> Any:
    """Polls ``predicate`` until it returns something truthy; fails after ``timeout`` with
    ``what`` (a callable is asked then, so it can describe the state at the timeout) and the
    cluster's internal errors, if any."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    extra = f"; cluster errors: {cluster.errors()}" if cluster and cluster.errors() else ""
    what = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")


__all__ = ["SimulatedCluster", "wait_until"]
