"""The real seedrl operator (kopf) in-process against the real Kubernetes API server, for tests.

:class:`OperatorHarness` starts, each in its own thread or process: :class:`OperatorCluster`, the
real etcd and kube-apiserver v1.37 of :mod:`support.control_plane` with kube-controller-manager
running only the controllers that are not workload controllers (the garbage collector, the
namespace, service-account and token controllers: no Job, ReplicaSet or Deployment controller
and no scheduler, so nothing runs a pod and the tests write Job and Deployment status as those
controllers would, "Jobs: Job status", "Deployments: Deployment status"), with the operator
chart's CustomResourceDefinitions applied server-side, its ServiceAccount and RBAC installed
from ``helm template`` and the tests' namespaces made; a local HTTP server that plays the
learners' ``GET /status`` endpoints (the operator reads a learner's status over HTTP from its
Service, which nothing here routes); ``kopf.operator`` with the handlers of
``service/operator/handlers.py``, authenticated with a token of the chart's ServiceAccount
(TokenRequest), never as an admin, so every call it makes passes the chart's RBAC or fails as
it would on a cluster; and the operator's ``/metrics`` endpoint
(:class:`seedrl.common.metrics_http.MetricsServer`, as ``main`` serves it). Tests talk to the
cluster as its admin with the official ``kubernetes`` client and wait on conditions with
:func:`wait_for`, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import kopf
import kubernetes
import yaml

from seedrl.common.metrics_http import MetricsServer
from seedrl.service.operator import handlers as operator
from seedrl.service.operator.metrics import OperatorMetrics
from support.control_plane import ControlPlane, free_port, wait_until_served

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "seedrl-operator"
#: The CustomResourceDefinitions the operator tests install: the Experiment's as it served
#: before its second version (``k8s/crd/``, the chart's ``v1alpha1`` alone, which needs no
#: conversion webhook), and kopf's peerings (the chart's ``crds/``). The chart's own
#: two-version CRD is installed by the tests of conversion, install and upgrade.
OPERATOR_CRDS = (ROOT / "k8s" / "crd" / "experiments.seedrl.dev.yaml", CHART / "crds")
#: Where the chart's release lives, and the ServiceAccount ``helm template`` names for it.
OPERATOR_NAMESPACE = "seedrl-system"
OPERATOR_RELEASE = "seedrl"
#: The Secret the chart names for the conversion webhook's certificate in that release
#: (``seedrl-operator.webhookSecret``), which its RBAC and admission policy let it write.
WEBHOOK_SECRET = "seedrl-seedrl-operator-webhook-tls"
#: kube-controller-manager's controllers that act on no workload: owned children go with their
#: owner, namespaces are emptied, ServiceAccounts and their tokens are made.
NON_WORKLOAD_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
)

#: The Job, Deployment and ReplicaSet controllers: a learner Job's pod made and deleted as Kueue
#: unsuspends and suspends the Job, actor pods made for the Deployment's replicas. Still no
#: scheduler: the pods stay Pending.
WORKLOAD_CONTROLLERS = ("job-controller", "deployment-controller", "replicaset-controller")


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Polls ``predicate`` until it returns something truthy; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except kubernetes.client.ApiException as exc:  # not there yet
            last_error, value = exc, None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what or predicate}"
        + (f" (last error: {last_error})" if last_error else "")
    )


class LearnerStatusServer:
    """Serves ``/<namespace>/<name>/status`` with the JSON set in :attr:`statuses`."""

    def __init__(self):
        self.statuses: dict[tuple[str, str], dict] = {}
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # http.server's name
                outer.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                body = outer.statuses.get(tuple(parts[:2])) if len(parts) == 3 else None
                if body is None:
                    self.send_error(503, "learner not up")
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def url(self, namespace: str, name: str, _metrics_port: int) -> str:
        """Where the operator finds a learner's status (in place of its Service)."""
        return f"http://127.0.0.1:{self.port}/{namespace}/{name}/status"

    def serve(self) -> None:
        """Answers from a daemon thread until :meth:`close`."""
        threading.Thread(
            target=self.server.serve_forever, daemon=True, name="learner-status"
        ).start()

    def close(self) -> None:
        """Stops answering and frees the port."""
        self.server.shutdown()
        self.server.server_close()


