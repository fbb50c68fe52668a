"""What counts toward a run's budget and target (seedrl.learner.progress), checked against
ground truths over every actor index: every step counts, no single index decides the target."""

import itertools

import numpy as np
import pytest

from seedrl.learner.progress import RESTORED, ReturnWindow, StepLedger
from support.learner_harness import Stream, hello, step


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("seed", range(20))
def test_the_ledger_counts_every_step_of_every_index_whatever_their_order(seed):
    rng = np.random.default_rng(seed)
    ledger = StepLedger(before=int(rng.integers(0, 1000)))
    steps: dict[int, int] = {}
    for _ in range(int(rng.integers(1, 60))):
        index = int(rng.integers(0, 5))
        n = int(rng.integers(1, 4097))
        ledger.add(index, n)
        steps[index] = steps.get(index, 0) + n
        assert ledger.counted == ledger.before + sum(steps.values())
    assert ledger.by_index() == steps


def test_an_index_that_stops_sending_caps_no_other():
    # Issue 41: index 1 sent 164 steps and left; index 0 went on alone. The count went on too.
    ledger = StepLedger()
    ledger.add(0, 164)
    ledger.add(1, 164)
    for _ in range(1000):
        ledger.add(0, 4)
    assert ledger.counted == 164 + 164 + 4000


def test_a_resumed_count_carries_on():
    ledger = StepLedger(before=5000)
    ledger.add(3, 700)
    ledger.add(3, 300)
    assert ledger.counted == 6000


def test_the_ledger_knows_which_other_index_of_a_kind_streamed_since_when():
    clock = Clock()
    ledger = StepLedger(clock=clock)
    ledger.add(0, 4)
    clock.now += 1
    ledger.add(1, 4, evaluation=True)
    assert ledger.streamed_since(1, 100.0, evaluation=False)  # index 0, training, at 100
    assert not ledger.streamed_since(0, 100.0, evaluation=False)  # only itself
    assert not ledger.streamed_since(1, 100.0, evaluation=True)  # only itself among evaluators
    assert not ledger.streamed_since(1, 100.5, evaluation=False)  # index 0 streamed before


def reaches_ground_truth(items, maxlen, target, others_since):
    """Ground truth of ReturnWindow.reaches from its definition, by brute force."""
    items = items[-maxlen:]
    if len(items) < maxlen:
        return False
    values = np.array([v for v, _ in items])
    if values.mean() < target:
        return False
    sources = {s for _, s in items}
    if len(sources) == 1:
        return not others_since(next(iter(sources)))
    for s in sources:
        rest = [v for v, src in items if src != s]
        if np.mean(rest) < target:
            return False
    return True


@pytest.mark.parametrize("seed", range(40))
def test_the_window_reaches_its_target_only_without_any_one_source_deciding(seed):
    rng = np.random.default_rng(seed)
    maxlen = int(rng.integers(1, 12))
    window = ReturnWindow(maxlen)
    items = []
    lone_other = bool(rng.integers(0, 2))
    for _ in range(int(rng.integers(0, 30))):
        value, source = float(rng.integers(0, 500)), int(rng.integers(0, 3))
        window.append(value, source)
        items.append((value, source))
        target = float(rng.integers(0, 500))
        got = window.reaches(target, lambda index, since: lone_other)
        assert got == reaches_ground_truth(items, maxlen, target, lambda s: lone_other)


def test_forged_episodes_beside_real_ones_do_not_reach_the_target():
    window = ReturnWindow(100)
    for i in range(60):
        window.append(30.0, i % 2)  # two real actors, early in training
    for _ in range(40):
        window.append(499.0, 9)  # one hostile stream
    assert np.mean(list(window)) < 475
    window = ReturnWindow(100)
    for i in range(10):
        window.append(400.0, i % 2)
    for _ in range(90):
        window.append(1e6, 9)  # made-up returns, far above the real ones
    assert np.mean(list(window)) >= 475
    assert not window.reaches(475, lambda index, since: True)  # the real ones fall short
    for i in range(100):
        window.append(480.0, i % 2)
    assert window.reaches(475, lambda index, since: True)  # both real actors reach it


def test_a_window_of_one_source_decides_only_if_no_other_actor_streamed_meanwhile():
    window = ReturnWindow(3)
    for _ in range(3):
        window.append(499.0, 9)
    asked = []

    def others(index, since):
        asked.append((index, since))
        return True

    assert not window.reaches(475, others)
    assert asked == [(9, window.since)]
    assert window.reaches(475, lambda index, since: False)  # a lone actor decides its run


