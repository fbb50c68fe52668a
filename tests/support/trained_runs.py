"""Tiny real training runs, made once per test session: checkpoints for the policy tests, and
the helpers that read what is made of them (observations, a SavedModel in plain TensorFlow).

Each is ``seedrl train`` of an example for a few thousand env steps (a learner and two actors
as real processes), one per kind of policy: discrete (V-trace on CartPole), continuous with
asymmetric bounds (PPO on ``SeedrlTest/AsymmetricPendulum-v0``, torque in [-0.5, 3.0]) and
recurrent (R2D2 with an LSTM core that reads the previous action and reward). The three train
side by side, so the session pays for the slowest only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"

#: The env each run trained on.
ENVS = {"vtrace": "CartPole-v1", "ppo": "SeedrlTest/AsymmetricPendulum-v0", "r2d2": "CartPole-v1"}
#: name -> (example, env steps, overrides)
RUNS = {
    "vtrace": (
        "cartpole-vtrace.yaml",
        3000,
        ["spec.actors.envsPerActor=4", "spec.learner.batchSize=2", "spec.learner.unrollLength=20"],
    ),
    "ppo": (
        "pendulum-ppo.yaml",
        3000,
        [
            "spec.env.id=SeedrlTest/AsymmetricPendulum-v0",
            "spec.env.imports=[seedrl_test_envs]",
            "spec.learner.batchSize=4",
            "spec.learner.unrollLength=32",
            "spec.agent.ppo.epochs=2",
            "spec.agent.ppo.minibatches=2",
        ],
    ),
    "r2d2": (
        "cartpole-r2d2.yaml",
        3000,
        [
            "spec.actors.replicas=2",
            "spec.actors.envsPerActor=4",
            "spec.agent.network.lstmSize=16",
            "spec.agent.network.actionRewardInputs=true",
            "spec.agent.r2d2.trainLength=8",
            "spec.agent.r2d2.sequencePeriod=8",
            "spec.agent.r2d2.burnIn=2",
            "spec.agent.r2d2.nStep=2",
            "spec.agent.r2d2.minReplaySize=20",
            "spec.agent.r2d2.replayCapacity=500",
            "spec.learner.batchSize=8",
        ],
    ),
}


def rollout_observations(env_id: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations of the real env under random actions, over several episodes."""
    import support.seedrl_test_envs  # noqa: F401 - registers the asymmetric pendulum

    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    while len(out) < n:
        out.append(np.asarray(obs, np.float32))
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    return np.stack(out)


def copy_store_to_gcs(local_dir, bucket: str) -> str:
    """Uploads a local checkpoint store to ``gs://bucket/exp/run`` (the emulator's); returns
    that URI."""
    from seedrl.common.storage import GCSStore

    store = GCSStore(bucket, "exp/run")
    for name in os.listdir(local_dir):
        path = os.path.join(local_dir, name)
        if os.path.isdir(path):
            for f in os.listdir(path):
                store.upload_file(f"{name}/{f}", os.path.join(path, f))
        elif not name.startswith("."):
            store.upload_file(name, path)
    return f"gs://{bucket}/exp/run"


def child_env() -> dict[str, str]:
    """The environment of a child that may need the test env package."""
    path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory) -> dict[str, Path]:
    """The run directory of each tiny run, by agent."""
    runs_dir = tmp_path_factory.mktemp("runs")
    procs = {}
    for name, (example, steps, overrides) in RUNS.items():
        cmd = [
            sys.executable,
            "-m",
            "seedrl.service.cli",
            "train",
            str(ROOT / "examples" / example),
            "--quiet",
            "--runs-dir",
            str(runs_dir),
            "--set",
            f"metadata.name={name}",
            "--set",
            f"spec.budget.maxEnvSteps={steps}",
            "--set",
            "spec.budget.targetReturn=null",
        ]
        for o in overrides:
            cmd += ["--set", o]
        procs[name] = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    out = {}
    for name, proc in procs.items():
        log, _ = proc.communicate(timeout=600)
        run_dir = runs_dir / name
        assert proc.returncode == 0, log + _tail(run_dir / "learner.log")
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["env_steps"] >= RUNS[name][1], summary
        out[name] = run_dir
    return out


def _tail(path: Path) -> str:
    try:
        return path.read_text()[-3000:]
    except OSError:
        return ""


#: Runs the SavedModel's serving signature over observations (.npy), writing its outputs.
_PLAIN_TF = r"""
import sys
try:
    import seedrl
except ImportError:
    pass
else:
    raise SystemExit("seedrl is importable: the check would prove nothing")
import json
import numpy as np
import tensorflow as tf

model_dir, obs_path, out_path, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model = tf.saved_model.load(model_dir)
serve = model.signatures["serving_default"]
inputs = {s.name: s for s in tf.nest.flatten(serve.structured_input_signature)}
obs = np.load(obs_path)
batch = len(obs) // steps
state = {name: np.zeros([batch, spec.shape[-1]], np.float32)
         for name, spec in inputs.items() if name not in ("observation", "reward")}
actions = []
for t in range(steps):
    feed = {"observation": tf.constant(obs[t * batch:(t + 1) * batch])}
    if "reward" in inputs:
        feed["reward"] = tf.zeros([batch])
    feed.update({k: tf.constant(v) for k, v in state.items()})
    out = serve(**feed)
    state = {k: out[k].numpy() for k in state}
    actions.append(out["action"].numpy())
np.save(out_path, np.concatenate(actions))
print(json.dumps({"signatures": sorted(model.signatures), "inputs": sorted(inputs),
                  "outputs": sorted(serve.structured_outputs)}))
"""


def plain_tensorflow(model_dir: Path, obs: np.ndarray, steps: int, tmp_path: Path):
    """Runs the SavedModel in a process with TensorFlow only; returns (actions, description)."""
    np.save(tmp_path / "obs.npy", obs)
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys\n"
        f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n"
        f"sys.path.append({sysconfig.get_paths()['platlib']!r})\n" + _PLAIN_TF
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir(exist_ok=True)
    proc = subprocess.run(
        # -I: no PYTHONPATH, no user site, no script dir; -S: no site, so no .pth hooks.
        [sys.executable, "-I", "-S", str(script), str(model_dir), "obs.npy", "out.npy", str(steps)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2", "HOME": str(outside)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(tmp_path / "out.npy"), json.loads(proc.stdout.strip().splitlines()[-1])
