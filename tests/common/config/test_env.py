"""spec.env (common/config/env.py): Atari's and Football's sections, frames per step."""

from __future__ import annotations

from seedrl.common.config import parse_experiment
from support.experiment_docs import doc, problems_of


def test_atari_and_football_sections():
    exp = parse_experiment(
        doc(env={"id": "ALE/Breakout-v5", "atari": {"frameStack": 1, "fullActionSpace": True}})
    )
    assert exp.spec.env.atari.frame_stack == 1 and exp.spec.env.atari.noop_max == 30
    problems = problems_of(
        doc(
            env={
                "atari": {"stickyActionProbability": 1.5},
                "football": {"representation": "pixels"},
            }
        )
    )
    assert dict(problems) == {
        "spec.env.atari.stickyActionProbability": "must be <= 1, got 1.5",
        "spec.env.football.representation": "must be one of simple115v2, extracted; got 'pixels'",
    }


def test_atari_frames_count_the_frame_skip():
    pong = parse_experiment(
        {
            "metadata": {"name": "p"},
            "spec": {"env": {"id": "ALE/Pong-v5", "atari": {"frameSkip": 3}}},
        }
    )
    assert pong.spec.env.is_atari and pong.spec.env.frames_per_step == 3
    cartpole = parse_experiment({"metadata": {"name": "c"}})
    assert not cartpole.spec.env.is_atari and cartpole.spec.env.frames_per_step == 1
