"""The alert rules: promtool checks and unit-tests them, and the chart ships them unchanged."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.charts import OPERATOR_CHART, lint, of_kind, render

HERE = Path(__file__).resolve().parent
RULES = OPERATOR_CHART / "rules" / "seedrl-alerts.yaml"


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: run `make prometheus` (Debian's prometheus package)"
    return path


@pytest.mark.prometheus
def test_promtool_checks_the_rules():
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


@pytest.mark.prometheus
def test_each_alert_fires_and_stays_quiet_as_unit_tested():
    # alerts_test.yaml: every alert once firing, and beside it series that must not fire.
    result = subprocess.run(
        [_promtool(), "test", "rules", "alerts_test.yaml"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {
        t["alertname"]
        for case in yaml.safe_load((HERE / "alerts_test.yaml").read_text())["tests"]
        for t in case["alert_rule_test"]
    }
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert (
        tested
        == alerts
        == {
            "SeedrlLearnerDown",
            "SeedrlNoActorsConnected",
            "SeedrlThroughputHalved",
            "SeedrlCheckpointStale",
            "SeedrlExperimentFailed",
        }
    )


@pytest.mark.helm
def test_the_chart_renders_the_same_rules_as_a_prometheus_rule():
    lint(OPERATOR_CHART, sets=["alerts.enabled=true"])
    manifests = render(
        OPERATOR_CHART, sets=["alerts.enabled=true", "alerts.additionalLabels.team=rl"]
    )
    (rule,) = of_kind(manifests, "PrometheusRule")
    source = yaml.safe_load(RULES.read_text())["groups"]
    rendered = rule["spec"]["groups"]
    assert [g["name"] for g in rendered] == [g["name"] for g in source]
    for got_group, want_group in zip(rendered, source):
        for got, want in zip(got_group["rules"], want_group["rules"], strict=True):
            assert got["alert"] == want["alert"] and got["expr"] == want["expr"]
            assert got.get("for") == want.get("for")
            assert got["labels"] == {**want["labels"], "team": "rl"}
            assert got["annotations"] == want["annotations"]
    assert not of_kind(render(OPERATOR_CHART), "PrometheusRule")  # off by default


@pytest.mark.helm
def test_under_gke_managed_prometheus_the_rules_are_cluster_rules():
    # Managed Prometheus ignores PrometheusRules: its ClusterRules (which see the operator's
    # series in its namespace and the learners' in theirs) carry the same rules.
    sets = ["alerts.enabled=true", "metrics.podMonitor.flavor=gke-managed"]
    lint(OPERATOR_CHART, sets=sets)
    manifests = render(OPERATOR_CHART, sets=[*sets, "alerts.interval=1m"])
    assert not of_kind(manifests, "PrometheusRule")
    (rules,) = of_kind(manifests, "ClusterRules")
    assert rules["apiVersion"] == "monitoring.googleapis.com/v1"
    assert "namespace" not in rules["metadata"]  # cluster-scoped
    source = yaml.safe_load(RULES.read_text())["groups"]
    assert [(g["name"], g["interval"]) for g in rules["spec"]["groups"]] == [
        (g["name"], "1m") for g in source
    ]
    for got_group, want_group in zip(rules["spec"]["groups"], source):
        for got, want in zip(got_group["rules"], want_group["rules"], strict=True):
            assert (got["alert"], got["expr"], got["annotations"]) == (
                want["alert"],
                want["expr"],
                want["annotations"],
            )
