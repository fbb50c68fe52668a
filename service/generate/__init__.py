"""The command line shared by the files generated from code (the CRD, the experiment chart's
values, the Grafana dashboards): ``--write`` rewrites the checked-in copies, ``--check`` exits
1 naming any that are out of date, and neither prints what would be written."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(prog: str, description: str, files: Mapping[Path, str],
         argv: Sequence[str] | None = None) -> int:
    """Writes, checks or prints ``files`` (path -> generated text); returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the checked-in files")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = p.parse_args(argv)
    if args.write:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {_shown(path)}")
        return 0
    if args.check:
        stale = [path for path, text in files.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != text]
        for path in stale:
            print(f"out of date: {_shown(path)} (run {prog} --write)", file=sys.stderr)
        return 1 if stale else 0
    for text in dict.fromkeys(files.values()):  # identical copies once
        sys.stdout.write(text)
    return 0
