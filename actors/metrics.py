"""An actor's Prometheus metrics: env step time, round trips, batch size, reconnects, restarts.

Step and round-trip times are observed as they happen (once per batch of envs, about a
microsecond); counts are read from the clients and env batches when Prometheus scrapes. Every
series carries the ``experiment`` and ``actor`` (index) labels; names carry their unit.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from seedrl.common import metrics as declared

STEP_BUCKETS = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
ROUND_TRIP_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0)


class ActorMetrics:
    """Registers one actor process's metrics.

    Args:
      experiment: ``metadata.name``.
      actor_index: this actor's index among the replicas.
      clients: the actor's :class:`seedrl.actors.client.ActorClient` streams (read at scrape time).
      registry: where to register (a fresh one by default).
    """

    def __init__(
        self, experiment: str, actor_index: int, clients, registry: CollectorRegistry | None = None
    ):
        self.registry = registry or CollectorRegistry()
        self.labels = [experiment, str(actor_index)]
        self.clients = list(clients)
        self._step = Histogram(
            declared.ACTOR_ENV_STEP_TIME.name,
            declared.ACTOR_ENV_STEP_TIME.help,
            list(declared.ACTOR_ENV_STEP_TIME.labels),
            buckets=STEP_BUCKETS,
            registry=self.registry,
        ).labels(*self.labels)
        self._round_trip = Histogram(
            declared.ACTOR_ROUND_TRIP.name,
            declared.ACTOR_ROUND_TRIP.help,
            list(declared.ACTOR_ROUND_TRIP.labels),
            buckets=ROUND_TRIP_BUCKETS,
            registry=self.registry,
        ).labels(*self.labels)
        self.registry.register(_Counts(self))
        for client in self.clients:
            client.observer = self

    def env_step(self, seconds: float) -> None:
        """Records the time of one ``envs.step`` call."""
        self._step.observe(seconds)

    def round_trip(self, seconds: float) -> None:
        """Records one step's round trip to the learner."""
        self._round_trip.observe(seconds)


class _Counts:
    def __init__(self, metrics: ActorMetrics):
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        m = self.m

        def family(metric, value):
            kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            f = kind(metric.name, metric.help, labels=list(metric.labels))
            f.add_metric(m.labels, value)
            return f

        yield family(declared.ACTOR_ENV_STEPS, sum(c.env_steps for c in m.clients))
        yield family(declared.ACTOR_BATCH_SIZE, sum(c.envs.num_envs for c in m.clients))
        yield family(declared.ACTOR_CONNECTED_STREAMS, sum(1 for c in m.clients if c.connected))
        # The first connection of each stream is not a reconnect.
        yield family(declared.ACTOR_RECONNECTS, sum(max(0, c.connections - 1) for c in m.clients))
        yield family(
            declared.ACTOR_ENV_RESTARTS,
            sum(getattr(c.envs, "restarts", 0) for c in m.clients),
        )
