"""The poller's peering gate: which replica works (service/operator/poller.py). The poller's
refreshes and resyncs run against the emulated cluster in test_handlers.py."""

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
