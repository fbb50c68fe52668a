"""The real seedrl operator (kopf) in-process against the simulated cluster's API, for tests.

:class:`OperatorHarness` starts, each in its own thread: the simulated cluster of
:mod:`support.sim_cluster` with ``workloads=False`` (its API server, garbage collector and
nodes; no controllers and no kubelet, so the tests write Job and Deployment status as the
Job and Deployment controllers would, "Jobs: Job status", "Deployments: Deployment status"),
with the operator chart's CustomResourceDefinitions installed and the tests' namespaces made;
a local HTTP server that plays the learners' ``GET /status`` endpoints (the operator reads a
learner's status over HTTP from its Service, which nothing here routes);
``kopf.operator`` with the handlers of ``service/operator/handlers.py``; and the operator's
``/metrics`` endpoint (:class:`seedrl.common.metrics_http.MetricsServer`, as ``main`` serves
it). Tests talk to the cluster with the official ``kubernetes`` client and wait on conditions
with :func:`wait_for`, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import kopf
import kubernetes

from seedrl.common.metrics_http import MetricsServer
from seedrl.service.operator import handlers as operator
from seedrl.service.operator.metrics import OperatorMetrics
from support.sim_cluster import SimulatedCluster


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


class OperatorCluster(SimulatedCluster):
    """The simulated cluster's API server alone (``workloads=False``) which, once entered,
    serves the operator chart's CRDs and has ``namespaces``: a cluster the operator's chart
    was installed on, whose workload controllers the tests play."""

    def __init__(self, *namespaces: str):
        super().__init__(workloads=False)
        self._namespaces = namespaces

    def __enter__(self) -> "OperatorCluster":
        super().__enter__()
        try:
            self.install_operator_crds()
            self.create_namespaces(*self._namespaces)
        except BaseException:
            self.__exit__()
            raise
        return self


class OperatorHarness:
    """The API server + learner status server + the operator, all running.

    Attributes:
      cluster: the simulated cluster (API server only).
      learners: the learner status server.
      api: a ``kubernetes`` ApiClient for the cluster (the tests' own).
      metrics: the operator's metrics; :attr:`metrics_url` serves them over HTTP.
    """

    def __init__(self, *namespaces: str, poll_seconds: float = 0.3):
        self.poll_seconds = poll_seconds
        self.cluster = OperatorCluster(*namespaces)
        self.learners = LearnerStatusServer()
        self.metrics = OperatorMetrics()
        self.metrics_server = MetricsServer(self.metrics.registry, host="127.0.0.1", port=0)
        self.metrics_url = ""
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kopf", daemon=True)

    def _run(self) -> None:
        config = operator.OperatorConfig(
            api_client=self.cluster.api_client(),
            poll_seconds=self.poll_seconds,
            status_url=self.learners.url,
            metrics=self.metrics,
            connection=kopf.ConnectionInfo(server=self.cluster.url, insecure=True),
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
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

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
