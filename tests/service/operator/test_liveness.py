"""The operator's liveness probe (kopf's ``--liveness`` endpoint, which the chart's
livenessProbe reads): it fails when the poller, which refreshes every Experiment's status, is
dead or stalled, so that the kubelet restarts the operator instead of leaving every status
frozen behind a healthy-looking kopf. Against the real kube-apiserver, with the operator
logged in as its chart's ServiceAccount."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import yaml

from support.operator_harness import ROOT, OperatorHarness, wait_for

NS = "liveness"

pytestmark = pytest.mark.cluster


def _probe(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - http://
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except urllib.error.URLError:  # not listening yet
        return 0, {}


def test_a_stalled_poller_fails_the_liveness_probe_and_a_live_one_passes_it():
    with OperatorHarness(NS) as harness:
        status, body = wait_for(
            lambda: (r := _probe(harness.liveness_url))[0] == 200 and r,
            60,
            "the liveness endpoint answering",
        )
        assert body.get("poller") == "ok", body
        poller = harness.memo.poller
        assert poller.health() is None
        # A refresh that never returns, as one blocked on an API call for good would; a
        # limit of 3 s instead of the 120 s floor, to see it soon.
        blocked, release = threading.Event(), threading.Event()
        refresh = poller.refresh

        def stuck(namespace, name):
            blocked.set()
            release.wait(120)

        poller.refresh, poller.stall_limit = stuck, 3.0
        try:
            harness.cluster.create(experiment("stuck"))
            assert blocked.wait(60), "no refresh began"
            # kopf caches its probes' results for 10 s: the failure shows within that.
            wait_for(lambda: _probe(harness.liveness_url)[0] == 500, 60, "the probe failing")
        finally:
            poller.refresh = refresh
            release.set()
        # Once the poller progresses again, the probe passes again.
        wait_for(lambda: _probe(harness.liveness_url)[0] == 200, 60, "the probe passing again")


def experiment(name: str) -> dict:
    """The CartPole example Experiment, named ``name``, in the harness's namespace."""
    body = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
    body["metadata"].update(name=name, namespace=NS)
    return body
