"""R2D2 end to end: `seedrl train` with a learner, exploring actors and a greedy evaluator."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_r2d2_trains_from_replay_with_an_evaluation_actor(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "seedrl.service.cli",
        "train",
        str(ROOT / "examples" / "cartpole-r2d2.yaml"),
        "--quiet",
        "--runs-dir",
        str(tmp_path),
        "--set",
        "metadata.name=r2d2",
        "--set",
        "spec.budget.maxEnvSteps=12000",
        "--set",
        "spec.budget.targetReturn=null",
        "--set",
        "spec.actors.replicas=3",
        "--set",
        "spec.actors.envsPerActor=4",
        "--set",
        "spec.agent.r2d2.minReplaySize=16",
        "--set",
        "spec.agent.r2d2.samplesPerInsert=0",
        "--set",
        "spec.learner.batchSize=8",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    run_dir = tmp_path / "r2d2"
    logs = "".join(p.read_text()[-2000:] for p in run_dir.glob("*.log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    status = json.loads((run_dir / "status.json").read_text())
    assert status["learner_steps"] > 0
    assert status["metrics"]["replay_size"] >= 16
    assert status["episodes"] > 0 and status["eval_episodes"] > 0
    assert list((run_dir / "checkpoints").glob("ckpt-*/variables.index"))
    # The replay went into the checkpoint beside it.
    assert list((run_dir / "checkpoints").glob("ckpt-*/extra.npz"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval_episodes"] > 0 and summary["eval_mean_return"] > 0
