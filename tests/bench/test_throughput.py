"""bench/throughput.py: a training window in which the learner made no step fails with that
reason instead of a ratio (issue 41, item 3); the JSON names the precision and the machine."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("throughput", ROOT / "bench" / "throughput.py")
throughput = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(throughput)


def rows(*points):
    """metrics.jsonl rows: (elapsed, env_steps, learner_steps), all running."""
    return [
        {
            "elapsed": e,
            "env_steps": s,
            "learner_steps": u,
            "state": "running",
            "mean_inference_batch": 16.0,
        }
        for e, s, u in points
    ]


def test_the_window_rate_counts_env_and_learner_steps_after_the_warmup():
    measured = throughput.window_rate(
        rows((2, 100, 0), (10, 1000, 1), (20, 3000, 4), (30, 5000, 9)), warmup=10, train=True
    )
    assert measured["steps_per_s"] == (5000 - 1000) / (30 - 10)
    assert measured["learner_steps"] == 9 and measured["learner_steps_in_window"] == 8


def test_a_training_window_without_a_learner_step_fails_with_that_reason():
    # As issue 41 measured it: env steps flowed, the learner never finished a step.
    stalled = rows((2, 100, 0), (10, 260, 0), (20, 520, 0), (30, 780, 0))
    with pytest.raises(throughput.NoLearnerStep, match="the learner made no step in the"):
        throughput.window_rate(stalled, warmup=10, train=True)
    # Inference only makes no step by design: its rate stands.
    assert throughput.window_rate(stalled, warmup=10, train=False)["steps_per_s"] == 26.0


def test_main_exits_non_zero_without_printing_a_ratio(monkeypatch, tmp_path, capsys):
    def stalled(config, overrides, seconds, warmup, train):
        if train:
            raise throughput.NoLearnerStep("the learner made no step in the measured window")
        return {"steps_per_s": 26.0, "mean_inference_batch": 16.0, "learner_steps": 0}

    monkeypatch.setattr(throughput, "raw_steps_per_second", lambda exp, seconds: 3000.0)
    monkeypatch.setattr(throughput, "end_to_end_steps_per_second", stalled)
    out = tmp_path / "out.json"
    code = throughput.main(["--seconds", "1", "--json", str(out)])
    assert code == 1
    captured = capsys.readouterr()
    assert "error: the learner made no step" in captured.err
    assert "vs raw" not in captured.out and not out.exists()


def test_the_json_names_the_machine_the_precision_and_the_comparison(monkeypatch, tmp_path):
    chosen = {"requested": "auto", "precision": "float32", "reason": "the CPU x", "warning": None}

    def measured(config, overrides, seconds, warmup, train):
        rate = 300.0 if "spec.agent.network.precision=float32" in overrides else 285.0
        return {
            "steps_per_s": rate if train else 900.0,
            "mean_inference_batch": 16.0,
            "learner_steps": 5,
            "precision": chosen,
        }

    monkeypatch.setattr(throughput, "raw_steps_per_second", lambda exp, seconds: 3000.0)
    monkeypatch.setattr(throughput, "end_to_end_steps_per_second", measured)
    monkeypatch.setattr(throughput, "baseline_steps_per_second", lambda *a: 100.0)
    out = tmp_path / "out.json"
    argv = ["--json", str(out), "--compare", "spec.agent.network.precision=float32"]
    assert throughput.main(argv) == 0
    figures = json.loads(out.read_text())
    assert figures["precision"] == chosen
    assert figures["compare"]["overrides"] == ["spec.agent.network.precision=float32"]
    assert figures["compare"]["ratio_training_to_compared"] == pytest.approx(285.0 / 300.0)
    machine = figures["machine"]
    assert {"cpu_model", "cpu_flags", "cpu", "cores", "load_average"} <= set(machine)
