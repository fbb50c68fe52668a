"""bench/operator_load.py (issue 37, item 11): its quantiles, and a small run of it on the real
control plane that reports every figure the docs' Benchmarks table quotes."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("operator_load", ROOT / "bench" / "operator_load.py")
operator_load = importlib.util.module_from_spec(SPEC)
sys.modules["operator_load"] = operator_load
SPEC.loader.exec_module(operator_load)


def test_histogram_quantile_interpolates_as_prometheus_does():
    buckets = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (math.inf, 100.0)]
    assert operator_load.histogram_quantile(buckets, 0.5) == pytest.approx(0.01)
    # Rank 95 of 100 lies halfway through the (0.1, 1] bucket's 10.
    assert operator_load.histogram_quantile(buckets, 0.95) == pytest.approx(0.55)
    assert operator_load.histogram_quantile([(math.inf, 0.0)], 0.5) is None
    assert operator_load.quantile([3.0, 1.0, 2.0], 0.5) == 2.0


@pytest.mark.cluster
def test_a_small_run_reports_load_memory_and_latency(tmp_path, capsys):
    out = tmp_path / "load.json"
    assert operator_load.main(
        ["--experiments", "4", "--namespaces", "2", "--window", "6", "--poll-seconds", "1",
         "--settle", "3", "--json", str(out)]
    ) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert result["experiments"] == 4
    assert result["reconcile_latency_s"]["count"] == 4
    assert 0 < result["reconcile_latency_s"]["p50"] <= result["reconcile_latency_s"]["p99"]
    assert result["operator_reconcile_seconds"]["poll"]["count"] > 0
    assert result["operator_rss_mib"]["peak"] >= result["operator_rss_mib"]["idle"] > 0
    # Idle, nothing is written but heartbeats: at most one per Experiment in a window shorter
    # than the heartbeat's 60 s (where the window falls depends on the machine's load).
    assert result["idle_writes_per_second"] * result["idle_window_seconds"] <= 4
    assert result["idle_requests_per_second_per_experiment"] < 1
