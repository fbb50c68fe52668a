"""Our kubelet: the one simulated part of the tests' cluster. The control plane is the real one
(:mod:`support.control_plane`); this plays the kubelets of a GKE node pool's nodes against it,
running each bound pod's containers as local processes (:mod:`support.kubelet_pods`).

Each node talks to the API server as a kubelet does, with a client certificate of its own
(``CN=system:node:NAME, O=system:nodes``), so the Node authorizer and NodeRestriction admission
judge every call ("Using Node Authorization"):

- registration: the node creates its Node object with the labels, taints, capacity and
  allocatable of its GKE pool (:mod:`support.gke_nodes`), then reports the Ready condition and
  its addresses through ``nodes/status`` ("Nodes: Self-registration of Nodes");
- heartbeats: it renews its Lease in ``kube-node-lease`` every 10 s (``nodeLeaseDurationSeconds``
  40, renewed at a quarter of that: "Nodes: Heartbeats"), so the node lifecycle controller keeps
  it Ready, and reports Ready again where that controller set it Unknown meanwhile; each pod's
  status is compared with the API's every 10 s and written again where another changed it;
- pods: it lists and watches the pods with ``spec.nodeName`` = its name (the only ones the Node
  authorizer lets it see), lists again on 410 Gone, starts a worker per new pod, stops a pod
  when it gets a ``deletionTimestamp`` (SIGTERM, SIGKILL after ``deletionGracePeriodSeconds``),
  then deletes it with grace 0 once its containers are gone ("Termination of Pods");
- node shutdown (:meth:`Kubelet.preempt`, a Spot or preemptible VM reclaimed): the node reports
  Ready False, "node is shutting down"; every pod gets condition DisruptionTarget (reason
  TerminationByKubelet) and at most 15 s (GKE's graceful node shutdown for non-system pods: "Spot
  VMs: Termination"), then ends Failed with reason Terminated ("Graceful node shutdown"); the VM
  then goes, and with it the Node object (GKE's node controller deletes it).

Beside the kubelets run the cluster services GKE adds: :class:`ClusterDns` (Services have no
kube-proxy here and pod IPs are loopback addresses, which EndpointSlices refuse, so it plays
CoreDNS: a Service's names resolve to a ready pod it selects, for the pods' Python processes
through the ``sitecustomize`` of :mod:`support.container_processes`) and the zonal disk
provisioner of :mod:`support.pv_provisioner`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Coroutine

import aiohttp

from support.container_processes import SHUTDOWN_GRACE_S, SITECUSTOMIZE, signal_group
from support.gke_nodes import NodeSpec
from support.kube_http import ApiError, KubeHttp, client_certificate, transient
from support.kubelet_images import Registries
from support.kubelet_pods import PodWorker, now_rfc3339
from support.kubelet_volumes import Attachments
from support.pv_provisioner import DiskProvisioner

#: The Lease's duration and how often it is renewed (a quarter of it), as the kubelet does.
LEASE_DURATION_S, LEASE_RENEW_S = 40, 10.0
#: A failed renewal is retried after 0.2 s, doubling up to 7 s (the lease controller of
#: k8s.io/component-helpers: ``maxBackoff``), until the API server answers again.
LEASE_RETRY_S, LEASE_MAX_BACKOFF_S = 0.2, 7.0
#: Grace the kubelet gives a pod that vanished from the API without it (a forced deletion).
FORCED_GRACE_S = 2.0
#: How long a new node may wait for the node lifecycle controller to find it Ready (it looks
#: every 5 s, ``--node-monitor-period``).
NODE_READY_TIMEOUT_S = 60.0
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


def _ready_condition(ready: bool, message: str) -> dict:
    now = now_rfc3339()
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


class NodeAgent:
    """The kubelet of one node."""

    def __init__(self, kubelet: Kubelet, spec: NodeSpec, index: int):
        self.kubelet = kubelet
        self.spec = spec
        self.name = spec.name
        self.spec_ip = f"127.100.{index // 250}.{index % 250 + 1}"
        self.dir = kubelet.root / "nodes" / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        cert, key = client_certificate(
            kubelet.ca_cert, kubelet.ca_key, f"system:node:{self.name}", ("system:nodes",)
        )
        (self.dir / "kubelet.crt").write_bytes(cert)
        (self.dir / "kubelet.key").write_bytes(key)
        self.http = KubeHttp(
            kubelet.server, kubelet.ca_file, self.dir / "kubelet.crt", self.dir / "kubelet.key"
        )
        self.workers: dict[str, PodWorker] = {}
        self.images: set[str] = set()
        self.tasks: list[asyncio.Task] = []
        self.shutting_down = False

    async def register(self) -> None:
        """Creates the Node (or takes over an existing one of its name), reports it Ready and
        starts its heartbeats and pod watch."""
        capacity, allocatable = self.spec.resources()
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.spec.labels()},
            "spec": {"taints": self.spec.taints()} if self.spec.taints() else {},
        }
        try:
            await self.http.request("POST", "/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
        await self._report(True, "kubelet is posting ready status", capacity, allocatable)
        await self._renew_lease()
        self.tasks += [
            asyncio.ensure_future(self._heartbeats()),
            asyncio.ensure_future(self._watch_pods()),
        ]

    async def schedulable(self, timeout: float) -> None:
        """Waits until the node lifecycle controller has seen the node Ready and lifted the
        ``node.kubernetes.io/not-ready`` taint it puts on a new node ("Taint Nodes by
        Condition")."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            node = await self.http.get(f"/api/v1/nodes/{self.name}")
            taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
            if "node.kubernetes.io/not-ready" not in taints:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{self.name} still tainted not-ready after {timeout:.0f} s")
            await asyncio.sleep(0.2)

    async def _report(
        self,
        ready: bool,
        message: str,
        capacity: dict | None = None,
        allocatable: dict | None = None,
    ) -> None:
        status: dict[str, Any] = {
            "conditions": [_ready_condition(ready, message)],
            "addresses": [
                {"type": "InternalIP", "address": self.spec_ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self.name,
                "systemUUID": self.name,
                "bootID": self.name,
                "kernelVersion": os.uname().release,
                "osImage": "Container-Optimized OS from Google",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        if capacity is not None:
            status["capacity"], status["allocatable"] = capacity, allocatable
        await self.http.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            {"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        now = now_rfc3339().replace("Z", ".000000Z")
        lease = await self.http.get_or_none(path)
        if lease is None:
            await self.http.request(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                    "spec": {
                        "holderIdentity": self.name,
                        "leaseDurationSeconds": LEASE_DURATION_S,
                        "renewTime": now,
                    },
                },
            )
            return
        lease["spec"]["renewTime"] = now
        await self.http.request("PUT", path, lease)

    async def _heartbeats(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(
                min(LEASE_RETRY_S * 2 ** (failures - 1), LEASE_MAX_BACKOFF_S)
                if failures
                else LEASE_RENEW_S
            )
            try:
                await self._renew_lease()
                await self._sync_ready()
                failures = 0
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                failures += 1
                if not transient(exc, failures):
                    self.kubelet.errors.append(f"{self.name}: lease: {exc}")
                else:
                    self.kubelet.unavailable += 1

    async def _sync_ready(self) -> None:
        """The kubelet's node status update (every ``nodeStatusUpdateFrequency``, 10 s, beside
        the Lease): the node's status is patched where it differs from the kubelet's, as when
        the node lifecycle controller set Ready Unknown on finding the Lease stale (after the
        API server was away longer than ``--node-monitor-grace-period``)."""
        if self.shutting_down:
            return
        node = await self.http.get(f"/api/v1/nodes/{self.name}")
        ready = next(
            (c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
            {},
        )
        if ready.get("status") != "True":
            await self._report(True, "kubelet is posting ready status")

    async def _watch_pods(self) -> None:
        params = {"fieldSelector": f"spec.nodeName={self.name}"}
        failures = 0
        while True:
            try:
                async for kind, obj in self.http.watch("/api/v1/pods", params):
                    if kind == "SYNC":
                        listed = {p["metadata"]["uid"]: p for p in obj["items"]}
                        for uid in [u for u in self.workers if u not in listed]:
                            self._gone(uid)
                        for pod in listed.values():
                            await self._seen(pod)
                    elif kind == "DELETED":
                        self._gone(obj["metadata"]["uid"])
                    else:
                        await self._seen(obj)
                    failures = 0
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # What runs goes on running meanwhile: a kubelet cut off from the API server
                # keeps its pods (it only stops those it is told are deleted).
                failures += 1
                if not transient(exc, failures):
                    self.kubelet.errors.append(f"{self.name}: watch: {exc}")
                else:
                    self.kubelet.unavailable += 1
                await asyncio.sleep(1.0)

    async def _seen(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        worker = self.workers.get(uid)
        if worker is None:
            if self.shutting_down:
                await self._reject(
                    pod, "NodeShutdown", "Pod was rejected as the node is shutting down."
                )
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                if deleting:  # nothing runs: it may go at once
                    await self.finish_deletion(pod)
                return
            worker = self.workers[uid] = PodWorker(self, pod)
            self.kubelet.pods[(worker.namespace, worker.name)] = worker
            worker.pod = pod
            worker.start()
        else:
            worker.pod = pod
        if deleting:
            if worker.done.is_set():
                await self.finish_deletion(pod)
            else:
                worker.stop(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))

    async def _reject(self, pod: dict, reason: str, message: str) -> None:
        """Admission refused on the node: the pod fails at once, as the kubelet's admit handlers
        fail a pod bound to a node that is shutting down."""
        meta = pod["metadata"]
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            return
        pod["status"] = {**status, "phase": "Failed", "reason": reason, "message": message}
        try:
            await self.http.request(
                "PUT", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", pod
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                self.kubelet.errors.append(f"{meta['namespace']}/{meta['name']}: reject: {exc}")

    def _gone(self, uid: str) -> None:
        """The pod left the API (deleted by us, or forcibly): stop what still runs."""
        worker = self.workers.pop(uid, None)
        if worker is None:
            return
        if not worker.done.is_set():
            worker.stop(FORCED_GRACE_S)
        asyncio.ensure_future(self._clean(worker))

    async def _clean(self, worker: PodWorker) -> None:
        await worker.done.wait()
        shutil.rmtree(worker.dir / "volumes", ignore_errors=True)

    async def finish_deletion(self, pod: dict) -> None:
        """The kubelet's last word on a pod being deleted: DELETE with grace 0 (only this
        pod, by uid)."""
        meta = pod["metadata"]
        try:
            await self.http.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                self.kubelet.errors.append(f"{meta['namespace']}/{meta['name']}: delete: {exc}")

    async def shut_down(self) -> None:
        """Graceful node shutdown: NotReady, every pod DisruptionTarget and stopped within
        min(its grace period, 15 s); returns when every container is gone."""
        self.shutting_down = True
        try:
            await self._report(False, "node is shutting down")
        except (ApiError, aiohttp.ClientError) as exc:
            self.kubelet.errors.append(f"{self.name}: shutdown status: {exc}")
        for worker in list(self.workers.values()):
            if worker.done.is_set():
                continue
            grace = float(worker.pod["spec"].get("terminationGracePeriodSeconds", 30))
            worker.stop(min(grace, SHUTDOWN_GRACE_S), SHUTDOWN_MESSAGE)
        await self.stop()

    async def stop(self) -> None:
        """The VM goes: heartbeats and watches end, every process is killed."""
        for task in self.tasks:
            task.cancel()
        workers = list(self.workers.values())
        for worker in workers:
            if not worker.done.is_set() and not worker.stopping.is_set():
                worker.stop(FORCED_GRACE_S)
        if workers:
            await asyncio.wait([asyncio.ensure_future(w.done.wait()) for w in workers], timeout=60)
        for worker in workers:
            for c in [*worker.init, *worker.apps]:
                if c.proc is not None and c.proc.returncode is None:
                    signal_group(c.proc.pid, 9)
        await self.http.close()


class ClusterDns:
    """Cluster DNS for the pods' processes: each Service's names (``svc.ns``, ``svc.ns.svc``,
    ``svc.ns.svc.cluster.local``) -> the pod IP of a ready pod it selects, in a JSON file the
    ``sitecustomize`` reads. Lists and watches Services and pods as CoreDNS would (with the
    administrator's identity)."""

    def __init__(self, api: KubeHttp, path: Path):
        self.api = api
        self.path = path
        self.path.write_text("{}")
        self._services: dict[str, dict] = {}
        self._pods: dict[str, dict] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        """Starts the watches."""
        self.tasks = [
            asyncio.ensure_future(self._watch("/api/v1/services", self._services)),
            asyncio.ensure_future(self._watch("/api/v1/pods", self._pods)),
        ]

    async def _watch(self, path: str, into: dict[str, dict]) -> None:
        while True:
            try:
                async for kind, obj in self.api.watch(path):
                    if kind == "SYNC":
                        into.clear()
                        into.update({o["metadata"]["uid"]: o for o in obj["items"]})
                    elif kind == "DELETED":
                        into.pop(obj["metadata"]["uid"], None)
                    else:
                        into[obj["metadata"]["uid"]] = obj
                    self._write()
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError):
                await asyncio.sleep(1.0)

    def services(self, namespace: str) -> list[dict]:
        """The Services of a namespace."""
        return [s for s in self._services.values() if s["metadata"]["namespace"] == namespace]

    def _write(self) -> None:
        names: dict[str, str] = {}
        ready = [
            p
            for p in self._pods.values()
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("podIP")
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p["status"].get("conditions") or []
            )
        ]
        for svc in self._services.values():
            selector = (svc.get("spec") or {}).get("selector") or {}
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            for pod in ready:
                labels = pod["metadata"].get("labels") or {}
                if (
                    pod["metadata"]["namespace"] == ns
                    and selector
                    and all(labels.get(k) == v for k, v in selector.items())
                ):
                    for alias in (
                        f"{name}.{ns}",
                        f"{name}.{ns}.svc",
                        f"{name}.{ns}.svc.cluster.local",
                    ):
                        names[alias] = pod["status"]["podIP"]
                    break
        text = json.dumps(names, sort_keys=True)
        if self.path.read_text() != text:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)

    async def stop(self) -> None:
        """Ends the watches."""
        for task in self.tasks:
            task.cancel()


class Kubelet:
    """The kubelets of a cluster's nodes, on one event loop in a thread; a context manager
    that kills every process it started on exit.

    Args:
      server: the API server's URL.
      ca_file, ca_key_file: the cluster CA's certificate and key (node certificates are signed
        with it, as the kubelet's TLS bootstrap would have them signed).
      nodes: the nodes to register.
      registries: what images can be pulled (:class:`support.kubelet_images.Registries`).
      root: where pods' directories, volumes and logs go (a temporary directory if None).
      node_env: variables every container gets from its node.
      service_server: the URL pods reach the API server at (the ``kubernetes`` Service, which
        kube-proxy relays to it); ``server`` if None. The kubelets themselves use ``server``.
    """

    def __init__(
        self,
        server: str,
        ca_file: Path,
        ca_key_file: Path,
        nodes: tuple[NodeSpec, ...] | list[NodeSpec],
        registries: Registries,
        root: Path | None = None,
        node_env: dict[str, str] | None = None,
        service_server: str | None = None,
    ):
        self._tmp: tempfile.TemporaryDirectory | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubelet-")
            root = Path(self._tmp.name)
        self.root = Path(root)
        self.server = server
        #: Where pods reach the API server (``KUBERNETES_SERVICE_HOST``/``PORT``, their
        #: service-account kubeconfig).
        self.service_server = service_server or server
        self.service_port = int(self.service_server.rsplit(":", 1)[1])
        self.ca_file = Path(ca_file)
        self.ca_cert = self.ca_file.read_bytes()
        self.ca_key = Path(ca_key_file).read_bytes()
        self.registries = registries
        self.node_env = dict(node_env or {})
        self.python = sys.executable
        self.attachments = Attachments()
        self.errors: list[str] = []
        #: Events the API server refused (the kubelet drops those too), but while it was away
        #: or starting (counted in :attr:`unavailable`).
        self.dropped_events = 0
        #: Calls retried because the API server was away (:func:`support.kube_http.transient`).
        self.unavailable = 0
        self.site_dir = self.root / "site"
        self.site_dir.mkdir(parents=True, exist_ok=True)
        (self.site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.dns_file = self.root / "dns.json"
        self.nodes: dict[str, NodeAgent] = {}
        #: The latest pod of each (namespace, name) a node ran, for its logs.
        self.pods: dict[tuple[str, str], PodWorker] = {}
        self._initial = list(nodes)
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        admin_cert, admin_key = client_certificate(
            self.ca_cert, self.ca_key, "seedrl-test-cluster-services", ("system:masters",)
        )
        (self.root / "services.crt").write_bytes(admin_cert)
        (self.root / "services.key").write_bytes(admin_key)
        self.admin = KubeHttp(
            server, self.ca_file, self.root / "services.crt", self.root / "services.key"
        )
        self.dns = ClusterDns(self.admin, self.dns_file)
        self.provisioner = DiskProvisioner(self.admin, self.root, self.errors)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Kubelet:
        started = threading.Event()

        def main() -> None:
            async def serve() -> None:
                self._loop = asyncio.get_running_loop()
                self._stopped = asyncio.Event()
                started.set()
                await self._stopped.wait()

            asyncio.run(serve())

        self._thread = threading.Thread(target=main, name="kubelet", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the kubelet's event loop did not start")
        self.call(self._start_services)
        for spec in self._initial:
            self.add_node(spec)
        return self

    async def _start_services(self) -> None:
        self.dns.start()
        await self.provisioner.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self._stop_all, timeout=120)
        finally:
            if self._loop is not None and self._stopped is not None:
                self._loop.call_soon_threadsafe(self._stopped.set)
            if self._thread is not None:
                self._thread.join(30)
            if self._tmp is not None:
                self._tmp.cleanup()

    async def _stop_all(self) -> None:
        await asyncio.gather(*(node.stop() for node in self.nodes.values()))
        await self.dns.stop()
        await self.provisioner.stop()
        await self.admin.close()

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 60) -> Any:
        """Runs the coroutine function ``fn`` on the kubelet's loop; returns its result."""
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(fn(), self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    # -- what tests do to nodes ------------------------------------------------------------

    def add_node(self, spec: NodeSpec) -> None:
        """Registers a node and starts its kubelet (a new VM of its pool joining); returns once
        the node is schedulable."""
        self._count += 1
        agent = NodeAgent(self, spec, self._count)
        self.nodes[spec.name] = agent
        self.call(agent.register)
        self.call(
            lambda: agent.schedulable(NODE_READY_TIMEOUT_S), timeout=NODE_READY_TIMEOUT_S + 10
        )

    def preempt(self, name: str) -> None:
        """GKE reclaims the Spot (or preemptible) VM ``name``: graceful node shutdown of its
        pods (at most 15 s each), then the VM and its Node object are gone. Returns when they
        are."""
        agent = self.nodes.pop(name)
        assert agent.spec.preemptible, f"{name} is not a Spot or preemptible node"
        self.call(agent.shut_down, timeout=SHUTDOWN_GRACE_S + 60)

        async def delete() -> None:
            try:
                await self.admin.request("DELETE", f"/api/v1/nodes/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise

        self.call(delete)

    def log(self, namespace: str, pod: str, container: str | None = None) -> str:
        """The log of a pod's container, as the kubelet keeps it, also after the pod is gone
        (the latest pod of that name; empty if none ran here)."""
        worker = self.pods.get((namespace, pod))
        return worker.log(container) if worker else ""

    def running(self, node: str | None = None) -> list[str]:
        """``namespace/name`` of every pod with a live process (on ``node``, if given)."""
        return sorted(
            f"{w.namespace}/{w.name}"
            for n in self.nodes.values()
            if node is None or n.name == node
            for w in n.workers.values()
            if any(c.proc is not None and c.proc.returncode is None for c in [*w.init, *w.apps])
        )


__all__ = ["ClusterDns", "Kubelet", "NodeAgent", "SHUTDOWN_MESSAGE"]
