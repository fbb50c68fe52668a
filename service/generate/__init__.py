"""The files generated from code: the Experiment CRD, the experiment chart's values and schema,
the Grafana dashboards, the gRPC stubs and the Reference pages of the docs (``docs/reference/``).
One command line covers them all,

    python -m seedrl.service.generate [--write | --check] [--root DIR]

(``make generate`` and ``make check-generated``), and each generator module has the same one for
its own files. ``--write`` rewrites the checked-in copies under ``--root`` (default: the current
directory, a checkout's root when ``make`` runs it), ``--check`` exits 1 naming any that are out
of date, and neither prints what would be written. A generator is a module with ``outputs() ->
{path relative to the root: text}``; nothing here knows where the package itself lives.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Every generator, by module name.
GENERATORS = (
    "seedrl.service.operator.crd",
    "seedrl.service.generate.chart_values",
    "seedrl.service.generate.dashboards",
    "seedrl.service.generate.proto",
    "seedrl.service.generate.reference",
)


def outputs(generators: Sequence[str] = GENERATORS) -> dict[str, str]:
    """Every generated file (path relative to the root) and the text it should hold."""
    files: dict[str, str] = {}
    for name in generators:
        files.update(importlib.import_module(name).outputs())
    return files


def stale(root: Path, files: Mapping[str, str]) -> list[str]:
    """The files under ``root`` that are missing or differ from what is generated now."""
    return [
        path
        for path, text in files.items()
        if not (root / path).exists() or (root / path).read_text(encoding="utf-8") != text
    ]


def write(root: Path, files: Mapping[str, str]) -> None:
    """Writes every file under ``root``."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")


def main(
    prog: str,
    description: str,
    files: Callable[[], Mapping[str, str]],
    argv: Sequence[str] | None = None,
) -> int:
    """Writes, checks or prints what ``files()`` generates; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the checked-in files")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    p.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        help="the repository root the paths are relative to (default: .)",
    )
    args = p.parse_args(argv)
    generated = files()
    if args.write:
        write(args.root, generated)
        for path in generated:
            print(f"wrote {path}")
        return 0
    if args.check:
        out_of_date = stale(args.root, generated)
        for path in out_of_date:
            print(f"out of date: {path} (run {prog} --write)", file=sys.stderr)
        return 1 if out_of_date else 0
    for text in dict.fromkeys(generated.values()):  # identical copies once
        sys.stdout.write(text)
    return 0
