"""The HTTP endpoint every seedrl process serves: /healthz for liveness, /readyz for
readiness (common/metrics_http.py)."""

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from seedrl.common.metrics_http import MetricsServer


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
