"""bench/gpu.py (`make bench-gpu`) as a CPU smoke test: a few seconds of Pong with 2 actors,
its JSON on stdout with every figure present and positive."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_bench_prints_its_figures_as_json_on_a_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu.py"),
            "--actors",
            "2",
            "--warmup",
            "12",
            "--seconds",
            "8",
            # Small batches so that updates come every second or so on a shared CPU.
            "--set",
            "spec.actors.envsPerActor=4",
            "--set",
            "spec.learner.batchSize=4",
            "--set",
            "spec.learner.unrollLength=8",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["actors"] == 2 and result["envs_per_actor"] == 4
    if shutil.which("nvidia-smi") is None:
        assert result["gpu"] == {"skipped": "no nvidia-smi on this machine"}
    cpu = result["cpu"]
    for key in (
        "frames_per_s",
        "env_steps_per_s",
        "learner_updates_per_s",
        "mean_inference_batch",
        "inference_calls_per_s",
    ):
        assert cpu[key] > 0, key
    assert cpu["frames_per_s"] == 4 * cpu["env_steps_per_s"]  # Pong skips 4 frames a step
    assert cpu["mean_inference_batch"] <= 8  # at most every env of the run in one call
    for key in ("inference_latency", "actor_round_trip"):
        figures = cpu[key]
        assert figures["n"] > 0 and figures["mean_ms"] > 0 and figures["p99_ms"] > 0, key
        assert figures["p50_ms"] <= figures["p99_ms"], key
    assert "CPU" in cpu["learner_devices"] and cpu["gpu_utilization"] is None
