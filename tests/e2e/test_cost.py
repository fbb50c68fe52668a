"""`seedrl train` ends with a cost line and leaves cost.json; `seedrl cost NAME` reports it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole-vtrace.yaml"


def seedrl(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "seedrl.service.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_local_run_ends_with_its_cost(tmp_path):
    proc = seedrl(
        "train",
        str(EXAMPLE),
        "--quiet",
        "--runs-dir",
        str(tmp_path),
        "--set",
        "metadata.name=e2e-cost",
        "--set",
        "spec.budget.maxEnvSteps=3000",
        "--set",
        "spec.budget.targetReturn=null",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("cost: $") and "estimated (learner 1 x cpu 4 vCPU/16 GiB" in last, (
        proc.stdout
    )
    assert (
        "actors 2 x cpu 1 vCPU/2 GiB" in last and "per million frames [prices us-central1" in last
    )

    data = json.loads((tmp_path / "e2e-cost" / "cost.json").read_text())
    summary = json.loads((tmp_path / "e2e-cost" / "summary.json").read_text())
    assert data["running"] is False
    assert sorted(r["name"] for r in data["records"]) == ["actor-0@1", "actor-1@1", "learner@1"]
    status = data["cost"]
    assert status["envFrames"] == summary["env_steps"] >= 3000
    assert status["totalUsd"] > 0
    # Both are rounded to 6 places (half a unit each): totalUsd's rounding is divided by the
    # millions of frames (~0.003 here, so it dominates: +-1.7e-4 on a ~0.08 figure).
    half_unit = 0.5e-6
    millions = status["envFrames"] / 1e6
    assert status["usdPerMillionFrames"] == pytest.approx(
        status["totalUsd"] / millions, rel=0, abs=half_unit / millions + half_unit
    )
    learner = next(r for r in data["records"] if r["role"] == "learner")
    ((start, end),) = learner["intervals"]
    # The learner ran at least as long as the training it reported.
    assert end - start >= summary["seconds"]
    # 4 vCPU x 0.0445 + 16 GiB x 0.0049225 $/h (the packaged on-demand rates) for its seconds
    assert status["breakdown"]["learner"]["totalUsd"] == pytest.approx(
        (end - start) / 3600 * (4 * 0.0445 + 16 * 0.0049225), abs=2e-6
    )

    report = seedrl("cost", "e2e-cost", "--runs-dir", str(tmp_path), timeout=120)
    assert report.returncode == 0, report.stderr
    assert f"total:      ${status['totalUsd']:,.4f} USD" in report.stdout
