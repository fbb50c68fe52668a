"""The distribution installs one top-level package, ``seedrl``, holding every package of ours."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("common", "learner", "actors", "service", "policy")


def _declared() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]["packages"]


def test_every_package_folder_is_declared():
    found = sorted(
        "seedrl." + str(Path(d).relative_to(ROOT)).replace(os.sep, ".")
        for top in FOLDERS
        for d, _, files in os.walk(ROOT / top)
        if "__init__.py" in files and "__pycache__" not in d
    )
    assert sorted(_declared()) == found


@pytest.mark.timeout(300)
def test_a_clean_venv_gets_only_seedrl_in_site_packages(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        timeout=240,
        capture_output=True,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = (
        venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    # Installed without its dependencies: this checks what *our* distribution puts there.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            *map(str, wheels.glob("seedrl-*.whl")),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
    assert top == ["bin", "seedrl"] or top == ["seedrl"], top
    assert sorted(p.name for p in (site / "seedrl").iterdir()) == sorted(FOLDERS)
    assert (site / "seedrl" / "service" / "cost" / "prices.yaml").exists()
    assert (site / "seedrl" / "common" / "seedrl.proto").exists()
    # PEP 561: type checkers use our annotations where seedrl is installed.
    assert all((site / "seedrl" / d / "py.typed").exists() for d in FOLDERS)


def test_no_module_imports_our_folders_by_their_top_level_names():
    # `from learner.runtime import ...` works from a checkout's root (the folder is on
    # sys.path there) but not where the wheel is installed: only seedrl.* exists there.
    bare = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(FOLDERS)})(?:\.|\s|$)", re.M)
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
        for top in (*FOLDERS, "tests", "bench")
        for path in (ROOT / top).rglob("*.py")
        for m in bare.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found
