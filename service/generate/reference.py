"""The generated Reference pages under ``docs/reference/``: the Experiment's fields, its status,
the exit codes, the metrics and the command line, each written from the one declaration of what
it documents.

    python -m seedrl.service.generate.reference --write  # every page in docs/reference/
    python -m seedrl.service.generate.reference --check  # exit 1 naming any page out of date

(``make generate`` and ``make check-generated`` cover them with every other generated file.)
"""

from __future__ import annotations

import importlib
import sys

from seedrl.service import generate as generated

#: The modules that write the pages, each with ``outputs()``.
PAGES = (
    "seedrl.service.generate.reference_fields",
    "seedrl.service.generate.reference_exit_codes",
    "seedrl.service.generate.reference_metrics",
    "seedrl.service.generate.reference_cli",
)


def outputs() -> dict[str, str]:
    """Every Reference page (path relative to the root) and its text."""
    files: dict[str, str] = {}
    for name in PAGES:
        files.update(importlib.import_module(name).outputs())
    return files


def main(argv: list[str] | None = None) -> int:
    """``python -m seedrl.service.generate.reference [--write | --check] [--root DIR]``."""
    return generated.main(
        "python -m seedrl.service.generate.reference", __doc__.splitlines()[0], outputs, argv
    )


if __name__ == "__main__":
    sys.exit(main())
