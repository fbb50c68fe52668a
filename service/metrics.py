"""Per-Experiment series that the operator exports for every Experiment it manages, and that
``seedrl train`` exports for its one run: the phase and the cost so far.

``seedrl_experiment_phase{experiment, namespace, phase}`` is 1 for the current phase and 0 for
the others (so ``count by (phase) (seedrl_experiment_phase == 1)`` counts Experiments by phase
and an alert can match ``phase="Failed"``); the cost gauges are :class:`seedrl.service.cost.CostGauges`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from seedrl.service import cost
from seedrl.service.operator.crd import PHASES


class ExperimentGauges:
    """Phase and cost gauges of Experiments.

    Args:
      registry: where to register (a fresh one by default).
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self._phase = Gauge("seedrl_experiment_phase",
                            "1 for the phase an Experiment is in, 0 for the others.",
                            ["experiment", "namespace", "phase"], registry=self.registry)
        self.cost = cost.CostGauges(self.registry)

    def set_phase(self, experiment: str, namespace: str, phase: str) -> None:
        """Marks ``phase`` as the Experiment's current one."""
        for p in PHASES:
            self._phase.labels(experiment, namespace, p).set(1.0 if p == phase else 0.0)

    def set_cost(self, experiment: str, namespace: str,
                 report: cost.CostReport | None) -> None:
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
