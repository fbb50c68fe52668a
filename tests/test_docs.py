"""The docs stay true to the tree: docs/architecture.md names only files that exist (and the
README links to it), and every seedrl command the docs show parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def test_every_path_the_map_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+/[\w/.<>-]*?)(?::\w+)?`", text))
    paths = [p for p in named if "<" not in p and "*" not in p]
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_the_readme_links_the_map():
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def _documented_command_lines() -> list[tuple[str, str]]:
    """Every ``seedrl`` command line in the shell blocks (```sh) of the README and the docs site,
    with its page: continuation lines joined, trailing comments dropped. Other blocks are
    output, diagrams and usage texts."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        blocks = re.findall(
            r"^```(?:sh|bash|shell)\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S
        )
        for block in blocks:
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if re.match(r"(\.venv/bin/)?seedrl ", line):
                    found.append((str(page.relative_to(ROOT)), line))
    return found


def test_every_documented_seedrl_command_parses_and_names_files_that_exist():
    from seedrl.service.cli.main import parser

    lines = _documented_command_lines()
    assert len(lines) > 15  # the quickstart, the guides and the reference all show commands
    problems = []
    for page, line in lines:
        argv = shlex.split(line)[1:]
        # Placeholders (<name>, NAME) stand for what the reader fills in.
        argv = [re.sub(r"<[^>]+>", "x", arg) for arg in argv]
        try:
            parser().parse_args(argv)
        except SystemExit:
            problems.append(f"{page}: {line}")
            continue
        for arg in argv:
            if re.fullmatch(r"(examples|k8s)/[\w./-]+\.yaml", arg) and not (ROOT / arg).exists():
                problems.append(f"{page}: {line}: no file {arg}")
    assert not problems, "\n".join(problems)
