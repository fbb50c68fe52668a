"""Google Research Football through the gymnasium adapter, on the real engine (`make football`)."""

import random

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from seedrl.actors.football import is_football, make_football
from seedrl.common.config import FootballConfig

pytestmark = pytest.mark.football

EMPTY_GOAL = "Football/academy_empty_goal_close"


def make(env_id=EMPTY_GOAL, options=None, max_episode_steps=None, **config):
    """make_football with FootballConfig(**config)."""
    return make_football(env_id, FootballConfig(**config), options or {}, max_episode_steps)


def test_is_football():
    assert is_football("Football/11_vs_11_easy_stochastic")
    assert not is_football("CartPole-v1")
    assert not is_football("ALE/Pong-v5")


@pytest.mark.parametrize(
    "config, dtype, shape",
    [
        (dict(representation="simple115v2"), np.float32, (115,)),
        (dict(representation="extracted"), np.uint8, (72, 96, 4)),
        (dict(representation="extracted", stacked=True), np.uint8, (72, 96, 16)),
    ],
)
def test_spaces_and_observations(config, dtype, shape):
    env = make(**config)
    try:
        assert isinstance(env, gym.Env)
        assert isinstance(env.observation_space, gym.spaces.Box)
        assert env.observation_space.dtype == dtype and env.observation_space.shape == shape
        assert env.action_space == gym.spaces.Discrete(19)
        obs, info = env.reset(seed=0)
        assert obs.dtype == dtype and obs.shape == shape and obs in env.observation_space
        obs, reward, terminated, truncated, info = env.step(0)
        assert obs.dtype == dtype and obs.shape == shape
        assert isinstance(reward, float) and isinstance(terminated, bool) and truncated is False
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # infinite Box bounds, no render modes
def test_passes_the_gymnasium_env_checker():
    env = make()
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_random_play_ends_episodes_with_finite_rewards():
    env = make(rewards="scoring,checkpoints")
    env.action_space.seed(0)
    try:
        env.reset(seed=1)
        ends, rewards = 0, []
        # The scenario lasts at most 400 steps and usually ends sooner (out of play, a goal).
        for _ in range(400):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            rewards.append(reward)
            assert obs in env.observation_space and not truncated
            if terminated:
                ends += 1
                env.reset()
        assert ends >= 1
        assert np.all(np.isfinite(rewards))
    finally:
        env.close()


def test_max_episode_steps_truncates():
    env = make(max_episode_steps=3)
    try:
        env.reset(seed=0)
        results = [env.step(0)[2:4] for _ in range(3)]
        assert results == [(False, False), (False, False), (False, True)]
    finally:
        env.close()


def rollout(env, seed, steps=40):
    """The observations of an episode's start under a fixed action sequence."""
    obs, _ = env.reset(seed=seed)
    observations = [obs]
    for t in range(steps):
        obs, _, terminated, _, _ = env.step((t * 7) % 19)
        observations.append(obs)
        if terminated:
            break
    return np.stack(observations)


def test_same_seed_same_game():
    # 11 vs 11 against the built-in AI: the engine's randomness, the order in which it processes
    # the teams and the kick-off side (alternating by episode) all have to follow the seed.
    # Left alone, gfootball seeds from the global `random` module, so its state when each env is
    # made must not matter either: from these two states gfootball picks different team orders.
    saved = random.getstate()
    random.seed(0)
    first = make("Football/11_vs_11_easy_stochastic")
    random.seed(2)
    second = make("Football/11_vs_11_easy_stochastic")
    random.setstate(saved)
    try:
        game = rollout(first, seed=5)
        np.testing.assert_array_equal(rollout(second, seed=5), game)
        # Replayed right away, this is the env's 2nd episode: the kick-off must not switch sides.
        np.testing.assert_array_equal(rollout(first, seed=5), game)
        first.reset()  # nor may an unseeded episode in between matter
        np.testing.assert_array_equal(rollout(first, seed=5), game)
        assert not np.array_equal(rollout(second, seed=6), game)
        # Unseeded episodes go on with the generator: each gets a new engine seed.
        seeds = {
            first.reset(seed=5)[1]["engine_seed"],
            first.reset()[1]["engine_seed"],
            first.reset()[1]["engine_seed"],
        }
        assert len(seeds) == 3
    finally:
        first.close()
        second.close()


def test_options_reach_create_environment():
    env = make(options={"channel_dimensions": (48, 36)}, representation="extracted")
    try:
        assert env.observation_space.shape == (36, 48, 4)
        assert env.reset(seed=0)[0].shape == (36, 48, 4)
    finally:
        env.close()


def test_unknown_scenario_is_named():
    with pytest.raises(ValueError, match="no_such_scenario"):
        make("Football/no_such_scenario")


def test_options_may_not_override_the_config():
    with pytest.raises(ValueError, match="representation"):
        make(options={"representation": "pixels"})
