"""The sum tree and prioritized replay against NumPy, and their checkpointable state."""

import numpy as np
import pytest

from seedrl.learner.replay import PrioritizedReplay, SumTree

FIELDS = {"obs": ((3, 2), np.dtype(np.uint8)), "reward": ((3,), np.dtype(np.float32))}


def _items(start, n):
    ids = np.arange(start, start + n)
    return {
        "obs": np.broadcast_to(ids[:, None, None] % 256, (n, 3, 2)).astype(np.uint8),
        "reward": np.broadcast_to(ids[:, None], (n, 3)).astype(np.float32),
    }


def test_sum_tree_matches_cumsum_search():
    rng = np.random.default_rng(0)
    tree = SumTree(37)
    values = rng.random(37) * 10
    tree.set(np.arange(37), values)
    assert tree.total == pytest.approx(values.sum())
    targets = rng.random(500) * values.sum()
    want = np.searchsorted(np.cumsum(values), targets, side="right")
    np.testing.assert_array_equal(tree.find(targets), want)
    values[[3, 20]] = [0.0, 50.0]
    tree.set([3, 20], [0.0, 50.0])
    assert tree.total == pytest.approx(values.sum())
    np.testing.assert_array_equal(tree.get([3, 20]), [0.0, 50.0])
    with pytest.raises(ValueError):
        tree.set([0], [-1.0])


def test_sampling_follows_priorities_to_the_exponent():
    replay = PrioritizedReplay(4, FIELDS, priority_exponent=0.5, importance_exponent=0.0)
    replay.add(_items(0, 4), priorities=[1.0, 4.0, 9.0, 16.0])
    rng = np.random.default_rng(1)
    counts = np.zeros(4)
    for _ in range(500):
        slots, items, _ = replay.sample(32, rng)
        counts += np.bincount(slots, minlength=4)
        np.testing.assert_array_equal(items["reward"][:, 0], slots)
    want = np.array([1, 2, 3, 4]) / 10
    np.testing.assert_allclose(counts / counts.sum(), want, atol=0.01)


def test_importance_weights():
    replay = PrioritizedReplay(8, FIELDS, priority_exponent=1.0, importance_exponent=0.6)
    priorities = np.array([1.0, 2.0, 3.0, 4.0])
    replay.add(_items(0, 4), priorities=priorities)
    slots, _, weights = replay.sample(64, np.random.default_rng(2))
    probs = priorities / priorities.sum()
    raw = (4 * probs[slots]) ** -0.6
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-5)
    assert weights.dtype == np.float32 and weights.max() == pytest.approx(1.0)


def test_fifo_overwrites_the_oldest_and_new_items_get_the_max_priority():
    replay = PrioritizedReplay(5, FIELDS, priority_exponent=1.0, importance_exponent=0.0)
    replay.add(_items(0, 3), priorities=[1.0, 7.0, 1.0])
    replay.add(_items(3, 4))
    assert len(replay) == 5 and replay.added == 7
    slots, items, _ = replay.sample(200, np.random.default_rng(3))
    stored = set(items["reward"][:, 0].astype(int).tolist())
    assert stored <= {2, 3, 4, 5, 6} and {3, 4, 5, 6} <= stored
    # Items 3..6 arrived without priorities: they got the largest seen so far (7); item 2
    # keeps its own. Slots 0 and 1 were reused for items 5 and 6.
    counts = np.bincount(replay.sample(4000, np.random.default_rng(4))[0], minlength=5)
    np.testing.assert_allclose(counts / 4000, np.array([7, 7, 1, 7, 7]) / 29, atol=0.02)
    replay.update_priorities([0], [0.5])
    counts = np.bincount(replay.sample(4000, np.random.default_rng(5))[0], minlength=5)
    np.testing.assert_allclose(counts / 4000, np.array([0.5, 7, 1, 7, 7]) / 22.5, atol=0.02)


def test_state_round_trip_restores_items_priorities_and_cursor():
    replay = PrioritizedReplay(6, FIELDS, priority_exponent=0.9, importance_exponent=0.6)
    replay.add(_items(0, 8), priorities=np.arange(1, 9))
    state = replay.state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    other = PrioritizedReplay(6, FIELDS, priority_exponent=0.9, importance_exponent=0.6)
    other.load_state(state)
    assert len(other) == 6 and other.added == 8
    a = replay.sample(16, np.random.default_rng(4))
    b = other.sample(16, np.random.default_rng(4))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1]["obs"], b[1]["obs"])
    np.testing.assert_allclose(a[2], b[2])
    other.add(_items(100, 1))
    assert other.sample(64, np.random.default_rng(5))[1]["reward"][:, 0].max() == 100
    too_small = PrioritizedReplay(3, FIELDS, priority_exponent=0.9, importance_exponent=0.6)
    with pytest.raises(ValueError, match="capacity"):
        too_small.load_state(state)


def test_empty_replay_refuses_to_sample():
    replay = PrioritizedReplay(2, FIELDS, priority_exponent=0.9, importance_exponent=0.6)
    with pytest.raises(ValueError, match="empty"):
        replay.sample(1, np.random.default_rng(0))
