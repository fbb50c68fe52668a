"""The docs stay true to the tree: docs/architecture.md names only files that exist (and the
README links to it), and every seedrl command and make target the docs show exists."""

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


def _shell_blocks() -> list[tuple[str, str]]:
    """The shell blocks (```sh) of the README and the docs site, with their pages. Other blocks
    are output, diagrams and usage texts."""
    pattern = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)
    return [
        (str(page.relative_to(ROOT)), block)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for block in pattern.findall(page.read_text(encoding="utf-8"))
    ]


def _documented_command_lines() -> list[tuple[str, str]]:
    """Every ``seedrl`` command line of the shell blocks, with its page: continuation lines
    joined, trailing comments dropped."""
    found = []
    for page, block in _shell_blocks():
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if re.match(r"(\.venv/bin/)?seedrl ", line):
                found.append((page, line))
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


def test_every_make_target_the_docs_show_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    shown = [
        (page, target)
        for page, block in _shell_blocks()
        for target in re.findall(r"^\s*make ([a-z][\w-]*)", block, re.M)
    ]
    assert len(shown) > 5
    missing = [
        f"{page.relative_to(ROOT)}: make {target}"
        for page, target in shown
        if target not in targets
    ]
    assert not missing, missing
