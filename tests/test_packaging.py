"""The distribution installs one top-level package, ``seedrl``, holding every package of ours."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("common", "learner", "actors", "service")


def _declared() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]["packages"]


def test_every_package_folder_is_declared():
    found = sorted("seedrl." + str(Path(d).relative_to(ROOT)).replace(os.sep, ".")
                   for top in FOLDERS for d, _, files in os.walk(ROOT / top)
                   if "__init__.py" in files and "__pycache__" not in d)
    assert sorted(_declared()) == found


@pytest.mark.timeout(300)
def test_a_clean_venv_gets_only_seedrl_in_site_packages(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True,
                   timeout=240, capture_output=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages"
    # Installed without its dependencies: this checks what *our* distribution puts there.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(site), *map(str, wheels.glob("seedrl-*.whl"))],
                   check=True, timeout=120, capture_output=True)
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
    assert top == ["bin", "seedrl"] or top == ["seedrl"], top
    assert sorted(p.name for p in (site / "seedrl").iterdir()) == sorted(FOLDERS)
    assert (site / "seedrl" / "service" / "cost" / "prices.yaml").exists()
    assert (site / "seedrl" / "common" / "seedrl.proto").exists()


def test_imports_of_our_packages_go_through_seedrl():
    # `from learner.runtime import ...` resolves from a checkout's root (python -m puts the
    # working directory on sys.path) but not in an image or an installed wheel, where only
    # seedrl.* exists; it would also load a second copy of the module beside seedrl.learner's.
    import ast

    bad = []
    files = sorted(p for top in (*FOLDERS, "tests", "bench") for p in (ROOT / top).rglob("*.py"))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                    if n.split(".")[0] in FOLDERS]
    assert not bad, "\n".join(bad)
