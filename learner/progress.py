"""What counts toward a run's budget and target: every accepted step, and no single actor's
episodes alone.

The learner cannot check an environment's dynamics: a stream that sends made-up observations,
rewards and episodes that add up is indistinguishable, message by message, from a real actor.
What it can check is where each step and episode came from (the actor index it granted or
confirmed) and how each actor compares with the others. Two rules follow:

- **Env steps** (``spec.budget.maxEnvSteps``): every env step the learner accepted counts, from
  every stream that ever joined, in whatever order actors join and leave (a scale-up and back
  down, a pod replaced under a new index, two actors claiming one index). What bounds a single
  stream is the protocol, not the count: a stream has at most one step in flight and each step
  waits for the batch it joined, so a stream within the hello's caps steps at most once per
  inference batch, no more often than a real actor's stream that keeps up. (An earlier rule
  counted no index beyond the busiest other index's steps: a late joiner, or one that left,
  then capped every other index at its own few steps for the rest of the run.)
- **Target return** (``spec.budget.targetReturn``): the mean of the last ``returnWindow``
  episodes must reach the target, and so must the mean of the window without any one actor
  index's episodes. Where the window holds one index's episodes only, it decides alone only
  if no other index of that kind (training or evaluation) has streamed since the window's
  first episode: a lone actor decides its own run, a flood beside real actors decides nothing.

Both are pure bookkeeping, fed from the event loop (steps, episodes) and read by the budget
check; they hold one entry per actor index and one per windowed episode.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator

#: The source of returns restored from a checkpoint: an actor index of its own.
RESTORED = -1


class StepLedger:
    """Env steps per actor index, and the count the budget is judged on.

    Args:
      before: steps counted before this learner process (a resumed run's checkpoint).
      clock: the monotonic clock (tests pass their own).
    """

    def __init__(self, before: int = 0, clock: Callable[[], float] = time.monotonic):
        self.before = before
        self.total = 0
        self._clock = clock
        self._by_index: dict[int, int] = {}
        # index -> (when it last sent steps, whether it is an evaluation actor)
        self._last: dict[int, tuple[float, bool]] = {}

    def add(
        self, index: int, steps: int, evaluation: bool = False, now: float | None = None
    ) -> None:
        """Records ``steps`` env steps of the actor holding ``index`` (at monotonic time
        ``now``, read from the clock when not given)."""
        self.total += steps
        self._by_index[index] = self._by_index.get(index, 0) + steps
        self._last[index] = (self._clock() if now is None else now, evaluation)

    def streamed_since(self, index: int, since: float, evaluation: bool) -> bool:
        """Whether an actor index other than ``index``, of the kind ``evaluation`` says, sent
        env steps at or after monotonic time ``since``."""
        return any(
            i != index and kind == evaluation and when >= since
            for i, (when, kind) in self._last.items()
        )

    @property
    def counted(self) -> int:
        """Env steps that count toward the budget: every step accepted in this process, and
        those restored from the run's checkpoint."""
        return self.before + self.total

    def by_index(self) -> dict[int, int]:
        """index -> env steps received from it in this process."""
        return dict(self._by_index)


class ReturnWindow:
    """The last ``maxlen`` episode returns, each with the actor index it came from.

    Behaves as the deque of floats it replaces (``append``, ``extend``, ``clear``, ``len``,
    iteration, ``maxlen``); returns added without a source (a checkpoint's) are
    :data:`RESTORED`.

    Args:
      maxlen: ``spec.budget.returnWindow``.
      clock: the monotonic clock (tests pass their own).
    """

    def __init__(self, maxlen: int, clock: Callable[[], float] = time.monotonic):
        self.maxlen = maxlen
        self._clock = clock
        self._items: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=maxlen)

    def append(self, value: float, source: int = RESTORED) -> None:
        """Adds one episode's return from the actor index ``source``."""
        self._items.append((float(value), source, self._clock()))

    def extend(self, values: Iterable[float]) -> None:
        """Adds returns restored from a checkpoint."""
        for value in values:
            self.append(value)

    def clear(self) -> None:
        """Forgets every return."""
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[float]:
        return (value for value, _, _ in self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def full(self) -> bool:
        """Whether the window holds ``maxlen`` returns."""
        return len(self._items) == self.maxlen

    @property
    def since(self) -> float | None:
        """When the window's oldest return arrived (monotonic), None while empty."""
        return self._items[0][2] if self._items else None

    def reaches(self, target: float, others_streamed_since: Callable[[int, float], bool]) -> bool:
        """Whether the window is full and reaches ``target`` without any single source
        deciding it (see the module docstring).

        Args:
          target: ``spec.budget.targetReturn``.
          others_streamed_since: ``(index, t)`` -> whether an actor index other than
            ``index``, of this window's kind, sent env steps at or after monotonic time ``t``.
        """
        if not self.full:
            return False
        sums: dict[int, float] = {}
        counts: dict[int, int] = {}
        total = 0.0
        for value, source, _ in self._items:
            total += value
            sums[source] = sums.get(source, 0.0) + value
            counts[source] = counts.get(source, 0) + 1
        n = len(self._items)
        if not total / n >= target:
            return False
        if len(sums) == 1:
            (source,) = sums
            return not others_streamed_since(source, self._items[0][2])
        return all((total - sums[s]) / (n - counts[s]) >= target for s in sums)
