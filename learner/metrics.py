"""The learner's Prometheus metrics.

Two kinds: histograms observed as things happen (one observation per inference batch and per
finished episode, about a microsecond each), and everything else read from the runtime when
Prometheus scrapes (counters, depths, losses, checkpoint age), so the hot loop pays nothing for
them. Every series carries the ``experiment`` label; names carry their unit.
"""

from __future__ import annotations

import collections
import time

import numpy as np

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from seedrl.common import metrics as declared
from seedrl.common.metrics import RATE_WINDOW_S

#: Inference batches are counted in env steps.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
#: Returns span games from Pong (-21..21) to CartPole (500) and MuJoCo (thousands).
RETURN_BUCKETS = (
    -1000,
    -300,
    -100,
    -30,
    -10,
    -3,
    -1,
    0,
    1,
    3,
    10,
    30,
    100,
    200,
    300,
    400,
    500,
    1000,
    3000,
    10000,
)
LENGTH_BUCKETS = (10, 30, 100, 200, 300, 500, 1000, 3000, 10000, 30000, 100000)


class LearnerMetrics:
    """Registers and serves the learner's metrics for one runtime.

    Args:
      runtime: the :class:`seedrl.learner.runtime.LearnerRuntime` to report on.
      checkpointer: its checkpointer, if any (checkpoint age, duration, failures).
      registry: where to register (a fresh one by default).
      write_failures: the failed writes of its files, if any
        (:class:`seedrl.learner.run_files.WriteFailures`).
    """

    def __init__(
        self,
        runtime,
        checkpointer=None,
        registry: CollectorRegistry | None = None,
        write_failures=None,
    ):
        self.runtime = runtime
        self.checkpointer = checkpointer
        self.write_failures = write_failures
        self.registry = registry or CollectorRegistry()
        exp = runtime.experiment
        self.experiment = exp.metadata.name
        self._batch = _histogram(
            declared.INFERENCE_BATCH_SIZE, BATCH_BUCKETS, self.registry
        ).labels(self.experiment)
        self._latency = _histogram(
            declared.INFERENCE_LATENCY, LATENCY_BUCKETS, self.registry
        ).labels(self.experiment)
        returns = _histogram(declared.EPISODE_RETURN, RETURN_BUCKETS, self.registry)
        lengths = _histogram(declared.EPISODE_LENGTH, LENGTH_BUCKETS, self.registry)
        self._returns = {k: returns.labels(self.experiment, k) for k in ("train", "eval")}
        self._lengths = {k: lengths.labels(self.experiment, k) for k in ("train", "eval")}
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self.registry.register(_ScrapeTimeCollector(self))

    # -- observed as they happen -------------------------------------------------------

    def inference_batch(self, size: int, seconds: float) -> None:
        """Records one inference call of ``size`` env steps that took ``seconds``."""
        self._batch.observe(size)
        self._latency.observe(seconds)

    def episode(self, episode_return: float, length: int, evaluation: bool) -> None:
        """Records one finished episode."""
        kind = "eval" if evaluation else "train"
        self._returns[kind].observe(episode_return)
        self._lengths[kind].observe(length)

    def tick(self) -> None:
        """Samples the frame counter for the frames/s gauge; call a few times a second."""
        now = time.monotonic()
        self._samples.append((now, self.env_frames))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()

    # -- read at scrape time -----------------------------------------------------------

    @property
    def env_frames(self) -> int:
        """Environment frames so far (agent steps times the frame skip)."""
        return self.runtime.env_frames

    def frames_per_second(self) -> float:
        """Frames per second over the last :data:`RATE_WINDOW_S` seconds of ticks."""
        if len(self._samples) < 2:
            return 0.0
        (t0, f0), (t1, f1) = self._samples[0], self._samples[-1]
        return (f1 - f0) / (t1 - t0) if t1 > t0 else 0.0


class _ScrapeTimeCollector:
    """Turns the runtime's and the checkpointer's state into metric families on each scrape."""

    def __init__(self, metrics: LearnerMetrics):
        self.m = metrics

    def describe(self):
        return []  # families depend on the agent; unchecked registration is fine here

    def collect(self):
        m, r = self.m, self.m.runtime
        exp = [m.experiment]
        d = declared

        def family(metric, values):
            kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            out = kind(metric.name, metric.help, labels=list(metric.labels))
            for extra, value in values:
                out.add_metric(exp + extra, value)
            return out

        def one(metric, value):
            return family(metric, [([], value)])

        yield one(d.ENV_STEPS, r.env_steps)
        yield one(d.ENV_FRAMES, m.env_frames)
        yield one(d.LEARNER_STEPS, r.learner_steps)
        yield one(d.SKIPPED_UPDATES, r.skipped_updates)
        yield one(d.REFUSED_STREAMS, r.refused_streams)
        yield one(d.INVALID_ACTIONS, r.invalid_actions)
        yield one(d.SECONDS_WITHOUT_ENV_STEPS, r.seconds_without_env_steps)
        yield family(d.EPISODES, [(["train"], r.episodes), (["eval"], r.eval_episodes)])
        yield one(d.FRAMES_PER_SECOND, m.frames_per_second())
        yield one(d.CONNECTED_ACTORS, r.connected_actors)
        yield one(d.QUEUED_UNROLLS, r.queued_unrolls)
        replay = r.replay_size
        if replay is not None:
            yield one(d.REPLAY_SEQUENCES, replay)
        mean = r.mean_return
        if mean == mean:  # not NaN: there are episodes
            yield one(d.MEAN_RETURN, mean)
        if r.eval_returns:
            yield one(d.EVAL_MEAN_RETURN, float(np.mean(list(r.eval_returns))))
        yield one(d.ENV_RESTARTS, r.env_restarts)
        losses, stats = [], []
        for key, value in sorted(r.last_metrics.items()):
            if key.startswith("loss/"):
                losses.append(([key[len("loss/") :]], value))
            elif key == "policy_lag":
                yield one(d.POLICY_LAG, value)
            else:
                stats.append(([key], value))
        yield family(d.LOSS, losses)
        yield family(d.TRAIN_STAT, stats)
        yield one(d.FINISHED, 1.0 if r.finished else 0.0)
        if m.write_failures is not None:
            counts = sorted(m.write_failures.counts.items())
            yield family(d.WRITE_FAILURES, [([what], count) for what, count in counts])
        c = m.checkpointer
        if c is not None:
            status = c.status()
            yield one(d.CHECKPOINT_INTERVAL, c.interval_seconds or 0.0)
            yield one(d.CHECKPOINT_FAILURES, status["checkpoint_failures"])
            yield one(d.CHECKPOINT_AGE, status["checkpoint_age_s"])
            if status["last_checkpoint_time"] is not None:
                yield one(d.CHECKPOINT_DURATION, status["checkpoint_seconds"])
                yield one(d.LAST_CHECKPOINT_TIME, status["last_checkpoint_time"])


def _histogram(metric: declared.Metric, buckets, registry: CollectorRegistry) -> Histogram:
    """A histogram registered as ``metric`` declares it."""
    return Histogram(
        metric.name, metric.help, list(metric.labels), buckets=buckets, registry=registry
    )
