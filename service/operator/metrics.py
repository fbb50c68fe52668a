"""The operator's own Prometheus series, served on ``--metrics-port`` (``/metrics``).

- ``seedrl_operator_reconciles_total{trigger}``: handler runs, ``trigger`` ``change`` (create,
  update, resume) or ``poll`` (the periodic status refresh);
- ``seedrl_operator_reconcile_errors_total{trigger}``: those that raised (kopf retries them);
- ``seedrl_operator_reconcile_seconds{trigger}``: how long each took (a histogram);
- per Experiment, :class:`seedrl.service.metrics.ExperimentGauges`: the phase and the cost
  so far, set from each computed status and pricing report, dropped on delete.

Everything lives in one registry of its own (not prometheus_client's global one), so that
several operators can run in one test process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram

from seedrl.service import cost
from seedrl.service.metrics import ExperimentGauges

#: What started a reconcile.
TRIGGERS = ("change", "poll")
#: Reconcile durations' histogram buckets, seconds: a poll of an idle Experiment takes
#: milliseconds, a change that makes every child a few API calls.
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class OperatorMetrics:
    """The operator's registry with its counters and the Experiments' gauges.

    Args:
      registry: where to register (a fresh one by default).
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "seedrl_operator_reconciles_total",
            "Reconciles run by the operator, by what triggered them.",
            ["trigger"],
            registry=self.registry,
        )
        self.errors = Counter(
            "seedrl_operator_reconcile_errors_total",
            "Reconciles that raised (kopf retries them), by trigger.",
            ["trigger"],
            registry=self.registry,
        )
        self.durations = Histogram(
            "seedrl_operator_reconcile_seconds",
            "How long reconciles took, by what triggered them.",
            ["trigger"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        for trigger in TRIGGERS:  # both series exist from the start, at 0
            self.reconciles.labels(trigger)
            self.errors.labels(trigger)
            self.durations.labels(trigger)
        self.experiments = ExperimentGauges(self.registry)
        # uids of deleted Experiments: a poll that was already running when one was deleted
        # must not bring its series back after on_delete dropped them.
        self._deleted: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def reconciling(self, trigger: str) -> Iterator[None]:
        """Counts and times one reconcile; an exception is counted as an error and raised
        again."""
        self.reconciles.labels(trigger).inc()
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self.errors.labels(trigger).inc()
            raise
        finally:
            self.durations.labels(trigger).observe(time.perf_counter() - start)

    def observe(
        self,
        name: str,
        namespace: str,
        uid: str | None,
        phase: str | None,
        report: cost.CostReport | None,
    ) -> None:
        """Sets an Experiment's phase and (when priced this time) cost gauges."""
        with self._lock:
            if uid is not None and uid in self._deleted:
                return
            if phase:
                self.experiments.set_phase(name, namespace, phase)
            self.experiments.set_cost(name, namespace, report)

    def forget(self, name: str, namespace: str, uid: str | None) -> None:
        """Drops a deleted Experiment's series."""
        with self._lock:
            if uid is not None:
                self._deleted.add(uid)
            self.experiments.remove(name, namespace)
