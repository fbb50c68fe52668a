"""Prioritized replay of fixed-shape items (R2D2's sequences), with a sum tree for sampling.

Items are dicts of arrays with fixed per-item shapes, stored in preallocated numpy arrays of
``[capacity, ...]`` (pages are only touched when written, so a large capacity costs memory as it
fills). The oldest item is overwritten first. Sampling is proportional to ``priority **
priority_exponent``, stratified over ``batch_size`` equal segments of the total mass, with
importance-sampling weights ``(size * P(i)) ** -importance_exponent`` divided by the batch's
largest weight (Schaul et al. 2016).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np


class SumTree:
    """A binary tree whose leaves hold non-negative values and whose nodes hold sums.

    Args:
      capacity: the number of leaves.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._leaves = 1
        while self._leaves < capacity:
            self._leaves *= 2
        self._tree = np.zeros(2 * self._leaves, np.float64)

    @property
    def total(self) -> float:
        """The sum of every leaf."""
        return float(self._tree[1])

    def get(self, indices) -> np.ndarray:
        """The values of the given leaves."""
        return self._tree[np.asarray(indices) + self._leaves]

    def set(self, indices, values) -> None:
        """Sets leaves and updates the sums above them (vectorised; repeated indices keep the
        last value)."""
        values = np.asarray(values, np.float64)
        if np.any(values < 0) or not np.all(np.isfinite(values)):
            raise ValueError("sum tree values must be finite and non-negative")
        nodes = np.asarray(indices, np.int64) + self._leaves
        self._tree[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, targets) -> np.ndarray:
        """For each target mass in [0, total), the leaf where the running sum passes it."""
        targets = np.array(targets, np.float64)
        nodes = np.ones(targets.shape, np.int64)
        while nodes[0] < self._leaves:
            left = 2 * nodes
            left_sum = self._tree[left]
            go_right = targets >= left_sum
            targets = np.where(go_right, targets - left_sum, targets)
            nodes = left + go_right
        # Rounding can step past the last non-empty leaf; clamp into the filled range.
        return np.minimum(nodes - self._leaves, self.capacity - 1)


class PrioritizedReplay:
    """A FIFO of fixed-shape items sampled in proportion to their priority.

    Thread-safe: the learner's inference side adds while its trainer samples.

    Args:
      capacity: the most items held.
      fields: name -> (per-item shape, dtype) of every array of an item.
      priority_exponent: alpha; 0 samples uniformly.
      importance_exponent: beta of the importance-sampling weights; 0 disables them.
    """

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, tuple[tuple[int, ...], np.dtype]],
        priority_exponent: float,
        importance_exponent: float,
    ):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.priority_exponent = priority_exponent
        self.importance_exponent = importance_exponent
        self._data = {
            name: np.zeros((capacity,) + tuple(shape), dtype)
            for name, (shape, dtype) in fields.items()
        }
        self._tree = SumTree(capacity)
        self._next = 0
        self._size = 0
        self._added = 0
        self._max_priority = 1.0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    @property
    def added(self) -> int:
        """Items added since creation (or since the restored state was saved)."""
        return self._added

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays when full."""
        return sum(a.nbytes for a in self._data.values())

    def add(self, items: Mapping[str, np.ndarray], priorities=None) -> np.ndarray:
        """Adds n items (arrays [n, ...] per field); returns their slots.

        Items without a priority get the largest seen so far, so new data is sampled soon.
        """
        n = len(next(iter(items.values())))
        if priorities is None:
            priorities = np.full(n, self._max_priority)
        priorities = np.asarray(priorities, np.float64)
        with self._lock:
            slots = (self._next + np.arange(n)) % self.capacity
            for name, array in self._data.items():
                array[slots] = items[name]
            self._set_priorities(slots, priorities)
            self._next = int((self._next + n) % self.capacity)
            self._size = min(self.capacity, self._size + n)
            self._added += n
        return slots

    def sample(self, batch_size: int, rng: np.random.Generator):
        """Samples a batch.

        Returns:
          slots [batch], items as a dict of arrays [batch, ...] (copies), and importance
          weights [batch] float32 in (0, 1].
        """
        with self._lock:
            if self._size == 0:
                raise ValueError("cannot sample from an empty replay")
            total = self._tree.total
            bounds = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
            slots = self._tree.find(bounds)
            slots = np.minimum(slots, self._size - 1)
            mass = self._tree.get(slots)
            items = {name: array[slots] for name, array in self._data.items()}
            probs = np.maximum(mass / total, 1e-12)
            weights = (self._size * probs) ** -self.importance_exponent
            weights = (weights / weights.max()).astype(np.float32)
        return slots, items, weights

    def update_priorities(self, slots, priorities) -> None:
        """Sets the priorities of sampled slots (e.g. from their new TD errors)."""
        with self._lock:
            self._set_priorities(np.asarray(slots), np.asarray(priorities, np.float64))

    def _set_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        priorities = np.maximum(priorities, 1e-6)  # never unsampleable
        self._max_priority = max(self._max_priority, float(priorities.max()))
        self._tree.set(slots, priorities**self.priority_exponent)

    def state(self) -> dict[str, np.ndarray]:
        """The whole replay as plain arrays (for a checkpoint; no pickle)."""
        with self._lock:
            out = {f"data/{k}": v[: self._size].copy() for k, v in self._data.items()}
            out["priorities"] = self._tree.get(np.arange(self._size)).copy()
            out["cursor"] = np.array([self._next, self._size, self._added], np.int64)
            out["max_priority"] = np.array([self._max_priority])
        return out

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restores what :meth:`state` returned (the same capacity and fields)."""
        nxt, size, added = (int(x) for x in state["cursor"])
        if size > self.capacity:
            raise ValueError(f"saved replay holds {size} items; capacity is {self.capacity}")
        with self._lock:
            for k, v in self._data.items():
                v[:size] = state[f"data/{k}"]
            self._tree = SumTree(self.capacity)
            if size:
                self._tree.set(np.arange(size), state["priorities"])
            self._next, self._size, self._added = nxt % self.capacity, size, added
            self._max_priority = float(state["max_priority"][0])
