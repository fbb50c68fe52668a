"""The dynamic batcher groups requests across streams, bounded by size and by wait."""

import threading
import time

import pytest

from seedrl.learner.batcher import BatcherStopped, InferenceBatcher


class Recorder:
    def __init__(self, delay=0.0, fail_on=None):
        self.batches = []
        self.delay = delay
        self.fail_on = fail_on

    def __call__(self, items):
        self.batches.append(list(items))
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError("boom")
        time.sleep(self.delay)
        return [f"out-{i}" for i in items]


def test_groups_concurrent_requests_up_to_the_batch_size():
    rec = Recorder(delay=0.05)
    batcher = InferenceBatcher(rec, max_batch_size=8, max_wait_s=0.5)
    try:
        # 13 requests of 2 env steps each arrive well within the wait.
        first = batcher.submit("first", 2)
        futures = [batcher.submit(i, 2) for i in range(12)]
        assert first.result(5) == "out-first"
        assert [f.result(5) for f in futures] == [f"out-{i}" for i in range(12)]
    finally:
        batcher.stop()
    sizes = [2 * len(b) for b in rec.batches]
    assert max(sizes) <= 8
    assert sizes == [8, 8, 8, 2], sizes  # full batches first; the remainder after the wait
    assert batcher.mean_batch_size == pytest.approx(26 / 4)


def test_partial_batch_runs_after_the_wait():
    rec = Recorder()
    batcher = InferenceBatcher(rec, max_batch_size=64, max_wait_s=0.05)
    try:
        start = time.monotonic()
        assert batcher.submit("lonely", 4).result(5) == "out-lonely"
        waited = time.monotonic() - start
    finally:
        batcher.stop()
    assert rec.batches == [["lonely"]]
    assert waited >= 0.04  # it did wait for company before running alone


def test_request_larger_than_the_batch_runs_alone():
    rec = Recorder(delay=0.05)
    batcher = InferenceBatcher(rec, max_batch_size=4, max_wait_s=0.2)
    try:
        blocker = batcher.submit("a", 1)
        big = batcher.submit("big", 10)
        small = batcher.submit("b", 1)
        assert [f.result(5) for f in (blocker, big, small)] == ["out-a", "out-big", "out-b"]
    finally:
        batcher.stop()
    assert ["big"] in rec.batches


def test_a_failing_batch_fails_only_its_own_requests():
    rec = Recorder(fail_on="bad")
    batcher = InferenceBatcher(rec, max_batch_size=1, max_wait_s=0.0)
    try:
        bad = batcher.submit("bad", 1)
        with pytest.raises(ValueError, match="boom"):
            bad.result(5)
        assert batcher.submit("good", 1).result(5) == "out-good"
    finally:
        batcher.stop()


def test_stop_fails_pending_and_later_requests():
    started = threading.Event()
    release = threading.Event()

    def slow(items):
        started.set()
        release.wait(5)
        return items

    batcher = InferenceBatcher(slow, max_batch_size=1, max_wait_s=0.0)
    running = batcher.submit("running", 1)
    assert started.wait(5)
    waiting = batcher.submit("waiting", 1)
    stopper = threading.Thread(target=batcher.stop)
    stopper.start()
    release.set()
    stopper.join(5)
    assert running.result(5) == "running"
    with pytest.raises(BatcherStopped):
        waiting.result(5)
    with pytest.raises(BatcherStopped):
        batcher.submit("late", 1).result(5)


def test_a_cancelled_request_is_skipped_and_the_batcher_keeps_serving():
    gate = threading.Event()

    def process(items):
        gate.wait(5)
        return [f"out-{i}" for i in items]

    batcher = InferenceBatcher(process, max_batch_size=1, max_wait_s=0.0)
    try:
        busy = batcher.submit("busy", 1)
        gone = batcher.submit("gone", 1)
        assert gone.cancel()  # its stream disconnected while it waited
        gate.set()
        assert busy.result(5) == "out-busy"
        assert batcher.submit("next", 1).result(5) == "out-next"
        assert batcher.batches == 2
    finally:
        batcher.stop()


def test_a_batch_closes_once_every_open_env_waits():
    # A long max wait that a batch of every open env must not sit out.
    rec = Recorder()
    batcher = InferenceBatcher(rec, max_batch_size=64, max_wait_s=30.0)
    batcher.open_envs = 6
    try:
        futures = [batcher.submit(name, 2) for name in ("a", "b", "c")]
        assert [f.result(10) for f in futures] == ["out-a", "out-b", "out-c"]
    finally:
        batcher.stop()
    assert rec.batches == [["a", "b", "c"]]


def test_requests_from_an_event_loop_get_futures_of_that_loop():
    import asyncio

    rec = Recorder()
    batcher = InferenceBatcher(rec, max_batch_size=4, max_wait_s=30.0)

    async def main():
        loop = asyncio.get_running_loop()
        futures = [batcher.submit(i, 1, loop) for i in range(4)]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        # The second batch cannot be full before its last request: "gone" is cancelled (its
        # stream went away) while it waits, and is skipped; the others are still served.
        gone = batcher.submit("gone", 1, loop)
        gone.cancel()
        rest = [batcher.submit(name, 1, loop) for name in ("x", "y", "z")]
        return await asyncio.wait_for(asyncio.gather(*futures, *rest), 10)

    try:
        assert asyncio.run(main()) == [
            "out-0",
            "out-1",
            "out-2",
            "out-3",
            "out-x",
            "out-y",
            "out-z",
        ]
    finally:
        batcher.stop()
    assert rec.batches == [[0, 1, 2, 3], ["x", "y", "z"]]
