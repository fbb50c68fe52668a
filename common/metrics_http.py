"""The HTTP endpoint every seedrl process serves: ``/metrics``, ``/status`` and ``/healthz``.

``/metrics`` is the Prometheus text format of one ``prometheus_client`` registry (each process
keeps its own registry rather than the global one, so several can live in one test process);
``/status`` is a JSON snapshot the operator and ``seedrl status`` read (the learner's step
counts, mean return, last checkpoint); ``/healthz`` answers 200 while the process serves (the
liveness probe); ``/readyz`` answers 200 while the process does its work and 503 otherwise (the
readiness probe: the learner once it serves the actors' streams, an actor while it streams).

In a cluster the port listens on every interface, so anyone who can reach the pod can open
connections to it. Connections cost no thread: one event loop thread accepts them and reads
each request, and only a complete request takes one of :data:`HANDLER_THREADS` threads to
build its answer. A client has :data:`REQUEST_TIMEOUT_S` seconds from connecting to send its
request (and as long to take the answer): an idle or trickling connection is closed then. At
most :data:`MAX_CONNECTIONS` are open at once: a new one past that closes the oldest that has
not yet sent its request, so that a probe or a scrape still gets in while idle connections
pile up. Each connection carries one request (``Connection: close``), as HTTP/1.0.
"""

from __future__ import annotations

import asyncio
import http
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from seedrl.common import finite_json

log = logging.getLogger(__name__)

