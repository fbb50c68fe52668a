"""The poller (service/operator/poller.py): its peering gate (which replica works) and its
stop. Its refreshes and resyncs run against the real kube-apiserver in test_handlers.py."""

from __future__ import annotations


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
