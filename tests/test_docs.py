"""docs/architecture.md stays a true map: every file and folder it names exists, and the
README links to it."""

from __future__ import annotations

import re
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
