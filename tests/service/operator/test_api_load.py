"""What an idle Experiment costs the API server: counted in the real kube-apiserver's audit log
while the real operator (its chart's ServiceAccount) polls a running Experiment whose learner
reports nothing new, and a suspended one. No request per poll: an idle Experiment costs only
the lookups of the children no watch delivers, once per ``resync_seconds`` (300), and the
once-a-minute heartbeat of ``learnerUsage.lastSeen``: about 0.03 requests/s."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
import urllib.request

from seedrl.service.operator.status import condition
from support.operator_harness import OperatorHarness, wait_for
from support.operator_live import LiveClient

NS = "load"
#: Polls of each Experiment the requests are counted over.
POLLS = 20

pytestmark = pytest.mark.cluster


def _polls(harness: OperatorHarness) -> float:
    """``seedrl_operator_reconciles_total{trigger="poll"}``: Experiments refreshed so far."""
    with urllib.request.urlopen(harness.metrics_url, timeout=10) as answer:  # noqa: S310
        text = answer.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "seedrl_operator_reconciles_total" and s.labels.get("trigger") == "poll"
    )


def _requests(harness: OperatorHarness, since: int, name: str) -> list[str]:
    """The operator's requests about ``name`` and its children after the first ``since``
    audit events (watches aside: one long request each, not per poll)."""
    return [
        f"{event.get('verb')} {ref.get('resource')} {ref.get('name')}"
        for event in harness.cluster.operator_requests(since, name)
        if (ref := event.get("objectRef") or {}).get("namespace") == NS
        and event.get("verb") != "watch"
    ]


def test_an_idle_experiment_costs_no_request_per_poll():
    # The heartbeat (one write a minute by default) is left out of a window that a loaded
    # machine may stretch past a minute: test_status.py covers it.
    with OperatorHarness(NS, settings={"heartbeat_seconds": 3600.0}) as harness:
        live = LiveClient(harness, NS)
        live.create("idle-run")
        live.create("idle-off", suspend=True)
        # The learner of idle-run is up and reports the same progress at every poll; its pod
        # and actors are ready (what the Job and Deployment controllers would write).
        harness.learners.statuses[(NS, "idle-run")] = {
            "state": "running",
            "env_steps": 5000,
            "learner_steps": 12,
            "episodes": 40,
            "mean_return": 21.5,
            "actors": 2,
            "last_checkpoint": "ckpt-5000",
            "stop_reason": None,
        }
        wait_for(lambda: live.job("idle-run"), 60, "the learner Job")
        live.batch.patch_namespaced_job_status(
            "idle-run-learner",
            NS,
            {"status": {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}},
        )
        # The operator makes the actor Deployment after the Job, in the same pass.
        deployment = wait_for(
            lambda: live.read("Deployment", "idle-run-actors"), 60, "the actor Deployment"
        )
        replicas = deployment["spec"]["replicas"]
        live.apps.patch_namespaced_deployment_status(
            "idle-run-actors",
            NS,
            {"status": {"replicas": replicas, "readyReplicas": replicas}},
        )
        wait_for(
            lambda: (condition(live.status("idle-run"), "Ready") or {}).get("status") == "True",
            60,
            "idle-run Ready",
        )
        wait_for(lambda: live.status("idle-off").get("phase") == "Suspended", 60, "Suspended")
        # Steady: a status that stopped changing (its resourceVersion, over a few polls).
        start = _polls(harness)
        wait_for(lambda: _polls(harness) >= start + 6, 60, "a few polls")
        versions = {n: live.get(n)["metadata"]["resourceVersion"] for n in ("idle-run", "idle-off")}
        plane = harness.cluster.plane
        assert plane is not None
        since = len(plane.audit_events())
        start = _polls(harness)
        wait_for(lambda: _polls(harness) >= start + 2 * POLLS, 120, f"{POLLS} polls of each")
        polls = (_polls(harness) - start) / 2
        assert polls >= POLLS
        for name in ("idle-run", "idle-off"):
            made = _requests(harness, since, name)
            # No request per poll: the Experiment comes from the watch cache (it was read
            # afresh at every poll), its children too; at most one round of the lookups of
            # the children no watch delivers (ConfigMap, Service, NetworkPolicy, PDB, run
            # volume) may fall in the window.
            assert not [r for r in made if r.split()[1] == "experiments"], made
            assert len(made) <= 5, (name, polls, made)
            assert not [r for r in made if r.split()[0] not in ("get", "list")], made
            assert live.get(name)["metadata"]["resourceVersion"] == versions[name]