#: Seconds a client has, from connecting, to send its whole request (line and headers), and
#: again to take the answer; the connection is closed after either. Probes and Prometheus send
#: at once (the kubelet's probe and Prometheus's scrape time out after 5 and 10 s themselves).
REQUEST_TIMEOUT_S = 10.0
#: Connections open at once. A handful is what a process sees (the kubelet, Prometheus, the
#: operator, its own health watch); past the cap, the oldest still waiting for its request is
#: closed to make room for the new one.
MAX_CONNECTIONS = 64
#: Threads that build answers (a registry's metrics, the status snapshot): the most the
#: endpoint ever uses besides its event loop's, however many connections are open.
HANDLER_THREADS = 4
#: Longest request line and headers read; a longer request is answered 431.
MAX_REQUEST_BYTES = 8192
#: Seconds between warnings that the connection cap is being hit.
_CAP_WARNING_EVERY_S = 60.0


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
    """Serves one registry and an optional status callback over HTTP from a daemon thread.

    Args:
      registry: the metrics to expose.
      status: returns the JSON-ready status snapshot (None: no ``/status``).
      ready: whether the process is ready (``/readyz``); None: ready while it serves.
      host: address to bind; ``0.0.0.0`` in a pod, loopback on a workstation.
      port: TCP port; 0 picks a free one (see :attr:`port` after :meth:`start`).
      request_timeout: see :data:`REQUEST_TIMEOUT_S`.
      max_connections: see :data:`MAX_CONNECTIONS`.
      handler_threads: see :data:`HANDLER_THREADS`.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        status: Callable[[], dict] | None = None,
        host: str = "0.0.0.0",
        port: int = 0,
        ready: Callable[[], bool] | None = None,
        *,
        request_timeout: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        handler_threads: int = HANDLER_THREADS,
    ):
        self.registry = registry
        self.status = status
        self.ready = ready
        self.host = host
        self.port = port
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.handler_threads = handler_threads
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        # Open connections in the order they came, each with whether its request is in yet
        # (only the event loop's thread touches it).
        self._connections: dict[asyncio.StreamWriter, bool] = {}
        self._last_cap_warning = -_CAP_WARNING_EVERY_S

    def start(self) -> int:
        """Starts serving; returns the bound port.

        Raises:
          OSError: the address cannot be bound (nothing is left running).
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, backlog=128)
        self._socket = sock
        self.port = sock.getsockname()[1]
        self._executor = ThreadPoolExecutor(self.handler_threads, thread_name_prefix="metrics-http")
        loop = self._loop = asyncio.new_event_loop()
        started = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._slots = asyncio.Semaphore(self.handler_threads)
                server = loop.run_until_complete(
                    asyncio.start_server(self._serve_one, sock=sock, limit=MAX_REQUEST_BYTES)
                )
            except Exception as exc:  # noqa: BLE001 - handed to start()'s caller
                failed.append(exc)
                started.set()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                server.close()
                for writer in list(self._connections):
                    writer.transport.abort()
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.close()

        self._thread = threading.Thread(target=serve, name="metrics-http", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            self.stop()
            raise failed[0]
        return self.port

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the server is bound to, once started (a wildcard host stays a
        wildcard)."""
        assert self._socket is not None, "start() the server first"
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def stop(self) -> None:
        """Stops serving and closes every open connection."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    # -- one connection ---------------------------------------------------------------------------

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections[writer] = False
        self._enforce_cap(writer)
        try:
            code, content_type, body = await self._answer(reader, writer)
            if code:
                await self._send(writer, code, content_type, body)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went, or took too long: nothing to answer
        except asyncio.CancelledError:
            pass  # the server stops: its task ends here rather than as cancelled, which
            # asyncio's stream callback would log as an error
        finally:
            self._connections.pop(writer, None)
            writer.transport.abort()

    def _enforce_cap(self, newest: asyncio.StreamWriter) -> None:
        """Closes the oldest connection still waiting for its request when there are more
        than ``max_connections`` (the newest itself when every other one is being answered)."""
        if len(self._connections) <= self.max_connections:
            return
        waiting = next((w for w, has_request in self._connections.items() if not has_request), None)
        closed = waiting or newest
        # Forgotten now: its handler sees the abort only on the loop's next turn.
        del self._connections[closed]
        closed.transport.abort()
        now = time.monotonic()
        if now - self._last_cap_warning >= _CAP_WARNING_EVERY_S:
            self._last_cap_warning = now
            log.warning(
                "over %d connections to the HTTP endpoint on port %d: closing the oldest "
                "that have sent no request",
                self.max_connections,
                self.port,
            )

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, str, bytes]:
        """Reads one request within the timeout and builds its answer (code 0: none)."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.request_timeout)
        except asyncio.LimitOverrunError:
            return 431, "text/plain", b"request header fields too large\n"
        if writer in self._connections:
            self._connections[writer] = True
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "text/plain", b"bad request\n"
        method, target = parts[0], parts[1]
        if method != "GET":
            return 405, "text/plain", b"only GET\n"
        path = target.split("?", 1)[0]
        if path == "/healthz":  # answered here: it needs no thread, so it is never queued
            return 200, "text/plain", b"ok\n"
        if path not in ("/metrics", "/readyz") and not (
            path == "/status" and self.status is not None
        ):
            return 404, "text/plain", b"not found\n"
        assert self._slots is not None and self._executor is not None
        # Waits for a free thread within the timeout rather than queueing behind hung ones.
        try:
            await asyncio.wait_for(self._slots.acquire(), self.request_timeout)
        except asyncio.TimeoutError:
            return 503, "text/plain", b"busy\n"
        try:
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._executor, self._build, path)
            return await asyncio.wait_for(work, self.request_timeout)
        except asyncio.TimeoutError:
            return 503, "text/plain", b"busy\n"
        finally:
            self._slots.release()

    def _build(self, path: str) -> tuple[int, str, bytes]:
        """The answer to a GET of ``path`` (in a handler thread)."""
        try:
            if path == "/metrics":
                return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
            if path == "/status":
                assert self.status is not None
                body = finite_json.dumps(self.status(), default=str).encode()
                return 200, "application/json", body
            if self.ready is None or self.ready():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        except Exception:  # one bad scrape must not kill the server
            log.exception("serving %s failed", path)
            return 500, "text/plain", b"internal error\n"

    async def _send(
        self, writer: asyncio.StreamWriter, code: int, content_type: str, body: bytes
    ) -> None:
        """Writes the answer; a client that does not take it within the timeout is cut off."""
        head = (
            f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await asyncio.wait_for(writer.drain(), self.request_timeout)
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), self.request_timeout)
