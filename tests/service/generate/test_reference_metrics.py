"""docs/reference/metrics.md (service/generate/reference_metrics.py): every Prometheus metric
seedrl serves, found in the code that registers it, is on the page."""

from __future__ import annotations

import re
from pathlib import Path

from seedrl.common import metrics as declared
from seedrl.service.generate import reference_metrics

ROOT = Path(__file__).resolve().parents[3]


def _names_in_code():
    """Every metric name written in our packages' code, whoever declares it: a metric
    registered outside the declarations the page reads would show up here."""
    names = set()
    for package in ("common", "learner", "actors", "service", "policy"):
        for path in (ROOT / package).rglob("*.py"):
            if "generate" in path.parts:
                continue  # the dashboards' queries name series, not families
            names |= set(
                re.findall(
                    r"\"(seedrl_(?:learner|actor|operator|experiment)_\w+)\"", path.read_text()
                )
            )
    return names


def test_every_metric_in_the_code_is_on_the_page():
    page = reference_metrics.page()
    names = _names_in_code()
    assert {"seedrl_learner_env_steps", "seedrl_actor_round_trip_seconds"} <= names
    assert {"seedrl_operator_reconciles_total", "seedrl_experiment_phase"} <= names
    assert [n for n in names if f"`{n}" not in page] == []


def test_every_declared_and_served_family_has_a_row_with_type_and_labels():
    page = reference_metrics.page()
    for metric in (*declared.LEARNER, *declared.ACTOR, *reference_metrics.service_metrics()):
        series = f"{metric.name}_total" if metric.kind == "counter" else metric.name
        labels = ", ".join(f"`{label}`" for label in metric.labels)
        assert f"| `{series}`" in page and f" | {metric.kind} | {labels} | " in page, metric.name
    assert "| `seedrl_experiment_cost_usd` | gauge | `experiment`, `namespace`, `role` |" in page


def test_every_series_the_dashboards_and_alerts_query_is_on_the_page():
    page = reference_metrics.page()
    queried = set()
    for path in ("service/generate/dashboards.py", "helm/seedrl-operator/rules/seedrl-alerts.yaml"):
        text = (ROOT / path).read_text()
        queried |= set(re.findall(r"seedrl_(?:learner|actor|operator|experiment)_[a-z_]+", text))
    assert "seedrl_learner_env_frames_total" in queried
    # A histogram's row names its family; its _bucket, _sum and _count series go with it.
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in queried}
    assert [f for f in families if f"`{f}`" not in page and f"`{f}_total`" not in page] == []


def test_every_label_of_every_series_says_what_it_holds():
    glossary = reference_metrics.labels()
    metrics = [*declared.LEARNER, *declared.ACTOR, *reference_metrics.service_metrics()]
    used = {label for metric in metrics for label in metric.labels}
    assert used <= set(glossary), sorted(used - set(glossary))
    assert set(glossary) <= used, sorted(set(glossary) - used)  # nothing described in vain
    page = reference_metrics.page()
    for label, holds in glossary.items():
        assert f"| `{label}` | {holds} |" in page
