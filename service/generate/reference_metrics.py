"""``docs/reference/metrics.md``: every Prometheus metric seedrl serves, with its type, labels
and help.

The learner's and the actors' are declared in :mod:`seedrl.common.metrics` (which their
processes register from; the service may not import them). The operator's and the per-Experiment
gauges are the service's own: they are read from a registry the operator's
:class:`~seedrl.service.operator.metrics.OperatorMetrics` fills, exactly as it serves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from seedrl.common import metrics as declared
from seedrl.service.cost import CostReport
from seedrl.service.cost.records import ROLES
from seedrl.service.local.launcher import LOCAL_NAMESPACE
from seedrl.service.generate import markdown as md
from seedrl.service.operator.crd import PHASES
from seedrl.service.operator.metrics import TRIGGERS, OperatorMetrics

#: The page, relative to the repository root.
PAGE = "docs/reference/metrics.md"

# Labels prometheus_client adds to a histogram's or summary's series itself.
_BUILT_IN_LABELS = {"le", "quantile"}


def service_metrics() -> list[declared.Metric]:
    """The operator's families, each with its labels, as its registry serves them."""
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    # A family names its labels only through its series, and the per-Experiment gauges have
    # none until an Experiment is observed: observe one, with a report that priced nothing.
    report = CostReport(
        total_usd=0.0,
        usd_per_million_frames=0.0,
        env_frames=0,
        roles={},
        price_table="",
        region="",
        taken_on="",
        as_of=0.0,
    )
    metrics.observe("example", "default", None, "Running", report)
    out = []
    for family in registry.collect():
        labels: dict[str, None] = {}
        for sample in family.samples:
            labels.update(dict.fromkeys(k for k in sample.labels if k not in _BUILT_IN_LABELS))
        out.append(declared.Metric(family.name, family.type, family.documentation, tuple(labels)))
    return out


def _series(metric: declared.Metric) -> str:
    """The series to query: a counter's ``_total``; a histogram's name and its three series."""
    if metric.kind == "counter":
        return md.code(f"{metric.name}_total")
    if metric.kind == "histogram":
        parts = ", ".join(md.code(s) for s in ("_bucket", "_sum", "_count"))
        return f"{md.code(metric.name)} ({parts})"
    return md.code(metric.name)


def metrics_table(metrics: Sequence[declared.Metric]) -> str:
    """A table of metric families: the series to query, type, labels, help."""
    rows = [
        (
            _series(m),
            m.kind,
            ", ".join(md.code(label) for label in m.labels),
            md.text(m.help) + (f" Served {md.text(m.when)}." if m.when else ""),
        )
        for m in metrics
    ]
    return md.table(("Series", "Type", "Labels", "Help"), rows)


def _values(values: Sequence[str]) -> str:
    return ", ".join(md.code(v) for v in values)


def labels() -> dict[str, str]:
    """What every label of every series holds: the learner's and the actors' from
    :data:`seedrl.common.metrics.LABELS`, the service's from the tuples it labels with."""
    return {
        **declared.LABELS,
        "namespace": f"The Experiment's namespace (`{LOCAL_NAMESPACE}` for `seedrl train`).",
        "phase": "One of the Experiment's phases: " + _values(PHASES) + " (1 for the current "
        "one, 0 for the others).",
        "role": "Whose cost: " + _values((*ROLES, "total")) + ".",
        "trigger": "What ran the reconcile: " + _values(TRIGGERS) + " (`change`: a create, "
        "update or resume; `poll`: the periodic status refresh).",
    }


def labels_table() -> str:
    """A table of every label and what it holds."""
    return md.table(("Label", "Holds"), [(md.code(k), v) for k, v in sorted(labels().items())])


def page() -> str:
    """The page's Markdown."""
    service = service_metrics()
    operator = [m for m in service if m.name.startswith("seedrl_operator_")]
    experiments = [m for m in service if not m.name.startswith("seedrl_operator_")]
    return "\n".join(
        [
            md.generated_line(
                "`common/metrics.py` (the learner's and the actors') and the operator's "
                "registry (`service/operator/metrics.py`, `service/metrics.py`)"
            ),
            "# Metrics\n",
            "Every seedrl process serves Prometheus metrics on `/metrics` (the learner and the "
            "actors on their metrics port, which the operator chart's PodMonitor scrapes; the "
            "operator on `--metrics-port`). A counter's series ends in `_total`; a histogram "
            "also has `_bucket`, `_sum` and `_count` series.\n",
            "## Learner\n",
            "Every learner series carries the Experiment's name (`experiment`).\n",
            metrics_table(declared.LEARNER),
            "## Actors\n",
            "Every actor series also carries the actor's index (`actor`).\n",
            metrics_table(declared.ACTOR),
            "## Operator\n",
            metrics_table(operator),
            "## Experiments\n",
            "Per Experiment, from the operator for each Experiment it manages, and from "
            "`seedrl train` for its one run; dropped when the Experiment is deleted.\n",
            metrics_table(experiments),
            "## Labels\n",
            labels_table(),
        ]
    )


def outputs() -> dict[str, str]:
    """The page and its text."""
    return {PAGE: page()}
