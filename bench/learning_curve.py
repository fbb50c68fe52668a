"""Trains one Experiment and records its learning curve: a JSON table and a PNG picture.

    python bench/learning_curve.py --config examples/pong-vtrace.yaml --minutes 120 \
        --json bench-atari.json [--resume] [--set PATH=VALUE ...] [--target 0]

The run lives in ``RUNS_DIR/NAME`` (``runs/curve-<config name>`` by default). ``--resume``
continues it from its last checkpoint for another ``--minutes`` (or starts it if it does not
exist yet), so a long curve can be built over several sessions; the curve stitches the
sessions' metrics together, dropping whatever a crash lost since its last checkpoint. The
Experiment's own budget (``spec.budget``) still ends the run for good.

The PNG (``--png``, default: the JSON's path with .png) shows the mean return of the last
``returnWindow`` episodes against environment frames and against wall time, the greedy
evaluation return too where the agent has evaluation actors, with the level of a uniformly
random policy (measured here, once per run, over ``--random-episodes`` episodes) and the
target drawn across. Frames count emulator frames (env steps times the Atari frame skip, 1 for
other envs), as the Atari literature reports them. Each session's wall time, CPU model and
flags, cores, load and precision are recorded: figures taken while other work shares the
machine are not representative, and CPUs with and without native bfloat16 differ several-fold.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from seedrl.common import finite_json
from seedrl.common.config import load_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.common.hardware import machine_facts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Points of the curve kept in the JSON and drawn.
PLOT_POINTS = 400


def stitch(rows: list[dict]) -> list[dict]:
    """The metrics rows of one run over its sessions, in order of env steps.

    A resumed learner starts again from its last checkpoint: rows the previous session wrote
    after that checkpoint (at or beyond the env steps the new session starts from) were lost
    with it, and are dropped.
    """
    out: list[dict] = []
    for row in rows:
        if not row.get("env_steps"):
            continue
        while out and out[-1]["env_steps"] >= row["env_steps"]:
            out.pop()
        out.append(row)
    return out


def curve(rows: list[dict], points: int, skip: int) -> list[dict]:
    """About ``points`` evenly spaced rows of the stitched metrics (always the last one)."""
    rows = stitch(rows)
    if not rows:
        return []
    every = max(1, len(rows) // points)
    picked = rows[::every]
    if picked[-1] is not rows[-1]:
        picked.append(rows[-1])
    return [point(r, skip) for r in picked]


def point(row: dict, skip: int) -> dict:
    """One curve point from a metrics row."""
    return {
        "frames": row["env_steps"] * skip,
        "env_steps": row["env_steps"],
        "seconds": row["elapsed"],
        "episodes": row["episodes"],
        "mean_return": row.get("mean_return"),
        "eval_mean_return": row.get("eval_mean_return"),
        "learner_steps": row["learner_steps"],
        "frames_per_s": row["env_steps"] * skip / max(row["elapsed"], 1e-9),
    }


def random_return(exp, episodes: int, seed: int = 12345) -> float:
    """Mean undiscounted return of a uniformly random policy on the Experiment's env (its
    preprocessing and time limit included), over ``episodes`` episodes."""
    from seedrl.actors.envs import make_env

    env = make_env(exp.spec.env)
    env.action_space.seed(seed)
    total = 0.0
    try:
        for i in range(episodes):
            env.reset(seed=seed + i)
            done = False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
    finally:
        env.close()
    return total / max(episodes, 1)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def plot(data: dict, path: str) -> None:
    """Draws the curve: return against frames and against wall time, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["points"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    frames = [r["frames"] for r in rows]
    minutes = [r["seconds"] / 60 for r in rows]
    train = [math.nan if r["mean_return"] is None else r["mean_return"] for r in rows]
    evals = [math.nan if r.get("eval_mean_return") is None else r["eval_mean_return"] for r in rows]
    has_eval = any(not math.isnan(v) for v in evals)
    for ax, xs, label in (
        (axes[0], frames, "environment frames"),
        (axes[1], minutes, "wall time (minutes)"),
    ):
        ax.plot(
            xs,
            train,
            color="tab:blue",
            label=f"mean return (last {data['return_window']} episodes)",
        )
        if has_eval:
            ax.plot(xs, evals, color="tab:purple", label="greedy evaluation return")
        if data.get("random_return") is not None:
            ax.axhline(
                data["random_return"],
                color="gray",
                linestyle="--",
                label=f"random policy ({_fmt(data['random_return'])})",
            )
        if data.get("target_return") is not None:
            ax.axhline(
                data["target_return"],
                color="tab:green",
                linestyle=":",
                label=f"target ({_fmt(data['target_return'])})",
            )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return")
    axes[0].legend(loc="best", fontsize=8)
    cores = sorted({s["cores"] for s in data["sessions"]})
    # Sessions written before the CPU was recorded say so rather than guess it.
    cpus = sorted({s.get("cpu_model") or "CPU not recorded" for s in data["sessions"]})
    last = rows[-1] if rows else {"frames": 0, "seconds": 0}
    fig.suptitle(
        f"{data['env']} / {data['agent']}: {last['frames']:,} frames in "
        f"{last['seconds'] / 60:.0f} min on {'/'.join(map(str, cores))} cores of "
        f"{' / '.join(cpus)} ({len(data['sessions'])} session(s))",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _read_rows(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def earlier_sessions(json_path: str, resumed_rows: list[dict]) -> dict:
    """The curve JSON this session continues: the one at ``json_path`` when the run resumes
    (its directory already holds metrics rows), else nothing. A JSON left by a run whose
    directory was deleted describes another run: its sessions and random level are not this
    one's."""
    return _read_json(json_path) if resumed_rows else {}


def main(argv=None) -> int:
    from seedrl.service.local.launcher import LocalRun, RunDirError, prepare_run_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(ROOT, "examples", "pong-vtrace.yaml"))
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of this session")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override an Experiment field (repeatable)",
    )
    p.add_argument("--name", help="the run's name (default: curve-<config file name>)")
    p.add_argument(
        "--runs-dir",
        default=os.path.join(ROOT, "runs"),
        help="where the run directory lives (default: runs/)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run from its last checkpoint (or start it)",
    )
    p.add_argument("--points", type=int, default=20, help="rows of the printed table")
    p.add_argument("--json", help="write the curve here (default: <run dir>/curve.json)")
    p.add_argument("--png", help="draw the curve here (default: the JSON path with .png)")
    p.add_argument(
        "--target",
        type=float,
        help="the return to draw as the target (default: spec.budget.targetReturn)",
    )
    p.add_argument(
        "--random-episodes",
        type=int,
        default=10,
        help="episodes of a random policy for the random level (0: not drawn)",
    )
    args = p.parse_args(argv)
    stem = os.path.splitext(os.path.basename(args.config))[0]
    name = args.name or f"curve-{stem}"
    run_dir = os.path.join(os.path.abspath(args.runs_dir), name)
    json_path = args.json or os.path.join(run_dir, "curve.json")
    png_path = args.png or os.path.splitext(json_path)[0] + ".png"
    done_before = stitch(_read_rows(run_dir)) if args.resume else []
    previous = earlier_sessions(json_path, done_before)
    elapsed_before = done_before[-1]["elapsed"] if done_before else 0.0
    # spec.budget.maxSeconds counts the run's whole training time, sessions before included.
    exp = load_experiment(
        args.config,
        [
            *args.overrides,
            f"metadata.name={name}",
            f"spec.budget.maxSeconds={elapsed_before + args.minutes * 60:g}",
        ],
    )
    skip = exp.spec.env.frames_per_step
    a = exp.spec.actors
    cores = os.cpu_count()
    print(
        f"{exp.spec.env.id} / {exp.spec.agent.name} / {exp.spec.agent.network.name}: "
        f"{a.replicas} actors x {a.envs_per_actor} envs, {args.minutes:g} min on {cores} "
        f"cores of {machine_facts()['cpu']}"
        f"{f', resuming at {elapsed_before / 60:.0f} min' if done_before else ''}",
        flush=True,
    )
    try:
        held = prepare_run_dir(exp, args.runs_dir, resume=args.resume)
    except RunDirError as exc:
        print(f"learning_curve: {exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    random_level = previous.get("random_return")
    if random_level is None and args.random_episodes:
        random_level = random_return(exp, args.random_episodes)
        print(f"random policy: {random_level:.3f} over {args.random_episodes} episodes", flush=True)
    # The machine of this session (CPU model and flags beside cores and load): sessions of
    # one curve may run on different machines.
    session = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "minutes": args.minutes,
        **machine_facts(),
    }
    summary = LocalRun(exp, run_dir, run_lock=held).run()
    session.update(
        {
            "stop_reason": summary.get("stop_reason"),
            "env_steps": summary.get("env_steps"),
            "precision": summary.get("precision"),
        }
    )
    rows = stitch(_read_rows(run_dir))
    table = curve(rows, args.points, skip)
    print(
        f"{'frames':>12} {'seconds':>8} {'episodes':>9} {'mean return':>12} "
        f"{'eval return':>12} {'learner steps':>14} {'frames/s':>9}"
    )
    for r in table:
        ret = "-" if r["mean_return"] is None else f"{r['mean_return']:.2f}"
        ev = "-" if r["eval_mean_return"] is None else f"{r['eval_mean_return']:.2f}"
        print(
            f"{r['frames']:>12,} {r['seconds']:>8.0f} {r['episodes']:>9,} {ret:>12} "
            f"{ev:>12} {r['learner_steps']:>14,} {r['frames_per_s']:>9,.0f}"
        )
    last = rows[-1] if rows else {}
    print(
        f"stopped: {summary.get('stop_reason')} after "
        f"{last.get('env_steps', 0) * skip:,} frames in {last.get('elapsed', 0):.0f} s"
    )
    target = args.target if args.target is not None else exp.spec.budget.target_return
    data = {
        "env": exp.spec.env.id,
        "agent": exp.spec.agent.name,
        "config": os.path.relpath(os.path.abspath(args.config), ROOT),
        "overrides": args.overrides,
        "frame_skip": skip,
        "return_window": exp.spec.budget.return_window,
        "random_return": random_level,
        "target_return": target,
        "sessions": [*previous.get("sessions", []), session],
        "summary": summary,
        "curve": table,
        # Enough points to draw from, few enough to keep beside the README.
        "points": curve(rows, PLOT_POINTS, skip),
    }
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w", encoding="utf-8") as fh:
        finite_json.dump(data, fh, indent=1)
    plot(data, png_path)
    print(f"curve: {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
