"""Trains one Experiment and prints its learning curve: mean return against env frames.

    python bench/learning_curve.py --config examples/pong-vtrace.yaml --minutes 30 \
        [--set PATH=VALUE ...] [--points 20] [--json curve.json]

Frames count emulator frames (env steps times the Atari frame skip, 1 for other envs), as the
Atari literature reports them. The run lives in a temporary runs directory unless --runs-dir is
given; the table is taken from the learner's metrics log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from seedrl.common import finite_json
from seedrl.common.config import load_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def curve(rows: list[dict], points: int, skip: int) -> list[dict]:
    """Picks about ``points`` evenly spaced rows of the metrics log (always the last one)."""
    rows = [r for r in rows if r.get("env_steps")]
    if not rows:
        return []
    every = max(1, len(rows) // points)
    picked = rows[::every]
    if picked[-1] is not rows[-1]:
        picked.append(rows[-1])
    out = []
    for r in picked:
        out.append({"frames": r["env_steps"] * skip, "env_steps": r["env_steps"],
                    "seconds": r["elapsed"], "episodes": r["episodes"],
                    "mean_return": r["mean_return"], "learner_steps": r["learner_steps"],
                    "frames_per_s": r["env_steps"] * skip / max(r["elapsed"], 1e-9)})
    return out


def main(argv=None) -> int:
    from seedrl.service.local.launcher import LocalRun, prepare_run_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(ROOT, "examples", "pong-vtrace.yaml"))
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of the run")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="PATH=VALUE", help="override an Experiment field (repeatable)")
    p.add_argument("--points", type=int, default=20, help="rows of the printed curve")
    p.add_argument("--runs-dir", help="keep the run here instead of a temporary directory")
    p.add_argument("--json", help="also write the curve to this file")
    args = p.parse_args(argv)
    name = f"curve-{time.strftime('%Y%m%d-%H%M%S')}"
    exp = load_experiment(args.config, [*args.overrides, f"metadata.name={name}",
                                        f"spec.budget.maxSeconds={args.minutes * 60:g}"])
    skip = exp.spec.env.frames_per_step
    a = exp.spec.actors
    print(f"{exp.spec.env.id} / {exp.spec.agent.name} / {exp.spec.agent.network.name}: "
          f"{a.replicas} actors x {a.envs_per_actor} envs, {args.minutes:g} min on "
          f"{os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = prepare_run_dir(exp, args.runs_dir or tmp, resume=False)
        summary = LocalRun(exp, run_dir).run()
        with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
    table = curve(rows, args.points, skip)
    print(f"{'frames':>12} {'seconds':>8} {'episodes':>9} {'mean return':>12} "
          f"{'learner steps':>14} {'frames/s':>9}")
    for r in table:
        ret = "-" if r["mean_return"] is None else f"{r['mean_return']:.2f}"
        print(f"{r['frames']:>12,} {r['seconds']:>8.0f} {r['episodes']:>9,} {ret:>12} "
              f"{r['learner_steps']:>14,} {r['frames_per_s']:>9,.0f}")
    print(f"stopped: {summary.get('stop_reason')} after {summary.get('env_steps', 0) * skip:,} "
          f"frames in {summary.get('seconds', 0):.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump({"env": exp.spec.env.id, "frame_skip": skip, "summary": summary,
                       "curve": table}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
