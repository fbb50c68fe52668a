"""The local runs in a runs directory: a table of them (`seedrl runs`) and their learning
curves (`seedrl plot`), read from the files each run directory holds.

A run directory (``runs/<name>/``) holds ``config.yaml`` (the resolved Experiment),
``status.json`` (the learner's latest snapshot), ``metrics.jsonl`` (one snapshot every few
seconds), ``summary.json`` once the run ended, and ``launcher.lock``, which the `seedrl train`
using the run holds locked (``flock``) while it runs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
from collections.abc import Iterator

import yaml

from seedrl.service.local.launcher import LOCK_FILE


@dataclasses.dataclass(frozen=True)
class RunRow:
    """One run, as `seedrl runs` lists it."""

    name: str
    agent: str
    env: str
    env_steps: int
    mean_return: float | None
    #: running, finished (the stop reason), failed (the error), or stopped.
    state: str


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def is_running(run_dir: str) -> bool:
    """Whether a `seedrl train` holds the run's lock now (a lock dies with its process)."""
    try:
        fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def run_row(run_dir: str) -> RunRow | None:
    """The row of one run directory, or None if it is not one (no readable config.yaml)."""
    try:
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(config, dict):
        return None
    spec = config.get("spec") or {}
    status = _read_json(os.path.join(run_dir, "status.json")) or {}
    summary = _read_json(os.path.join(run_dir, "summary.json"))
    if is_running(run_dir):
        state = "running"
    elif summary is None:
        state = "stopped"
    elif summary.get("error"):
        state = f"failed ({summary.get('stop_reason') or 'error'})"
    else:
        state = f"finished ({summary.get('stop_reason')})"
    mean = status.get("mean_return")
    source = summary if summary and not state == "running" else status
    return RunRow(
        name=os.path.basename(os.path.normpath(run_dir)),
        agent=str((spec.get("agent") or {}).get("name", "?")),
        env=str((spec.get("env") or {}).get("id", "?")),
        env_steps=int(source.get("env_steps") or status.get("env_steps") or 0),
        mean_return=float(mean) if isinstance(mean, (int, float)) else None,
        state=state,
    )


def list_runs(runs_dir: str) -> list[RunRow]:
    """Every run in ``runs_dir``, newest first (by its status file, else its config)."""
    rows = []
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return []
    for name in names:
        path = os.path.join(runs_dir, name)
        row = run_row(path) if os.path.isdir(path) else None
        if row is not None:
            rows.append((_mtime(path), row))
    return [row for _, row in sorted(rows, key=lambda t: (-t[0], t[1].name))]


def _mtime(run_dir: str) -> float:
    for name in ("status.json", "config.yaml"):
        try:
            return os.path.getmtime(os.path.join(run_dir, name))
        except OSError:
            continue
    return 0.0


def format_table(rows: list[RunRow]) -> str:
    """The runs as an aligned text table with a header."""
    table = [("NAME", "AGENT", "ENV", "ENV STEPS", "RETURN", "STATE")]
    for r in rows:
        ret = "-" if r.mean_return is None else f"{r.mean_return:.1f}"
        table.append((r.name, r.agent, r.env, f"{r.env_steps:,}", ret, r.state))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {3, 4}
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in table
    )


def curve(run_dir: str) -> Iterator[tuple[float, float, float]]:
    """(env frames, seconds of training, mean return) of each line of a run's
    ``metrics.jsonl`` that has a mean return."""
    try:
        fh = open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")  # noqa: SIM115
    except OSError:
        return
    with fh:
        for line in fh:
            try:
                point = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            mean = point.get("mean_return") if isinstance(point, dict) else None
            if not isinstance(mean, (int, float)) or not math.isfinite(mean):
                continue
            frames = point.get("env_frames") or point.get("env_steps") or 0
            yield float(frames), float(point.get("elapsed") or 0.0), float(mean)


def plot(run_dirs: list[str], out: str) -> int:
    """Draws the learning curves of ``run_dirs`` into the PNG ``out``: mean return against
    env frames and against training time, one line per run. Returns the points drawn.

    Raises:
      ValueError: no run has a point to draw.
      ImportError: matplotlib is missing (the ``plot`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    drawn = 0
    for run_dir in run_dirs:
        points = list(curve(run_dir))
        if not points:
            continue
        frames, seconds, returns = zip(*points)
        label = os.path.basename(os.path.normpath(run_dir))
        by_frames.plot(frames, returns, label=label)
        by_time.plot([s / 60 for s in seconds], returns, label=label)
        drawn += len(points)
    if not drawn:
        plt.close(fig)
        raise ValueError("no run has a mean return in its metrics.jsonl yet")
    by_frames.set_xlabel("env frames")
    by_time.set_xlabel("minutes of training")
    for ax in (by_frames, by_time):
        ax.set_ylabel("mean return (last episodes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return drawn
