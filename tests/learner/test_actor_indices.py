"""The learner's table of actor indices (learner/actor_indices.py): unique among live actors,
kept across reconnects, handed on once an actor is gone."""

import pytest

from seedrl.learner.actor_indices import ActorIndices, NotYet, actor_of


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_lowest_free_index_unique_and_stable_per_actor():
    clock = Clock()
    table = ActorIndices(hold_seconds=30, clock=clock)
    assert [table.assign(a) for a in ("pod-a", "pod-b", "pod-c")] == [0, 1, 2]
    assert table.assign("pod-b") == 1  # asking again keeps it
    for stream, index in (("pod-a", 0), ("pod-b/0", 1), ("pod-b/1", 1), ("pod-c", 2)):
        assert table.connect(stream, index) == index
    # pod-a goes (scaled down, preempted): its index is held a while, then handed on.
    table.disconnect("pod-a", 0)
    assert table.assign("pod-d") == 3
    assert table.connect("pod-d", 3) == 3
    clock.now += 31
    assert table.assign("pod-e") == 0
    assert table.connect("pod-e", 0) == 0
    # A reconnect within the hold keeps the index; two streams of one actor share it.
    table.disconnect("pod-b/0", 1)
    assert table.connect("pod-b/0", 1) == 1
    assert table.held() == {0: "pod-e", 1: "pod-b", 2: "pod-c", 3: "pod-d"}


def test_a_granted_index_that_never_connects_is_released():
    clock = Clock()
    table = ActorIndices(hold_seconds=10, clock=clock)
    assert table.assign("ghost") == 0
    clock.now += 11
    assert table.assign("real") == 0


def test_a_claimed_index_held_by_another_live_actor_is_replaced():
    table = ActorIndices(clock=Clock())
    assert table.connect("pod-a", 0) == 0
    # After a learner restart two actors claim 0 (it was unique before, so this is rare):
    # the second acts as another index and is told so in its Welcome.
    assert table.connect("pod-b", 0) == 1
    assert table.held() == {0: "pod-a", 1: "pod-b"}


def test_a_resumed_learner_lets_its_actors_reclaim_first():
    clock = Clock()
    table = ActorIndices(reclaim_seconds=15, clock=clock)
    assert table.connect("old", 0) == 0  # reconnecting with its index: accepted at once
    with pytest.raises(NotYet):
        table.assign("new")
    clock.now += 16
    assert table.assign("new") == 1


def test_streams_of_one_actor_belong_to_it():
    assert actor_of("exp-pod-x/3") == "exp-pod-x" and actor_of("exp-pod-x") == "exp-pod-x"


def test_a_replacement_takes_a_gone_actors_index_rather_than_one_past_the_replicas():
    clock = Clock()
    table = ActorIndices(limit=2, hold_seconds=60, clock=clock)
    for actor in ("pod-a", "pod-b"):
        table.connect(actor, table.assign(actor))
    table.disconnect("pod-b", 1)  # preempted: its streams closed
    assert table.assign("pod-c") == 1  # within [0, replicas): R2D2's schedule stays exact
    table.connect("pod-c", 1)
    # Were pod-b only between reconnects, it is told another index in its Welcome.
    assert table.connect("pod-b", 1) == 2
    # More live actors than replicas (scaled up): past the end, still unique.
    assert table.assign("pod-d") == 3
