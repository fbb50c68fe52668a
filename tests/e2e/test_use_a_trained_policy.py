"""The loop a user closes after `make run`: train CartPole to 475, evaluate it, watch it,
export it (issue 28's done-when, with the commands a user types)."""

from __future__ import annotations

import json
import subprocess
import sys

import imageio.v3 as iio
import numpy as np
import pytest

import seedrl.policy
from support.trained_runs import ROOT, child_env, rollout_observations
from support.trained_runs import plain_tensorflow


def seedrl_cli(*args, cwd=ROOT):
    proc = subprocess.run(
        [sys.executable, "-m", "seedrl.service.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_evaluate_watch_and_export_cartpole(tmp_path):
    seedrl_cli("train", "examples/cartpole-vtrace.yaml", "--quiet", "--runs-dir", str(tmp_path))
    run = tmp_path / "cartpole-vtrace"
    out = seedrl_cli("eval", str(run), "--episodes", "20", "--quiet", cwd=tmp_path).stdout
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["episodes"] == 20 and report["return"]["mean"] >= 475, out
    assert list((run / "eval").glob("*.json"))

    seedrl_cli("eval", str(run), "--episodes", "1", "--video", "cartpole.mp4", cwd=tmp_path)
    video = json.loads((tmp_path / "eval.json").read_text())["video"]
    frames = iio.imread(tmp_path / "cartpole.mp4", index=None)
    assert frames.shape == (video["frames"], 400, 600, 3)

    seedrl_cli("export", str(run), str(tmp_path / "m"))
    (target,) = (tmp_path / "m").iterdir()
    obs = rollout_observations("CartPole-v1", 1000)
    got, _ = plain_tensorflow(target, obs, 1, tmp_path)
    np.testing.assert_array_equal(got, seedrl.policy.load(str(run)).act(obs)[0])
