"""A GKE-like cluster for the scenario tests: the real control plane (:mod:`support.control_plane`:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler v1.37.2) and our kubelet on every
kind of GKE node (:mod:`support.kubelet`), driven as users drive it: :meth:`KubeCluster.kubectl`
(the kubectl built with the server) and :meth:`KubeCluster.helm` run the real binaries with the
administrator's kubeconfig.

Pods reach the API server as in a real cluster, through the ``kubernetes`` Service: a
:class:`~support.tcp_proxy.TcpProxy` plays kube-proxy for it (``KUBERNETES_SERVICE_HOST``/``PORT``
and the pods' service-account kubeconfig name it), while the kubelets, the controllers and the
tests' admin clients reach the API server directly. So a scenario can cut the pods (the
operator's among them) off the API server while it goes on serving everyone else
(:meth:`KubeCluster.pods_cut_off`), and expire every watch of theirs
(:meth:`KubeCluster.watches_down`).

The release's images (:data:`seedrl.common.config.cluster.LEARNER_IMAGES`, ``ACTOR_IMAGE``,
the operator's) are pullable; their containers name their commands, which run with this
machine's Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import urllib3

from seedrl.common.config.cluster import ACTOR_IMAGE, IMAGE_REGISTRY, LEARNER_IMAGES, RELEASE
from support.control_plane import ControlPlane
from support.gke_nodes import GKE_CLUSTER, NodeSpec
from support.kubelet import Kubelet
from support.kube_http import json_call
from support.kubelet_images import Registries
from support.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
#: The images of this release, as the registry serves them.
RELEASE_REGISTRIES = Registries(
    images={
        image: []
        for image in (*LEARNER_IMAGES.values(), ACTOR_IMAGE, f"{IMAGE_REGISTRY}/operator:{RELEASE}")
    }
)


def _path(group: str, version: str, plural: str, namespace: str | None, name: str = "") -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")


class KubeCluster:
    """The cluster, as a context manager.

    Attributes:
      url: the API server's URL.
      kubeconfig: the administrator's kubeconfig (kubectl, helm, the official client).
      plane: the control plane.
      kubelet: the kubelets of the nodes.
      service: the relay that plays kube-proxy for the ``kubernetes`` Service: the pods' way
        to the API server.
    """

    def __init__(
        self,
        root: Path | None = None,
        node_env: dict[str, str] | None = None,
        nodes: tuple[NodeSpec, ...] = GKE_CLUSTER,
        registries: Registries = RELEASE_REGISTRIES,
    ):
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="cluster-")
        self.root = Path(root) if root else Path(self._tmp.name)  # type: ignore[union-attr]
        self.plane = ControlPlane(self.root / "control-plane", controllers=True)
        self.kubeconfig = self.plane.kubeconfig
        self.url = ""
        self._nodes = nodes
        self._registries = registries
        self._node_env = dict(node_env or {})
        self._spare = 0
        self.kubelet: Kubelet | None = None
        self._http: urllib3.PoolManager | None = None
        self.service: TcpProxy | None = None

    def __enter__(self) -> KubeCluster:
        self.plane.__enter__()
        try:
            self.url = self.plane.server
            certs = self.plane.certificates
            target = urlparse(self.plane.server)
            self.service = TcpProxy((target.hostname or "127.0.0.1", target.port or 443))
            self._http = urllib3.PoolManager(
                ssl_context=certs.ssl_context(), retries=False, maxsize=8
            )
            self.kubelet = Kubelet(
                self.plane.server,
                certs.ca,
                certs.directory / "ca.key",
                self._nodes,
                self._registries,
                root=self.root / "kubelet",
                node_env=self._node_env,
                # The serving certificate names 127.0.0.1 whatever the port: TLS as before.
                service_server=f"https://127.0.0.1:{self.service.port}",
            ).__enter__()
        except BaseException:
            if self.service is not None:
                self.service.close()
            self.plane.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.kubelet is not None:
                self.kubelet.__exit__(*exc)
        finally:
            if self.service is not None:
                self.service.close()
            self.plane.__exit__(*exc)
            if self._tmp is not None:
                self._tmp.cleanup()

    # -- the API -----------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        """One call as the administrator; the JSON answer, None on 404."""
        assert self._http is not None
        return json_call(self._http, self.url, method, path, body, timeout)

    def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
        """An object, or None."""
        return self.call("GET", _path(group, version, plural, namespace, name))

    def list(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> list[dict]:
        """Objects, optionally of one namespace and with these labels."""
        path = _path(group, version, plural, namespace)
        if labels:
            path += "?labelSelector=" + ",".join(f"{k}%3D{v}" for k, v in labels.items())
        return (self.call("GET", path) or {}).get("items") or []

    def pods(self, namespace: str, **labels: str) -> list[dict]:
        """The pods of a namespace with these labels (``__`` in a keyword stands for ``/``)."""
        return self.list(
            "", "v1", "pods", namespace, {k.replace("__", "/"): v for k, v in labels.items()}
        )

    def pod_log(self, pod: dict) -> str:
        """The log of a pod's first container, as its kubelet keeps it."""
        assert self.kubelet is not None
        return self.kubelet.log(pod["metadata"]["namespace"], pod["metadata"]["name"])

    def events(self, namespace: str, name: str) -> list[dict]:
        """The Events about an object."""
        return [
            e
            for e in self.list("", "v1", "events", namespace)
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    def create(self, obj: dict) -> dict:
        """Creates ``obj`` as the administrator (``kubectl create``); returns what was stored."""
        out = self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
        return json.loads(out.stdout)

    def create_namespaces(self, *names: str) -> None:
        """Creates these namespaces."""
        for name in names:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def errors(self) -> list[str]:
        """What went wrong inside our kubelet (should stay empty)."""
        return list(self.kubelet.errors) if self.kubelet else []

    # -- the users' tools -------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment kubectl and helm run with: the admin kubeconfig, a home of its own
        (kubectl caches discovery there)."""
        home = self.root / "home"
        home.mkdir(exist_ok=True)
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(home)}

    def _run(
        self, path: Path, args: tuple[str, ...], check: bool, timeout: float, input: str | None
    ) -> subprocess.CompletedProcess:
        if not os.access(path, os.X_OK):
            raise AssertionError(f"no {path.name} at {path}: run `make {path.name}`")
        proc = subprocess.run(
            [str(path), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and proc.returncode != 0:
            command = f"{path.name} {' '.join(args)}"
            raise AssertionError(
                f"{command} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Runs kubectl v1.37 (built with the server) against this cluster."""
        return self._run(self.plane.bin / "kubectl", args, check, timeout, input)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess:
        """Runs the real helm against this cluster."""
        return self._run(BIN / "helm", args, check, timeout, None)

    # -- faults of the control plane ------------------------------------------------------

    @contextlib.contextmanager
    def pods_cut_off(self) -> Iterator[None]:
        """For the ``with`` block the pods cannot reach the API server (the ``kubernetes``
        Service refuses them, their open connections reset: a network partition between the
        nodes' pods and the control plane), while the kubelets, the controllers and the
        test's admin clients still do."""
        assert self.service is not None
        self.service.cut()
        try:
            yield
        finally:
            self.service.restore()

    @contextlib.contextmanager
    def watches_down(self) -> Iterator[None]:
        """For the ``with`` block the pods are cut off (:meth:`pods_cut_off`), so the test
        changes things as the admin unseen by their watches; on leaving, etcd's history is
        compacted and the API server restarted with a fresh watch cache before the pods reach
        it again: no watch of theirs can resume from where it was (410 Gone), every client
        (kopf among them) lists again."""
        assert self.service is not None
        self.service.cut()
        try:
            yield
            self.plane.compact_etcd()
            self.plane.restart_apiserver()
        finally:
            self.service.restore()

    # -- what happens to nodes --------------------------------------------------------------

    def preempt(self, node: str, replace: bool = True) -> str | None:
        """GKE reclaims the Spot VM ``node`` (graceful node shutdown, at most 15 s; the node
        goes); with ``replace`` its instance group brings up a new node of the same pool and
        zone. Returns the new node's name. Blocks until the old node is gone."""
        assert self.kubelet is not None
        spec = self.kubelet.nodes[node].spec
        self.kubelet.preempt(node)
        if not replace:
            return None
        self._spare += 1
        name = f"gke-{spec.pool}-r{self._spare}"
        self.kubelet.add_node(NodeSpec(name, spec.pool, spec.zone))
        return name


__all__ = ["RELEASE_REGISTRIES", "KubeCluster"]
