"""The poller (service/operator/poller.py): its peering gate (which replica works) and its
stop. Its refreshes and resyncs run against the real kube-apiserver in test_handlers.py."""

from __future__ import annotations

import time


def test_only_the_live_peer_of_the_highest_priority_is_active():
    import datetime as dt

    from seedrl.service.operator.poller import is_active_peer

    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    fresh = (now - dt.timedelta(seconds=10)).isoformat()
    stale = (now - dt.timedelta(seconds=120)).isoformat()
    peers = {
        "a": {"priority": 5, "lifetime": 60, "lastseen": fresh},
        "b": {"priority": 9, "lifetime": 60, "lastseen": fresh},
    }
    assert is_active_peer(peers, "b", 9, now) and not is_active_peer(peers, "a", 5, now)
    # The leader stopped renewing its record: the other takes over once it expires.
    peers["b"]["lastseen"] = stale
    assert is_active_peer(peers, "a", 5, now)
    # A tie never leaves two active.
    tie = {
        "a": {"priority": 5, "lifetime": 60, "lastseen": fresh},
        "b": {"priority": 5, "lifetime": 60, "lastseen": fresh},
    }
    assert is_active_peer(tie, "a", 5, now) != is_active_peer(tie, "b", 5, now)


def test_stop_waits_for_the_refresh_under_way_and_skips_the_rest():
    # A SIGTERM'd operator stops the poller and exits: a refresh still running (and logging)
    # while the interpreter finalizes would abort the process instead of exiting 0.
    import threading

    import kubernetes

    from seedrl.service.operator.metrics import OperatorMetrics
    from seedrl.service.operator.poller import Poller
    from seedrl.service.operator.reconciler import OperatorConfig, Reconciler
    from seedrl.service.operator.watch_cache import ChildCache

    cfg = OperatorConfig(
        api_client=kubernetes.client.ApiClient(), metrics=OperatorMetrics(), poll_seconds=3600
    )
    poller = Poller(cfg, Reconciler(cfg), ChildCache())
    started, release, refreshed = threading.Event(), threading.Event(), []

    def refresh(namespace, name):
        refreshed.append(name)
        started.set()
        assert release.wait(60)

    poller.refresh = refresh
    poller.wake("team-a", "first")
    poller.wake("team-a", "second")
    poller.start()
    assert started.wait(30)
    stopper = threading.Thread(target=poller.stop)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # waiting on the refresh under way, which cannot end yet
    release.set()
    stopper.join(30)
    assert not stopper.is_alive() and not poller._thread.is_alive()
    assert len(refreshed) == 1  # the other woken Experiment was not begun after the stop


def _poller(poll_seconds: float = 3600, **config):
    import kubernetes

    from seedrl.service.operator.metrics import OperatorMetrics
    from seedrl.service.operator.poller import Poller
    from seedrl.service.operator.reconciler import OperatorConfig, Reconciler
    from seedrl.service.operator.watch_cache import ChildCache

    cfg = OperatorConfig(
        api_client=kubernetes.client.ApiClient(),
        metrics=OperatorMetrics(),
        poll_seconds=poll_seconds,
        **config,
    )
    return Poller(cfg, Reconciler(cfg), ChildCache())


def test_an_unreachable_api_server_pauses_the_peering_gate_and_never_raises():
    # The client raises urllib3's errors (not ApiException) when the API server refuses
    # connections: raised from the gate they ended the poller's thread, freezing every
    # status for good after an outage.
    import socket

    import kubernetes

    from seedrl.service.operator.poller import PeeringGate

    with socket.socket() as sock:  # a port nothing listens on, held so no one takes it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        configuration = kubernetes.client.Configuration()
        configuration.host = f"http://127.0.0.1:{port}"
        configuration.retries = False
        gate = PeeringGate(kubernetes.client.ApiClient(configuration), "seedrl", "me", 5)
        assert gate("team-a") is False


def test_a_failing_gate_pauses_that_round_and_the_thread_goes_on():
    asked: list[float] = []

    def gate(namespace):
        asked.append(time.monotonic())
        raise RuntimeError("cannot tell")

    poller = _poller(active=gate)
    refreshed = []
    poller.refresh = lambda namespace, name: refreshed.append(name)
    poller.start()
    try:
        poller.wake("team-a", "first")
        deadline = time.monotonic() + 30
        # The round that asked ends with a beat, and the thread waits for the next one.
        while not (asked and poller.beat > asked[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert asked and poller.beat > asked[0]
        assert poller._thread.is_alive() and poller.health() is None
        assert refreshed == []
    finally:
        poller.stop()


def test_health_names_a_dead_thread_and_a_stall():
    poller = _poller(poll_seconds=30)
    assert poller.health() is None  # not started: kopf's start-up covers that

    def broken():
        raise RuntimeError("a bug in a round")

    poller._rounds = broken
    poller.start()
    poller._thread.join(30)
    assert poller.health() == "the poller thread ended: RuntimeError('a bug in a round')"

    stalled = _poller(poll_seconds=30)
    stalled._rounds = lambda: stalled._stop.wait()
    stalled.start()
    try:
        assert stalled.health() is None
        # Six rounds of 30 s (over the 120 s floor) without a beat.
        assert stalled.health(now=stalled.beat + 179) is None
        assert stalled.health(now=stalled.beat + 181) == (
            "the poller made no progress for 181 s (limit 180 s)"
        )
    finally:
        stalled.stop()
    assert stalled.health(now=stalled.beat + 10**6) is None  # stopped on purpose