class OperatorCluster:
    """The real API server with the controllers that act on no workload (see the module
    docstring), the operator chart's CRDs, ServiceAccount and RBAC installed, and
    ``namespaces`` made: a cluster the operator's chart was installed on, whose workload
    controllers the tests play.

    ``controllers``: more of kube-controller-manager's controllers to run, e.g.
    ``"job-controller"`` for a test of what the real Job controller does with the operator's
    Jobs (suspend, deadlines, failures counted from pods), or :data:`WORKLOAD_CONTROLLERS` for
    Kueue's scenarios; with no scheduler their pods stay Pending, and a test plays the kubelet
    by writing their status.

    Attributes:
      plane: the running :class:`ControlPlane` (once entered).
      url: the API server's URL.
    """

    def __init__(
        self, *namespaces: str, workdir: Path | None = None, controllers: tuple[str, ...] = ()
    ):
        self._namespaces = namespaces
        self._controllers = controllers
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._workdir = workdir
        self.plane: ControlPlane | None = None
        self.url = ""
        self._operator_token = ""
        #: The operator's user name (its ServiceAccount's) and the ClusterRole of its rules.
        self.operator_user = ""
        self.operator_role = ""

    def __enter__(self) -> "OperatorCluster":
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="operator-cluster-")
            self._workdir = Path(self._tmp.name)
        self.plane = ControlPlane(
            self._workdir,
            controller_names=(*NON_WORKLOAD_CONTROLLERS, *self._controllers),
            scheduler=False,
        )
        self.plane.__enter__()
        try:
            self.url = self.plane.server
            self.install_operator_crds()
            # The controllers start once the CRDs are served, as on a cluster the chart was
            # installed on long ago: the garbage collector then knows Experiments (as owners)
            # from its first discovery, not from its next resync (30 s later).
            self.plane.start_controllers()
            self.create_namespaces(OPERATOR_NAMESPACE, *self._namespaces)
            self.install_operator_rbac()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.plane is not None:
            self.plane.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl v1.37 as the cluster's admin; fails the test on a non-zero exit."""
        assert self.plane is not None
        return self.plane.kubectl(*args, input=input).stdout

    def install_operator_crds(self) -> None:
        """Applies :data:`OPERATOR_CRDS` server-side and waits until each kind is served."""
        for source in OPERATOR_CRDS:
            self.kubectl("apply", "--server-side", "-f", str(source))
            for path in sorted(source.glob("*.yaml")) if source.is_dir() else [source]:
                for document in yaml.safe_load_all(path.read_text()):
                    if document:
                        wait_until_served(self.plane, document["metadata"]["name"])

    def chart_crd(self, webhook_url: str, *sets: str) -> dict:
        """The chart's Experiment CRD (``helm template --show-only templates/crd.yaml``,
        ``sets`` as ``--set``) with its conversions sent to ``webhook_url`` instead of the
        webhook Service, which this API server cannot reach (no kube-proxy here); its
        ``caBundle`` is left to the operator, as in a cluster."""
        rendered = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "helm"), "template", OPERATOR_RELEASE, str(CHART),
             "-n", OPERATOR_NAMESPACE, "--show-only", "templates/crd.yaml",
             *(f"--set={s}" for s in sets)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        crd = yaml.safe_load(rendered)
        crd["spec"]["conversion"]["webhook"]["clientConfig"] = {"url": webhook_url}
        return crd

    def create_namespaces(self, *namespaces: str) -> None:
        """Creates each namespace that does not exist yet."""
        for namespace in namespaces:
            manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def install_operator_rbac(self, *sets: str) -> None:
        """Installs the chart's ServiceAccount, RBAC and admission policy (``helm template``
        of ``templates/serviceaccount.yaml``, ``rbac.yaml``, ``admissionpolicy.yaml`` and
        ``rbac-webhook.yaml``,
        ``sets`` as ``--set``), and mints a token of that ServiceAccount for the operator."""
        rendered = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "helm"),
                "template",
                OPERATOR_RELEASE,
                str(CHART),
                "-n",
                OPERATOR_NAMESPACE,
                "--show-only",
                "templates/serviceaccount.yaml",
                "--show-only",
                "templates/rbac.yaml",
                "--show-only",
                "templates/admissionpolicy.yaml",
                "--show-only",
                "templates/rbac-webhook.yaml",
                *(f"--set={s}" for s in sets),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        self.kubectl("apply", "-n", OPERATOR_NAMESPACE, "-f", "-", input=rendered)
        documents = [d for d in yaml.safe_load_all(rendered) if d]
        account = next(d["metadata"]["name"] for d in documents if d["kind"] == "ServiceAccount")
        self.operator_user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
        # The role that holds the operator's rules: the one that may write Jobs.
        self.operator_role = next(
            d["metadata"]["name"]
            for d in documents
            if d["kind"] == "ClusterRole"
            and any("jobs" in r.get("resources", []) for r in d.get("rules", []))
        )
        self._operator_token = self.kubectl(
            "create", "token", account, "-n", OPERATOR_NAMESPACE, "--duration=24h"
        ).strip()

    def kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """Writes a kubeconfig of the cluster's admin to ``path`` (its context's namespace
        ``namespace`` when given) and returns it, for kubectl and ``seedrl`` commands."""
        assert self.plane is not None
        config = yaml.safe_load(self.plane.kubeconfig.read_text())
        if namespace:
            for context in config["contexts"]:
                context["context"]["namespace"] = namespace
        path.write_text(yaml.safe_dump(config))
        return path

    def operator_refusals(self) -> list[str]:
        """Every request of the operator's ServiceAccount the API server refused as
        forbidden (403), as ``VERB RESOURCE NAMESPACE/NAME``, from the audit log."""
        assert self.plane is not None
        return self.plane.refusals(self.operator_user)

    def operator_requests(self, since: int, names: str) -> list[dict]:
        """The audit events of the operator's ServiceAccount after the first ``since``, about
        objects whose name starts with ``names`` (its Events aside)."""
        assert self.plane is not None
        return [
            event
            for event in self.plane.audit_events()[since:]
            if (event.get("user") or {}).get("username") == self.operator_user
            and str((event.get("objectRef") or {}).get("name", "")).startswith(names)
            and (event.get("objectRef") or {}).get("resource") != "events"
        ]

    def api_client(self) -> kubernetes.client.ApiClient:
        """A ``kubernetes`` client as the cluster's admin (the tests' own)."""
        assert self.plane is not None
        return self.plane.api_client()

    def operator_api_client(self) -> kubernetes.client.ApiClient:
        """A ``kubernetes`` client with the operator's ServiceAccount token."""
        assert self.plane is not None
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.plane.certificates.ca)
        configuration.api_key = {"authorization": f"Bearer {self._operator_token}"}
        return kubernetes.client.ApiClient(configuration)

    def operator_kubeconfig(self) -> dict:
        """A kubeconfig (as a dict) that logs in as the operator's ServiceAccount, the CA
        inline: for an operator process that reads ``KUBECONFIG``."""
        assert self.plane is not None
        ca = base64.b64encode(self.plane.certificates.ca.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "operator",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority-data": ca},
                }
            ],
            "contexts": [{"name": "operator", "context": {"cluster": "test", "user": "operator"}}],
            "users": [{"name": "operator", "user": {"token": self._operator_token}}],
        }

    def operator_connection(self) -> kopf.ConnectionInfo:
        """What kopf logs in with: the operator's ServiceAccount token."""
        assert self.plane is not None
        return kopf.ConnectionInfo(
            server=self.url, ca_path=str(self.plane.certificates.ca), token=self._operator_token
        )

    def create(self, obj: dict) -> dict:
        """Creates ``obj`` (any kind) as the admin; returns it as stored."""
        return json.loads(self.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj)))

    def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
        """The object, or None if there is none."""
        resource = f"{plural}.{version}.{group}" if group else plural
        where = ["-n", namespace] if namespace else []
        out = self.kubectl("get", resource, name, *where, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None


class OperatorHarness:
    """The API server + learner status server + the operator, all running (``controllers``:
    more controllers, see :class:`OperatorCluster`; ``settings``: more
    :class:`~seedrl.service.operator.reconciler.OperatorConfig` fields).

    Attributes:
      cluster: the cluster (:class:`OperatorCluster`).
      learners: the learner status server.
      api: a ``kubernetes`` ApiClient for the cluster (the tests' own).
      metrics: the operator's metrics; :attr:`metrics_url` serves them over HTTP.
    """

    def __init__(
        self,
        *namespaces: str,
        poll_seconds: float = 0.3,
        controllers: tuple[str, ...] = (),
        settings: dict[str, Any] | None = None,
    ):
        self.poll_seconds = poll_seconds
        # Every poll's status written, timestamps included, unless a test says otherwise:
        # many wait for a refresh by its lastSeen or asOf.
        self.settings = {"heartbeat_seconds": 0.0, **(settings or {})}
        self.cluster = OperatorCluster(*namespaces, controllers=controllers)
        self.learners = LearnerStatusServer()
        self.metrics = OperatorMetrics()
        self.metrics_server = MetricsServer(self.metrics.registry, host="127.0.0.1", port=0)
        self.metrics_url = ""
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kopf", daemon=True)
        #: kopf's memo (the operator's shared state: ``memo.poller`` once started).
        self.memo = kopf.Memo()
        #: kopf's liveness endpoint (``--liveness``), as the chart's probe reads it.
        self.liveness_url = f"http://127.0.0.1:{free_port()}/healthz"

    def _run(self) -> None:
        config = operator.OperatorConfig(
            api_client=self.cluster.operator_api_client(),
            poll_seconds=self.poll_seconds,
            status_url=self.learners.url,
            metrics=self.metrics,
            connection=self.cluster.operator_connection(),
            **self.settings,
        )
        registry = operator.build_registry(config)

        @kopf.on.startup(registry=registry)
        def quick_exit(settings: kopf.OperatorSettings, **_: Any) -> None:
            # Handlers run the blocking client in threads; do not wait long for them at exit.
            settings.background.instant_exit_timeout = 0.1

        try:
            # Cluster-wide, as the chart runs it by default (watch.scope: cluster).
            asyncio.run(
                kopf.operator(
                    registry=registry,
                    standalone=True,
                    clusterwide=True,
                    ready_flag=self._ready,
                    stop_flag=self._stop,
                    memo=self.memo,
                    liveness_endpoint=self.liveness_url,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    def polls(self) -> float:
        """Experiments refreshed by the poller so far (its reconciles counter)."""
        return (
            self.metrics.registry.get_sample_value(
                "seedrl_operator_reconciles_total", {"trigger": "poll"}
            )
            or 0.0
        )

    def __enter__(self) -> "OperatorHarness":
        self.cluster.__enter__()
        self.learners.serve()
        self.api = self.cluster.api_client()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_server.start()}/metrics"
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            self.__exit__()
            raise RuntimeError(f"the operator did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(20)
        self.metrics_server.stop()
        self.learners.close()
        self.cluster.__exit__()
