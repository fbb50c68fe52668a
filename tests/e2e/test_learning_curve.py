"""bench/learning_curve.py: a real short run drawn as JSON and PNG, then resumed."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "learning_curve", ROOT / "bench" / "learning_curve.py"
)
learning_curve = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(learning_curve)


def test_stitching_drops_what_a_crash_lost_after_the_last_checkpoint():
    rows = [{"env_steps": s, "elapsed": s / 10} for s in (0, 100, 200, 300, 400)]
    # The learner died at 400 and resumed from its checkpoint at 200.
    rows += [{"env_steps": s, "elapsed": s / 10} for s in (250, 350, 450)]
    assert [r["env_steps"] for r in learning_curve.stitch(rows)] == [100, 200, 250, 350, 450]


def _session(tmp_path, *extra):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning_curve.py"),
            "--config",
            str(ROOT / "examples" / "cartpole-vtrace.yaml"),
            "--name",
            "curve",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--json",
            str(tmp_path / "curve.json"),
            "--minutes",
            "0.3",
            "--random-episodes",
            "3",
            "--set",
            "spec.actors.replicas=1",
            "--set",
            "spec.checkpoint.intervalSeconds=5",
            # The example can reach its target within one session, which ends the run: the
            # target is only drawn here, so that the second session has a run to continue.
            "--set",
            "spec.budget.targetReturn=null",
            "--target",
            "475",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def test_a_new_run_does_not_inherit_the_sessions_of_a_deleted_one(tmp_path):
    """`--resume` with no run directory starts a run: the curve JSON an earlier run left at the
    same path (its directory deleted to start over) is not this run's history."""
    old = tmp_path / "curve.json"
    old.write_text(json.dumps({"sessions": [{"cores": 2}], "random_return": -21.0}))
    assert learning_curve.earlier_sessions(str(old), []) == {}
    rows = [{"env_steps": 10, "elapsed": 1.0}]
    assert learning_curve.earlier_sessions(str(old), rows)["random_return"] == -21.0
    assert learning_curve.earlier_sessions(str(tmp_path / "missing.json"), rows) == {}


def test_a_curve_is_drawn_and_a_second_session_continues_it(tmp_path):
    first = _session(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    data = json.loads((tmp_path / "curve.json").read_text())
    png = tmp_path / "curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["random_return"] > 5 and data["target_return"] == 475
    assert len(data["sessions"]) == 1 and data["sessions"][0]["cores"] >= 1
    assert data["sessions"][0]["stop_reason"] == "max_seconds"
    # Each session names the machine that made it and the precision its learner chose.
    session = data["sessions"][0]
    assert session["cpu_model"] and session["cpu"] and "load_average" in session
    assert session["precision"]["requested"] == "auto"
    assert session["precision"]["precision"] == "float32"  # an MLP: float32 everywhere
    steps = data["points"][-1]["env_steps"]
    assert steps > 0
    # Without --resume the run directory is left alone; with it the run goes on.
    refused = _session(tmp_path)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    second = _session(tmp_path, "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    data = json.loads((tmp_path / "curve.json").read_text())
    assert len(data["sessions"]) == 2
    points = data["points"]
    assert points[-1]["env_steps"] > steps
    assert all(a["env_steps"] < b["env_steps"] for a, b in zip(points, points[1:]))
    assert data["random_return"] > 5  # measured once, kept
