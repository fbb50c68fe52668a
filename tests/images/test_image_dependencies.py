"""Each image's requirement list, installed alone into a fresh virtualenv, runs that image's code.

This is what the image build does short of Docker: a virtualenv from images/<image>.txt pinned by
constraints.txt, and only the source packages the Dockerfile copies. It catches a dependency
that the main virtualenv happens to have but the image would lack (gymnasium's MuJoCo envs
import `packaging` without declaring it, for one). Slow: it installs every dependency.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_ACTOR = """
import sys
sys.modules["tensorflow"] = None  # actors must not need it
from seedrl.actors.main import make_env_batches
from seedrl.common.config import parse_experiment
import seedrl.actors.client, seedrl.actors.process_envs
for env in ["CartPole-v1", "ALE/Pong-v5", "HalfCheetah-v5"]:
    exp = parse_experiment({"metadata": {"name": "x"},
                            "spec": {"env": {"id": env}, "actors": {"envsPerActor": 2}}})
    for batch in make_env_batches(exp, 0):
        batch.close()
print("ok")
"""

_LEARNER = """
import pkgutil, importlib, seedrl.learner
for info in pkgutil.walk_packages(seedrl.learner.__path__, "seedrl.learner."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
print("ok")
"""

_OPERATOR = """
import seedrl.service.operator.handlers, seedrl.service.operator.reconcile
import seedrl.service.operator.crd
print("ok")
"""

IMAGES = {
    # image: (requirement lists, extra requirements, source packages, smoke code, entry module)
    "actor": (["actor.txt"], [], ["common", "actors"], _ACTOR, "seedrl.actors"),
    "learner": (
        ["learner.txt"],
        ["tensorflow-cpu"],
        ["common", "learner"],
        _LEARNER,
        "seedrl.learner",
    ),
    "operator": (["operator.txt"], [], ["common", "service"], _OPERATOR, "seedrl.service.operator"),
}


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("image", IMAGES)
def test_requirement_list_alone_runs_the_image_code(image, tmp_path):
    lists, extra, packages, smoke, entry = IMAGES[image]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    requirements = [arg for name in lists for arg in ("-r", str(ROOT / "images" / name))]
    install = subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            "-c",
            str(ROOT / "constraints.txt"),
            *requirements,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=1000,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    app = tmp_path / "app"
    for package in packages:
        # As the Dockerfiles copy them: under seedrl/, the name they are imported by.
        shutil.copytree(
            ROOT / package, app / "seedrl" / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(app),
        "HOME": str(tmp_path),
        "MUJOCO_GL": "disable",
        "KERAS_HOME": str(tmp_path / "keras"),
    }
    python = str(venv / "bin" / "python")
    run = subprocess.run(
        [python, "-c", smoke], cwd=app, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
    usage = subprocess.run(
        [python, "-m", entry, "--help"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert usage.returncode == 0 and "usage:" in usage.stdout, usage.stderr[-3000:]
