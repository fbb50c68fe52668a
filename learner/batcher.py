"""Dynamic batching of inference requests from many actor streams.

Each actor stream submits one request per step of its K environments. A single batcher thread
groups requests until they hold ``max_batch_size`` environment steps, or every env of the open
streams it serves is waiting (no other request can come), or ``max_wait_s`` has passed since it
picked up the first request of the batch; then it hands the whole group to one call of
``process``. Unlike SEED's full-batch-only op, a partial batch still runs after the wait, so a
lone actor never stalls. A request larger than the batch size runs on its own.

Hand-offs are per batch, not per request (profiled: with 1,000 streams the per-request thread
wake-ups and future callbacks cost more learner CPU than inference did):

- ``submit`` appends under a lock and wakes the batcher thread only when it has to: for the
  first request while the thread idles, or when the batch is ready;
- a request submitted from an asyncio event loop gets an asyncio future, and all of a batch's
  futures of one loop are resolved by a single ``call_soon_threadsafe``; other callers get a
  ``concurrent.futures.Future``.

The batcher runs in its own thread (not on the gRPC event loop) so TensorFlow can release the GIL
while the event loop keeps reading and decoding messages from other streams.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


class BatcherStopped(RuntimeError):
    """Raised into the futures of requests that were pending when the batcher stopped."""


class _Pending:
    __slots__ = ("item", "size", "future", "loop")

    def __init__(self, item: Any, size: int, future, loop):
        self.item = item
        self.size = size
        self.future = future
        self.loop = loop  # None for a concurrent.futures.Future


def _settle(outcomes: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """Resolves asyncio futures on their loop (a stream that went away cancelled its own)."""
    for future, result, exc in outcomes:
        if future.done():
            continue
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)


class InferenceBatcher:
    """Groups submitted items into batches and runs ``process`` on each batch in one thread.

    Args:
      process: called with a list of items; returns one result per item, in order. An exception
        fails every future of that batch (and only that batch).
      max_batch_size: most environment steps (summed item sizes) in one batch.
      max_wait_s: longest time the first item of a batch waits for more items.
      name: the batcher thread's name.
      on_batch: called after each processed batch with its size (env steps) and the seconds
        ``process`` took (metrics).
    """

    def __init__(
        self,
        process: Callable[[list[Any]], Sequence[Any]],
        max_batch_size: int,
        max_wait_s: float,
        name: str = "inference-batcher",
        on_batch: Callable[[int, float], None] | None = None,
    ):
        self._process = process
        self._on_batch = on_batch
        self._max_batch = max(1, int(max_batch_size))
        self._max_wait = max(0.0, float(max_wait_s))
        self._cond = threading.Condition(threading.Lock())
        self._pending: collections.deque[_Pending] = collections.deque()
        self._pending_size = 0
        # What the batcher thread waits for: "first" (any request), "fill" (a ready batch or
        # the deadline) or None (it is busy and looks at the queue when it is done).
        self._waiting: str | None = None
        self._stopped = False
        #: Env steps that the open streams of this batcher can have waiting at once (kept by
        #: the runtime; 0 = unknown): once that many wait, no request can join the batch.
        self.open_envs = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.batches = 0  # batches processed
        self.items = 0  # env steps processed
        self.requests = 0  # requests processed
        self._thread.start()

    def submit(self, item: Any, size: int, loop: asyncio.AbstractEventLoop | None = None):
        """Queues one item holding ``size`` env steps; the future resolves to its result.

        With ``loop`` (the running loop of the calling thread) the future is an asyncio future
        of that loop, resolved there; otherwise a ``concurrent.futures.Future``.
        """
        future: asyncio.Future | concurrent.futures.Future = (
            loop.create_future() if loop is not None else concurrent.futures.Future()
        )
        pending = _Pending(item, size, future, loop)
        with self._cond:
            if self._stopped:
                self._fail_now(pending)
                return future
            self._pending.append(pending)
            self._pending_size += size
            if self._waiting == "first" or (self._waiting == "fill" and self._ready()):
                self._cond.notify()
        return future

    @property
    def mean_batch_size(self) -> float:
        """Mean env steps per processed batch so far."""
        return self.items / self.batches if self.batches else 0.0

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the thread; pending requests fail with BatcherStopped."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout)

    def _ready(self) -> bool:
        size = self._pending_size
        return size >= self._max_batch or 0 < self.open_envs <= size

    def _collect(self) -> list[_Pending]:
        with self._cond:
            while not self._pending and not self._stopped:
                self._waiting = "first"
                self._cond.wait()
            deadline = time.monotonic() + self._max_wait
            while not self._stopped and not self._ready():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._waiting = "fill"
                self._cond.wait(remaining)
            self._waiting = None
            if self._stopped:
                return []
            first = self._pending.popleft()
            batch, total = [first], first.size
            while self._pending and total + self._pending[0].size <= self._max_batch:
                p = self._pending.popleft()
                batch.append(p)
                total += p.size
            self._pending_size -= total
            return batch

    def _run(self) -> None:
        while True:
            batch = self._collect()
            if not batch:
                break
            # A stream that went away cancels its future; from RUNNING on, none can be.
            batch = [
                p
                for p in batch
                if (
                    not p.future.cancelled()
                    if p.loop is not None
                    else p.future.set_running_or_notify_cancel()
                )
            ]
            if not batch:
                continue
            try:
                start = time.perf_counter()
                results = self._process([p.item for p in batch])
                seconds = time.perf_counter() - start
                if len(results) != len(batch):
                    raise RuntimeError(
                        f"process returned {len(results)} results for {len(batch)} items"
                    )
            except BaseException as exc:  # forwarded to the waiting streams
                log.exception("inference batch failed")
                self._resolve(batch, None, exc)
                continue
            self.batches += 1
            size = sum(p.size for p in batch)
            self.items += size
            self.requests += len(batch)
            if self._on_batch is not None:
                self._on_batch(size, seconds)
            self._resolve(batch, results, None)
        self._drain()

    def _resolve(
        self, batch: list[_Pending], results: Sequence[Any] | None, exc: BaseException | None
    ) -> None:
        """Sets every future of a batch: one event-loop callback per loop, not per future."""
        by_loop: dict[Any, list] = {}
        for i, p in enumerate(batch):
            result = None if results is None else results[i]
            if p.loop is None:
                if not p.future.done():
                    if exc is None:
                        p.future.set_result(result)
                    else:
                        p.future.set_exception(exc)
            else:
                by_loop.setdefault(p.loop, []).append((p.future, result, exc))
        for loop, outcomes in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, outcomes)
            except RuntimeError:  # the loop is closed: nobody waits for these any more
                pass

    @staticmethod
    def _fail_now(pending: _Pending) -> None:
        # Called from submit, i.e. on the future's own loop thread when it has one.
        pending.future.set_exception(BatcherStopped("the learner is shutting down"))

    def _drain(self) -> None:
        with self._cond:
            leftovers = list(self._pending)
            self._pending.clear()
            self._pending_size = 0
        if leftovers:
            self._resolve(leftovers, None, BatcherStopped("the learner is shutting down"))