def test_restored_returns_count_as_a_source_of_their_own():
    window = ReturnWindow(4)
    window.extend([500.0, 500.0])
    window.append(500.0, 0)
    window.append(500.0, 0)
    assert [s for _, s, _ in window._items] == [RESTORED, RESTORED, 0, 0]
    assert window.reaches(475, lambda index, since: True)
    window.append(10.0, 0)  # actor 0's own mean falls below the target
    assert not window.reaches(475, lambda index, since: True)


def test_the_window_behaves_as_the_deque_it_replaces():
    window = ReturnWindow(3)
    window.extend([1.0, 2.0])
    window.append(3.0, 0)
    window.append(4.0, 1)
    assert list(window) == [2.0, 3.0, 4.0] and len(window) == 3 and window.full
    assert window.maxlen == 3 and bool(window)
    window.clear()
    assert not window and window.since is None
    assert list(itertools.islice(window, 1)) == []


# -- the count of a real learner over gRPC, as actors join and leave (issue 41) -------------


class Actor:
    """A client stream of the test's: says hello with an index, steps, leaves; counts what it
    sent and what the learner answered."""

    def __init__(self, learner, actor_id, index, num_envs=4):
        self.stream = Stream(learner.address)
        self.stream.send(hello(actor_id=actor_id, num_envs=num_envs, actor_index=index))
        reply = self.stream.recv()
        assert reply.WhichOneof("kind") == "welcome", reply
        self.index = reply.welcome.actor_index
        self.num_envs = num_envs
        self.sent = 0

    def steps(self, n):
        for _ in range(n):
            self.stream.send(step(self.num_envs))
            reply = self.stream.recv()
            assert reply.WhichOneof("kind") == "actions", reply
            self.sent += self.num_envs
        return self

    def leave(self):
        self.stream.close()
        return self.sent


def test_an_actor_scaled_up_then_down_leaves_the_count_going(learner):
    a = Actor(learner, "a", 0).steps(30)
    b = Actor(learner, "b", 1).steps(41)
    sent = b.leave()
    a.steps(200)
    assert learner.runtime.env_steps == a.sent + sent == 4 * (30 + 41 + 200)


def test_a_new_index_replacing_an_old_one_counts_both(learner):
    old = Actor(learner, "pod-old", 0).steps(50)
    sent = old.leave()
    new = Actor(learner, "pod-new", 1).steps(120)
    assert learner.runtime.env_steps == sent + new.sent


def test_an_index_claimed_twice_counts_both_actors(learner):
    a = Actor(learner, "a", 0).steps(10)
    b = Actor(learner, "b", 0)  # held by a live actor: it acts as another index
    assert b.index != a.index
    sent = b.steps(41).leave()
    a.steps(100)
    assert learner.runtime.env_steps == a.sent + sent


def test_a_client_that_leaves_after_one_step_caps_nothing(learner):
    a = Actor(learner, "a", 0).steps(5)
    sent = Actor(learner, "b", 1).steps(1).leave()
    a.steps(300)
    assert learner.runtime.env_steps == a.sent + sent


@pytest.mark.parametrize("seed", range(4))
def test_random_joins_leaves_and_steps_count_every_step_sent(learner, seed):
    rng = np.random.default_rng(seed)
    live: list[Actor] = []
    sent = joined = 0
    for _ in range(60):
        op = rng.choice(["join", "step", "step", "step", "leave"])
        if op == "join" or not live:
            # Any index: a free one, one another live actor holds, or one a left actor held.
            actor = Actor(
                learner,
                f"actor-{joined}",
                int(rng.integers(0, 4)),
                num_envs=int(rng.integers(1, 9)),
            )
            live.append(actor)
            joined += 1
        elif op == "step":
            actor = live[int(rng.integers(0, len(live)))]
            before = actor.sent
            actor.steps(int(rng.integers(1, 40)))
            sent += actor.sent - before
        else:
            live.pop(int(rng.integers(0, len(live)))).leave()
        # The count follows every answered step at once (it is taken before the answer).
        assert learner.runtime.env_steps == sent
    for actor in live:
        actor.leave()
    assert learner.runtime.env_steps == sent
