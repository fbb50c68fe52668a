"""The learner probing its own /healthz (learner/health.py), on loopback."""

from __future__ import annotations

import http.server
import socket
import threading

from seedrl.common.exit_codes import ExitCode
from seedrl.learner.health import UNHEALTHY_AFTER_S, HealthWatch
from seedrl.learner.main import exit_code


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_an_endpoint_that_stops_answering_makes_the_learner_unhealthy():
    now = [0.0]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    watch = HealthWatch(
        f"http://127.0.0.1:{server.server_port}/healthz", timeout=2.0, clock=lambda: now[0]
    )
    assert watch.probe() and not watch.unhealthy()
    server.shutdown()
    server.server_close()
    # A socket that accepts and never answers, as an endpoint whose threads are all pinned.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    watch.url = f"http://127.0.0.1:{silent.getsockname()[1]}/healthz"
    watch.timeout = 0.2
    now[0] = UNHEALTHY_AFTER_S - 1
    assert not watch.probe() and not watch.unhealthy()
    now[0] = UNHEALTHY_AFTER_S
    assert not watch.probe() and watch.unhealthy()
    assert watch.unanswered_seconds() == UNHEALTHY_AFTER_S
    silent.close()


def test_a_learner_stopped_while_unhealthy_exits_as_a_failure_not_stopped():
    # What the liveness probe kills is counted against backoffLimit; a healthy stop is not.
    assert exit_code("terminated", False, False, False, unhealthy=True) == ExitCode.FAILED
    assert exit_code("terminated", False, False, False, unhealthy=False) == ExitCode.STOPPED
    # A finished run is finished, whatever its endpoint did.
    assert exit_code("max_env_steps", False, False, False, unhealthy=True) == ExitCode.OK


def test_the_probe_goes_where_the_server_listens():
    from seedrl.learner.health import probe_url

    # A wildcard bind answers on loopback; a bind to one address (a pod's) only there.
    assert probe_url("0.0.0.0", 9090) == "http://127.0.0.1:9090/healthz"
    assert probe_url("::", 9090) == "http://127.0.0.1:9090/healthz"
    assert probe_url("10.4.0.7", 9090) == "http://10.4.0.7:9090/healthz"
    assert probe_url("fd00::7", 9090) == "http://[fd00::7]:9090/healthz"
