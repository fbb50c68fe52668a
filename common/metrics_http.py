"""The HTTP endpoint every seedrl process serves: ``/metrics``, ``/status`` and ``/healthz``.

``/metrics`` is the Prometheus text format of one ``prometheus_client`` registry (each process
keeps its own registry rather than the global one, so several can live in one test process);
``/status`` is a JSON snapshot the operator and ``seedrl status`` read (the learner's step
counts, mean return, last checkpoint); ``/healthz`` answers 200 while the process serves (the
liveness probe); ``/readyz`` answers 200 while the process does its work and 503 otherwise (the
readiness probe: the learner once it serves the actors' streams, an actor while it streams).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from seedrl.common import finite_json

log = logging.getLogger(__name__)


def bind_address(flag: str | None, default_port: int) -> tuple[str, int] | None:
    """Where to serve, from a ``--metrics-address`` flag: ``host:port`` (``[v6]:port`` too),
    empty for ``0.0.0.0:default_port`` (a pod's port), or ``off`` for nowhere (None)."""
    if flag == "off":
        return None
    if not flag:
        return "0.0.0.0", default_port
    host, _, port = flag.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class MetricsServer:
    """Serves one registry and an optional status callback over HTTP in a daemon thread.

    Args:
      registry: the metrics to expose.
      status: returns the JSON-ready status snapshot (None: no ``/status``).
      ready: whether the process is ready (``/readyz``); None: ready while it serves.
      host: address to bind; ``0.0.0.0`` in a pod, loopback on a workstation.
      port: TCP port; 0 picks a free one (see :attr:`port` after :meth:`start`).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        status: Callable[[], dict] | None = None,
        host: str = "0.0.0.0",
        port: int = 0,
        ready: Callable[[], bool] | None = None,
    ):
        self.registry = registry
        self.status = status
        self.ready = ready
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Starts serving; returns the bound port."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # the http.server API
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, CONTENT_TYPE_LATEST, generate_latest(server.registry))
                    elif path == "/status" and server.status is not None:
                        body = finite_json.dumps(server.status(), default=str).encode()
                        self._send(200, "application/json", body)
                    elif path == "/healthz":
                        self._send(200, "text/plain", b"ok\n")
                    elif path == "/readyz":
                        if server.ready is None or server.ready():
                            self._send(200, "text/plain", b"ready\n")
                        else:
                            self._send(503, "text/plain", b"not ready\n")
                    else:
                        self._send(404, "text/plain", b"not found\n")
                except Exception:  # one bad scrape must not kill the server
                    log.exception("serving %s failed", path)
                    self._send(500, "text/plain", b"internal error\n")

            def _send(self, code, content_type, body):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # scrapes every few seconds: not worth a log line
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        return self.port

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the server is bound to, once started (a wildcard host stays a
        wildcard)."""
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        """Stops serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
