"""`seedrl runs` and `seedrl plot` over run directories as `seedrl train` leaves them."""

import fcntl
import json
import subprocess
import sys

import matplotlib.image
import yaml

from seedrl.service.local import runs


def make_run(
    runs_dir, name, agent="vtrace", env="CartPole-v1", status=None, summary=None, metrics=()
):
    """A run directory with the files a run writes."""
    d = runs_dir / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(
        yaml.safe_dump(
            {"metadata": {"name": name}, "spec": {"agent": {"name": agent}, "env": {"id": env}}}
        )
    )
    if status is not None:
        (d / "status.json").write_text(json.dumps(status))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    with open(d / "metrics.jsonl", "w") as fh:
        for point in metrics:
            fh.write(json.dumps(point) + "\n")
        fh.write('{"cut short by a cra')  # a crash mid-line leaves this
    return d


def test_runs_are_listed_with_their_state(tmp_path):
    done = make_run(
        tmp_path,
        "done",
        status={"env_steps": 150, "mean_return": 480.5},
        summary={"env_steps": 160, "stop_reason": "target_return"},
    )
    failed = make_run(
        tmp_path,
        "broken",
        agent="ppo",
        env="Pendulum-v1",
        status={"env_steps": 0},
        summary={"stop_reason": "no_progress", "error": "every actor gave up"},
    )
    live = make_run(tmp_path, "live", agent="r2d2", status={"env_steps": 42})
    (tmp_path / "not-a-run").mkdir()
    with open(live / runs.LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as the launcher holds it
        rows = {r.name: r for r in runs.list_runs(str(tmp_path))}
        table = runs.format_table(list(rows.values()))
    assert set(rows) == {"done", "broken", "live"}
    assert rows["done"] == runs.RunRow(
        "done", "vtrace", "CartPole-v1", 160, 480.5, "finished (target_return)"
    )
    assert rows["broken"].state == "failed (no_progress)" and rows["broken"].agent == "ppo"
    assert rows["live"].state == "running" and rows["live"].env_steps == 42
    assert rows["live"].mean_return is None
    assert table.splitlines()[0].split() == [
        "NAME",
        "AGENT",
        "ENV",
        "ENV",
        "STEPS",
        "RETURN",
        "STATE",
    ]
    assert "480.5" in table and "160" in table
    # The lock died with its holder: the run is no longer running.
    assert runs.run_row(str(live)).state == "stopped"
    assert done.exists() and failed.exists()


def test_plot_draws_every_runs_curve_into_a_png(tmp_path):
    points = [
        {"env_frames": 1000 * i, "elapsed": 2.0 * i, "mean_return": 10.0 * i} for i in range(1, 30)
    ]
    make_run(tmp_path, "a", metrics=points)
    make_run(
        tmp_path, "b", metrics=[{"env_frames": 5, "elapsed": 1, "mean_return": None}] + points[:5]
    )
    out = tmp_path / "curves.png"
    assert runs.plot([str(tmp_path / "a"), str(tmp_path / "b")], str(out)) == 29 + 5
    image = matplotlib.image.imread(out)
    assert image.shape[0] == 450 and image.shape[1] == 1200


def test_the_cli_lists_runs_and_refuses_what_is_not_a_run(tmp_path):
    make_run(
        tmp_path,
        "a",
        status={"env_steps": 7},
        metrics=[{"env_frames": 1, "elapsed": 1, "mean_return": 3.0}],
    )
    cli = [sys.executable, "-m", "seedrl.service.cli"]
    listed = subprocess.run(
        cli + ["runs", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].split() == [
        "a",
        "vtrace",
        "CartPole-v1",
        "7",
        "-",
        "stopped",
    ], listed
    bad = subprocess.run(
        cli + ["plot", "nope", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "error: nope: not a run directory (no config.yaml)"
    )
    png = tmp_path / "x.png"
    drawn = subprocess.run(
        cli + ["plot", "a", "--runs-dir", str(tmp_path), "-o", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert drawn.returncode == 0 and png.stat().st_size > 0, drawn
