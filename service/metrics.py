"""Per-Experiment series that the operator exports for every Experiment it manages, and that
``seedrl train`` exports for its one run: the phase and the cost so far.

``seedrl_experiment_phase{experiment, namespace, phase}`` is 1 for the current phase and 0 for
the others (so ``count by (phase) (seedrl_experiment_phase == 1)`` counts Experiments by phase
and an alert can match ``phase="Failed"``); the cost gauges are :class:`CostGauges`'s.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from seedrl.service.cost import ROLES, CostReport
from seedrl.service.operator.crd import PHASES


class CostGauges:
    """Prometheus gauges of Experiment costs, updated after each pricing.

    ``seedrl_experiment_cost_usd{experiment, namespace, role}`` (role learner, actor or total)
    and ``seedrl_experiment_cost_usd_per_million_frames{experiment, namespace}``: the namespace
    keeps apart Experiments of one name in two namespaces.

    Args:
      registry: where to register (default: prometheus_client's global registry; pass a fresh
        ``CollectorRegistry`` in tests).
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        registry = REGISTRY if registry is None else registry
        self.usd = Gauge(
            "seedrl_experiment_cost_usd",
            "Estimated cost of an Experiment so far, in USD, from the resources "
            "its pods requested and the time they ran.",
            ["experiment", "namespace", "role"],
            registry=registry,
        )
        self.per_million = Gauge(
            "seedrl_experiment_cost_usd_per_million_frames",
            "Estimated USD per million environment frames so far.",
            ["experiment", "namespace"],
            registry=registry,
        )

    def update(self, experiment: str, namespace: str, report: CostReport) -> None:
        """Sets the gauges of one Experiment from its report."""
        for role, c in report.roles.items():
            self.usd.labels(experiment, namespace, role).set(c.total_usd)
        self.usd.labels(experiment, namespace, "total").set(report.total_usd)
        if report.usd_per_million_frames is not None:
            self.per_million.labels(experiment, namespace).set(report.usd_per_million_frames)

    def remove(self, experiment: str, namespace: str) -> None:
        """Drops a deleted Experiment's series."""
        for role in (*ROLES, "total"):
            try:
                self.usd.remove(experiment, namespace, role)
            except KeyError:
                pass
        try:
            self.per_million.remove(experiment, namespace)
        except KeyError:
            pass


class ExperimentGauges:
    """Phase and cost gauges of Experiments.

    Args:
      registry: where to register (a fresh one by default).
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self._phase = Gauge(
            "seedrl_experiment_phase",
            "1 for the phase an Experiment is in, 0 for the others.",
            ["experiment", "namespace", "phase"],
            registry=self.registry,
        )
        self.cost = CostGauges(self.registry)

    def set_phase(self, experiment: str, namespace: str, phase: str) -> None:
        """Marks ``phase`` as the Experiment's current one."""
        for p in PHASES:
            self._phase.labels(experiment, namespace, p).set(1.0 if p == phase else 0.0)

    def set_cost(self, experiment: str, namespace: str, report: CostReport | None) -> None:
        """Sets the cost gauges from a pricing report (None: nothing priced yet)."""
        if report is not None:
            self.cost.update(experiment, namespace, report)

    def remove(self, experiment: str, namespace: str) -> None:
        """Drops a deleted Experiment's series."""
        for p in PHASES:
            try:
                self._phase.remove(experiment, namespace, p)
            except KeyError:
                pass
        self.cost.remove(experiment, namespace)
