"""Each environment family runs through a learner and two actors, with its own network.

Atari with the Nature conv net, Football with the super-minimap net and with an MLP, MuJoCo with
continuous actions, a user's own registered env through ``spec.env.imports``, and an LSTM core:
a few hundred env steps and some training steps each, as real processes over a unix socket.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "spec.actors.envsPerActor=2",
    "spec.learner.batchSize=2",
    "spec.learner.unrollLength=10",
    "spec.budget.targetReturn=null",
]


def _train(tmp_path, example, name, steps, *overrides, env=None):
    cmd = [
        sys.executable,
        "-m",
        "seedrl.service.cli",
        "train",
        str(ROOT / "examples" / example),
        "--quiet",
        "--runs-dir",
        str(tmp_path),
        "--set",
        f"metadata.name={name}",
        "--set",
        f"spec.budget.maxEnvSteps={steps}",
    ]
    for o in SMALL + list(overrides):
        cmd += ["--set", o]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    run_dir = tmp_path / name
    assert proc.returncode == 0, proc.stdout + proc.stderr + _logs(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    status = json.loads((run_dir / "status.json").read_text())
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= steps
    assert status["learner_steps"] > 0
    return summary, status


def _logs(run_dir: Path) -> str:
    return "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(run_dir.glob("*.log"))
    )


def test_atari_pong_with_the_nature_network(tmp_path):
    _train(
        tmp_path,
        "pong-vtrace.yaml",
        "pong",
        400,
        "spec.actors.processesPerActor=0",
        "spec.agent.network.denseSize=64",
        # The example's 4 passes, in minibatches of one of the 2 unrolls.
        "spec.agent.vtrace.minibatches=2",
    )


def test_mujoco_halfcheetah_with_continuous_actions(tmp_path):
    summary, _ = _train(
        tmp_path, "halfcheetah-vtrace.yaml", "cheetah", 2200, "spec.actors.envsPerActor=1"
    )
    # HalfCheetah's time limit ends episodes at 1,000 steps.
    assert summary["episodes"] >= 2


@pytest.mark.parametrize("network", [[], ["spec.agent.network.lstmSize=16"]], ids=["mlp", "lstm"])
def test_users_own_environment_from_its_package(tmp_path, network):
    support = str(ROOT / "tests" / "support")
    summary, _ = _train(
        tmp_path,
        "cartpole-vtrace.yaml",
        "corridor",
        1500,
        "spec.env.id=SeedrlTest/Corridor-v0",
        "spec.env.imports=[seedrl_test_envs]",
        *network,
        env={"PYTHONPATH": os.pathsep.join(filter(None, [support, os.environ.get("PYTHONPATH")]))},
    )
    assert summary["episodes"] > 0


@pytest.mark.football
def test_football_with_the_super_minimap_network(tmp_path):
    _train(
        tmp_path,
        "football-vtrace.yaml",
        "football",
        300,
        "spec.actors.envsPerActor=1",
        "spec.agent.network.resnetChannels=[8, 8]",
        "spec.agent.network.denseSize=32",
    )


@pytest.mark.football
def test_football_simple115_with_an_mlp(tmp_path):
    _train(
        tmp_path,
        "football-vtrace.yaml",
        "football-115",
        300,
        "spec.actors.envsPerActor=1",
        "spec.env.football.representation=simple115v2",
        "spec.env.football.stacked=false",
        "spec.agent.network.name=mlp",
    )


def test_pong_with_r2d2(tmp_path):
    _, status = _train(
        tmp_path,
        "pong-r2d2.yaml",
        "pong-r2d2",
        600,
        "spec.actors.replicas=2",
        "spec.actors.streamsPerActor=1",
        "spec.agent.network.denseSize=32",
        "spec.agent.network.lstmSize=16",
        "spec.agent.r2d2.trainLength=10",
        "spec.agent.r2d2.burnIn=5",
        "spec.agent.r2d2.sequencePeriod=10",
        "spec.agent.r2d2.minReplaySize=4",
        "spec.agent.r2d2.samplesPerInsert=0",
        "spec.agent.r2d2.replayCapacity=64",
    )
    assert status["metrics"]["replay_size"] >= 4


@pytest.mark.parametrize(
    "example,overrides",
    [
        ("cartpole-ppo.yaml", ["spec.agent.ppo.minibatches=2"]),
        ("halfcheetah-ppo.yaml", ["spec.actors.envsPerActor=1", "spec.agent.ppo.minibatches=2"]),
    ],
    ids=["cartpole", "halfcheetah"],
)
def test_ppo_trains_through_learner_and_actors(tmp_path, example, overrides):
    _, status = _train(tmp_path, example, "ppo", 600, *overrides)
    assert "policy_lag" in status["metrics"] and "kl" in status["metrics"]
