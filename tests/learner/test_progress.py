"""No single actor decides a run's budget or target (seedrl.learner.progress), checked against
brute-force ground truths over every actor index."""

import itertools

import numpy as np
import pytest

from seedrl.learner.progress import RESTORED, ReturnWindow, StepLedger


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def fair_share(steps: dict[int, int]) -> int:
    """Ground truth: each index counts up to the busiest *other* index (alone: in full)."""
    if len(steps) < 2:
        return sum(steps.values())
    return sum(min(s, max(v for j, v in steps.items() if j != i)) for i, s in steps.items())


@pytest.mark.parametrize("seed", range(20))
def test_the_ledger_counts_each_index_up_to_the_busiest_other_one(seed):
    rng = np.random.default_rng(seed)
    ledger = StepLedger(before=int(rng.integers(0, 1000)))
    steps: dict[int, int] = {}
    for _ in range(int(rng.integers(1, 60))):
        index = int(rng.integers(0, 5))
        n = int(rng.integers(1, 4097))
        ledger.add(index, n)
        steps[index] = steps.get(index, 0) + n
        assert ledger.counted == ledger.before + fair_share(steps)
        assert ledger.total - ledger.excess == fair_share(steps)
    assert ledger.by_index() == steps


def test_a_flooding_actor_counts_as_one_more_actor_at_most():
    ledger = StepLedger()
    ledger.add(0, 10_000)
    ledger.add(1, 12_000)
    ledger.add(7, 1_500_000)  # 4,096 envs of zeros, as fast as inference answers
    assert ledger.counted == 10_000 + 12_000 + 12_000
    assert ledger.excess == 1_500_000 - 12_000


def test_an_actor_alone_counts_in_full_and_a_resumed_count_carries_on():
    ledger = StepLedger(before=5000)
    ledger.add(3, 700)
    ledger.add(3, 300)
    assert ledger.counted == 6000 and ledger.excess == 0


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
