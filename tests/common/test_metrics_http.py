"""The HTTP endpoint every seedrl process serves: /healthz for liveness, /readyz for
readiness; idle or slow connections neither pin threads nor keep it from answering
(common/metrics_http.py)."""

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from seedrl.common.metrics_http import HANDLER_THREADS, MetricsServer


def _code(port, path):
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_readyz_follows_the_ready_callback_and_healthz_stays_up():
    ready = [False]
    server = MetricsServer(CollectorRegistry(), host="127.0.0.1", ready=lambda: ready[0])
    port = server.start()
    try:
        assert (_code(port, "/healthz"), _code(port, "/readyz")) == (200, 503)
        ready[0] = True
        assert (_code(port, "/healthz"), _code(port, "/readyz")) == (200, 200)
    finally:
        server.stop()


def test_without_a_callback_a_serving_process_is_ready():
    server = MetricsServer(CollectorRegistry(), host="127.0.0.1")
    port = server.start()
    try:
        assert _code(port, "/readyz") == 200 and _code(port, "/nothing") == 404
    finally:
        server.stop()


def _connect(port, blocking=True):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(blocking)
    return sock


def _closed_by_server(sock):
    """Whether the server has closed ``sock`` (end of stream or reset), without blocking."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _get(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return response.status, response.read()


def test_idle_connections_pin_no_threads_and_a_probe_still_gets_in():
    # An attacker on the network opens many connections and sends nothing. They cost no
    # thread, the server holds at most max_connections of them, and a probe still answers.
    cap, idle_count = 16, 150
    status = {"learner_steps": 3}
    server = MetricsServer(
        CollectorRegistry(),
        status=lambda: status,
        host="127.0.0.1",
        max_connections=cap,
        request_timeout=60,
    )
    port = server.start()
    threads_before = threading.active_count()
    idle = []
    try:
        idle = [_connect(port, blocking=False) for _ in range(idle_count)]
        # Accepted in order: once this answers, every idle connection has been accepted.
        assert _get(port, "/healthz") == (200, b"ok\n")
        assert _get(port, "/status")[0] == 200 and _get(port, "/metrics")[0] == 200
        assert threading.active_count() <= threads_before + HANDLER_THREADS
        deadline = time.monotonic() + 30
        while sum(not _closed_by_server(s) for s in idle) > cap:
            assert time.monotonic() < deadline, "the server kept more connections than its cap"
            time.sleep(0.05)
        # The newest ones are the ones kept: the oldest made room.
        assert not any(_closed_by_server(s) for s in idle[-cap // 2 :])
    finally:
        for s in idle:
            s.close()
        server.stop()


@pytest.mark.parametrize(
    "sent", [b"", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"], ids=["idle", "slow"]
)
def test_a_connection_without_a_whole_request_is_closed_after_the_timeout(sent):
    timeout = 1.0
    server = MetricsServer(CollectorRegistry(), host="127.0.0.1", request_timeout=timeout)
    port = server.start()
    try:
        start = time.monotonic()
        with _connect(port) as sock:
            sock.sendall(sent)
            sock.settimeout(timeout + 20)  # generous: a loaded machine may be late, never early
            try:
                assert sock.recv(1024) == b""
            except ConnectionResetError:
                pass
            elapsed = time.monotonic() - start
        # Timed from our connect, which precedes the server's accept: never before the timeout.
        assert elapsed >= timeout - time.get_clock_info("monotonic").resolution
    finally:
        server.stop()


def test_a_hung_status_callback_leaves_health_answering():
    release = threading.Event()

    def status():
        release.wait(60)
        return {}

    server = MetricsServer(
        CollectorRegistry(), status=status, host="127.0.0.1", request_timeout=1.0
    )
    port = server.start()
    threads_before = threading.active_count()
    results = []
    try:
        scrapes = [
            threading.Thread(target=lambda: results.append(_code(port, "/status")))
            for _ in range(3 * HANDLER_THREADS)
        ]
        for t in scrapes:
            t.start()
        assert _get(port, "/healthz") == (200, b"ok\n")
        for t in scrapes:
            t.join(60)
        # Each scrape is answered "busy" within the timeout, not left hanging.
        assert results == [503] * len(scrapes)
        assert threading.active_count() <= threads_before + HANDLER_THREADS
    finally:
        release.set()
        server.stop()
