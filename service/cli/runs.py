"""`seedrl runs` (the local runs, a line each) and `seedrl plot RUN [RUN ...]` (their learning
curves as a PNG), over the run directories of service/local/runs.py."""

from __future__ import annotations

import os
import sys

from seedrl.common.exit_codes import ExitCode
from seedrl.service.local import runs


def add_parsers(sub) -> None:
    """Adds the ``runs`` and ``plot`` commands to the CLI's subparsers."""
    p = sub.add_parser("runs", help="list the local runs: name, agent, env, steps, return, state")
    p.add_argument("--runs-dir", default="runs", help="where local run directories live")
    p = sub.add_parser(
        "plot",
        help="draw learning curves of runs into a PNG",
        description="Draws the mean return of each run against env frames and against "
        "training time, from the runs' metrics.jsonl, into one PNG.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="a run name (in --runs-dir) or directory")
    p.add_argument("--runs-dir", default="runs", help="where local run directories live")
    p.add_argument("-o", "--output", default="curves.png", help="the PNG to write")


def cmd_runs(args) -> int:
    """Prints the runs of ``--runs-dir``, newest first."""
    rows = runs.list_runs(args.runs_dir)
    if not rows:
        print(f"no runs in {args.runs_dir}/ (seedrl train FILE makes one)", file=sys.stderr)
        return ExitCode.OK
    print(runs.format_table(rows))
    return ExitCode.OK


def cmd_plot(args) -> int:
    """Writes the learning curves of the named runs."""
    dirs = []
    for name in args.runs:
        path = name if os.path.isdir(name) else os.path.join(args.runs_dir, name)
        if runs.run_row(path) is None:
            print(f"error: {name}: not a run directory (no config.yaml)", file=sys.stderr)
            return ExitCode.BAD_CONFIG
        dirs.append(path)
    try:
        points = runs.plot(dirs, args.output)
    except ImportError:
        print("error: seedrl plot needs matplotlib: pip install 'seedrl[plot]'", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"wrote {args.output} ({len(dirs)} run(s), {points} points)")
    return ExitCode.OK
