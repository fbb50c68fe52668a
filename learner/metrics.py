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
#: Seconds of history the frames/s gauge averages over.
RATE_WINDOW_S = 10.0


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
        labels = ["experiment"]
        self._batch = Histogram(
            "seedrl_learner_inference_batch_size",
            "Env steps evaluated per inference call.",
            labels,
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        ).labels(self.experiment)
        self._latency = Histogram(
            "seedrl_learner_inference_latency_seconds",
            "Time of one batched inference call.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(self.experiment)
        returns = Histogram(
            "seedrl_learner_episode_return",
            "Undiscounted return of finished episodes.",
            labels + ["kind"],
            buckets=RETURN_BUCKETS,
            registry=self.registry,
        )
        lengths = Histogram(
            "seedrl_learner_episode_length_steps",
            "Agent steps of finished episodes.",
            labels + ["kind"],
            buckets=LENGTH_BUCKETS,
            registry=self.registry,
        )
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

        def counter(name, doc, value):
            family = CounterMetricFamily(name, doc, labels=["experiment"])
            family.add_metric(exp, value)
            return family

        def gauge(name, doc, value, extra=None):
            family = GaugeMetricFamily(name, doc, labels=["experiment"] + list(extra or {}))
            family.add_metric(exp + list((extra or {}).values()), value)
            return family

        yield counter("seedrl_learner_env_steps", "Agent steps of all actors.", r.env_steps)
        yield counter(
            "seedrl_learner_env_frames",
            "Environment frames of all actors (steps x Atari frame skip).",
            m.env_frames,
        )
        yield counter("seedrl_learner_steps", "Training steps of the learner.", r.learner_steps)
        yield counter(
            "seedrl_learner_skipped_updates",
            "Training steps skipped because their gradients were not finite.",
            r.skipped_updates,
        )
        yield counter(
            "seedrl_learner_refused_streams",
            "Actor streams refused or failed for what they sent.",
            r.refused_streams,
        )
        yield counter(
            "seedrl_learner_invalid_actions",
            "Actions inference produced outside the action space (replaced).",
            r.invalid_actions,
        )
        yield gauge(
            "seedrl_learner_seconds_without_env_steps",
            "Seconds since the last env step arrived.",
            r.seconds_without_env_steps,
        )
        episodes = CounterMetricFamily(
            "seedrl_learner_episodes", "Finished episodes.", labels=["experiment", "kind"]
        )
        episodes.add_metric(exp + ["train"], r.episodes)
        episodes.add_metric(exp + ["eval"], r.eval_episodes)
        yield episodes
        yield gauge(
            "seedrl_learner_env_frames_per_second",
            f"Frames per second over the last {RATE_WINDOW_S:.0f} s.",
            m.frames_per_second(),
        )
        yield gauge(
            "seedrl_learner_connected_actors", "Actor streams connected now.", r.connected_actors
        )
        yield gauge(
            "seedrl_learner_queued_unrolls", "Unrolls waiting for training.", r.queued_unrolls
        )
        replay = r.replay_size
        if replay is not None:
            yield gauge("seedrl_learner_replay_sequences", "Sequences held in the replay.", replay)
        mean = r.mean_return
        if mean == mean:  # not NaN: there are episodes
            yield gauge(
                "seedrl_learner_mean_return",
                "Mean return of the last returnWindow training episodes.",
                mean,
            )
        if r.eval_returns:
            yield gauge(
                "seedrl_learner_eval_mean_return",
                "Mean return of the evaluation actors' last returnWindow episodes.",
                float(np.mean(list(r.eval_returns))),
            )
        yield gauge(
            "seedrl_learner_uncounted_env_steps",
            "Env steps received beyond their actor's fair share (not counted toward "
            "spec.budget.maxEnvSteps; see seedrl.learner.progress).",
            r.uncounted_env_steps,
        )
        yield counter(
            "seedrl_learner_env_restarts",
            "Envs the actors recreated after they raised.",
            r.env_restarts,
        )
        losses = GaugeMetricFamily(
            "seedrl_learner_loss",
            "Loss terms of the last training step.",
            labels=["experiment", "term"],
        )
        stats = GaugeMetricFamily(
            "seedrl_learner_train_stat",
            "Other statistics of the last training step (entropy, gradient norm, ...).",
            labels=["experiment", "stat"],
        )
        for key, value in sorted(r.last_metrics.items()):
            if key.startswith("loss/"):
                losses.add_metric(exp + [key[len("loss/") :]], value)
            elif key == "policy_lag":
                yield gauge(
                    "seedrl_learner_policy_lag_updates",
                    "Mean policy lag of the last training batch, in updates.",
                    value,
                )
            else:
                stats.add_metric(exp + [key], value)
        yield losses
        yield stats
        yield gauge(
            "seedrl_learner_finished", "1 once the run has stopped.", 1.0 if r.finished else 0.0
        )
        if m.write_failures is not None:
            writes = CounterMetricFamily(
                "seedrl_learner_write_failures",
                "Writes of the learner's own files (status, metrics log, summary, TensorBoard) "
                "that failed; training goes on.",
                labels=["experiment", "file"],
            )
            for what, count in sorted(m.write_failures.counts.items()):
                writes.add_metric(exp + [what], count)
            yield writes
        c = m.checkpointer
        if c is not None:
            status = c.status()
            interval = c.interval_seconds or 0.0
            yield gauge(
                "seedrl_learner_checkpoint_interval_seconds",
                "Configured time between checkpoints (0: by steps only).",
                interval,
            )
            yield counter(
                "seedrl_learner_checkpoint_failures",
                "Checkpoint publications that failed.",
                status["checkpoint_failures"],
            )
            yield gauge(
                "seedrl_learner_checkpoint_age_seconds",
                "Seconds since the last published checkpoint (or since the learner "
                "started, before its first).",
                status["checkpoint_age_s"],
            )
            if status["last_checkpoint_time"] is not None:
                yield gauge(
                    "seedrl_learner_checkpoint_duration_seconds",
                    "How long the last checkpoint took to publish.",
                    status["checkpoint_seconds"],
                )
                yield gauge(
                    "seedrl_learner_last_checkpoint_timestamp_seconds",
                    "When the last checkpoint was published.",
                    status["last_checkpoint_time"],
                )
