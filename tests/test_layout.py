"""Who may import whom (CONTRIBUTING.md, "Layout"): ``common`` imports none of our packages;
``learner``, ``actors`` and ``service`` never import each other; ``policy`` stands above the
learner and the actors (it evaluates a learner's policy in the actors' envs) and nothing of
ours imports it. Every import is checked, the lazy ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: package -> the packages of ours it may import (besides itself).
ALLOWED = {
    "common": set(),
    "learner": {"common"},
    "actors": {"common"},
    "service": {"common"},
    "policy": {"common", "learner", "actors"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(our top-level package, line) for every import of ``seedrl.*`` in a module."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "seedrl":
                names = [f"seedrl.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "seedrl" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_the_layout_allows(package):
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports seedrl.{other}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for other, line in sorted(imported_packages(path))
        if other != package and other not in ALLOWED[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from seedrl.learner import runtime\n    import seedrl.actors.envs\n"
        "from seedrl import service\n"
    )
    assert {p for p, _ in imported_packages(module)} == {"learner", "actors", "service"}
