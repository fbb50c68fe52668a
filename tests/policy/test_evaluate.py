"""seedrl eval's engine: episodes of the real env in parallel, results, videos read back."""

from __future__ import annotations

import json
import dataclasses

import imageio.v3 as iio
import numpy as np
import pytest

import seedrl.policy
from seedrl.policy.evaluate import EvalError, env_config_for, evaluate, main
from support.trained_runs import SUPPORT


@pytest.fixture
def test_envs(monkeypatch):
    """The runs' spec.env.imports (seedrl_test_envs) importable, as a user's package is."""
    monkeypatch.syspath_prepend(str(SUPPORT))


def test_episodes_are_reproducible_whatever_the_number_of_parallel_envs(trained_runs):
    policy = seedrl.policy.load(str(trained_runs["r2d2"]))
    config = env_config_for(policy, None, render=False)
    one = evaluate(policy, config, episodes=5, seed=11, num_envs=1)
    three = evaluate(policy, config, episodes=5, seed=11, num_envs=3)
    assert one["returns"] == three["returns"] and one["lengths"] == three["lengths"]
    assert three["parallel_envs"] == 3 and len(three["returns"]) == 5
    assert three["env_steps"] == sum(three["lengths"])
    assert three["return"]["mean"] == pytest.approx(np.mean(three["returns"]))
    other = evaluate(policy, config, episodes=5, seed=12, num_envs=3)
    assert other["lengths"] != three["lengths"]  # the seed does pick the episodes


def test_main_writes_eval_json_and_the_runs_own_copy(trained_runs, tmp_path, capsys, test_envs):
    run_dir = trained_runs["ppo"]
    out = tmp_path / "eval.json"
    code = main([str(run_dir), "--episodes", "3", "--seed", "4", "--output", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["episodes"] == 3 and report["lengths"] == [200, 200, 200]
    assert report["agent"] == "ppo" and report["deterministic"] is True
    assert f"return: mean {report['return']['mean']:.2f}" in printed
    copies = list((run_dir / "eval").glob("*.json"))
    assert [json.loads(p.read_text())["returns"] for p in copies] == [report["returns"]]
    # Stochastic episodes differ from the deterministic ones.
    assert (
        main(
            [
                str(run_dir),
                "--episodes",
                "3",
                "--seed",
                "4",
                "--stochastic",
                "--output",
                str(tmp_path / "s.json"),
                "--quiet",
            ]
        )
        == 0
    )
    stochastic = json.loads((tmp_path / "s.json").read_text())
    assert stochastic["deterministic"] is False
    assert stochastic["returns"] != report["returns"]


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_video_of_the_first_episode_reads_back(trained_runs, tmp_path, capsys, suffix):
    video = tmp_path / f"cartpole{suffix}"
    code = main(
        [
            str(trained_runs["vtrace"]),
            "--episodes",
            "2",
            "--envs",
            "2",
            "--video",
            str(video),
            "--output",
            str(tmp_path / "eval.json"),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "eval.json").read_text())
    frames = iio.imread(video, index=None)
    # The reset frame, then one per step of env 0's episode (episode 0), at the env's size.
    expected = report["lengths"][0] + 1
    assert report["video"]["frames"] == expected
    if suffix == ".mp4":
        assert frames.shape[0] == expected
    else:
        # GIF encoders fold identical consecutive frames into one longer one: count time.
        from PIL import Image, ImageSequence

        with Image.open(video) as gif:
            total_ms = sum(frame.info["duration"] for frame in ImageSequence.Iterator(gif))
        assert total_ms == expected * 20  # CartPole renders at 50 frames/s
    assert frames.shape[1:3] == (400, 600)
    assert report["video"]["size"] == [600, 400]
    assert frames.std() > 0  # a picture, not a blank


def test_another_env_must_have_the_same_spaces(trained_runs, capsys, tmp_path):
    location = str(trained_runs["vtrace"])
    assert main([location, "--env", "Acrobot-v1", "--output", str(tmp_path / "e.json")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "does not fit the policy trained on CartPole-v1" in err[-1]
    assert "observation_shape" in err[-1]
    assert not (tmp_path / "e.json").exists()


def test_football_videos_are_refused_with_the_reason(trained_runs):
    policy = seedrl.policy.load(str(trained_runs["vtrace"]))
    with pytest.raises(EvalError, match="Football renders only through gfootball's own window"):
        env_config_for(policy, "Football/academy_empty_goal_close", render=True)
    assert env_config_for(policy, "Football/academy_empty_goal_close", render=False).id


def test_a_video_needs_a_known_format(trained_runs, tmp_path, capsys):
    code = main([str(trained_runs["vtrace"]), "--video", str(tmp_path / "x.avi")])
    assert code != 0
    assert "write .mp4 or .gif" in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_env_config_is_the_checkpoints_with_rendering_asked(trained_runs):
    policy = seedrl.policy.load(str(trained_runs["vtrace"]))
    config = env_config_for(policy, None, render=True)
    assert config == dataclasses.replace(
        policy.experiment.spec.env, options={"render_mode": "rgb_array"}
    )
