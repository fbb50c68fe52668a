"""Atari through ale-py with the standard preprocessing: shapes, pooling, no-ops, stacking."""

import cv2
import gymnasium as gym
import numpy as np
import pytest

from seedrl.actors.atari import ChannelStack, is_atari
from seedrl.actors.envs import EnvBatch, make_env, spec_of
from seedrl.common.config import AtariConfig, EnvConfig


def _pong(**atari):
    return make_env(EnvConfig(id="ALE/Pong-v5", atari=AtariConfig(**atari)))


def test_pong_observes_stacked_84x84_grayscale_bytes():
    env = _pong()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    # After a reset every slot holds the same first frame.
    assert all(np.array_equal(obs[..., 0], obs[..., i]) for i in range(4))
    spec = spec_of(env, "ALE/Pong-v5")
    assert (spec.observation_dtype, spec.observation_shape, spec.num_actions) == (
        "uint8",
        (84, 84, 4),
        6,
    )
    env.close()


def test_full_action_space_and_rgb_frames():
    env = _pong(full_action_space=True, grayscale=False, frame_stack=2, screen_size=64)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (64, 64, 6) and env.action_space.n == 18
    env.close()


def test_the_emulator_copies_no_rgb_screen_for_grayscale_frames():
    # AtariPreprocessing reads the screen itself; the base env's own per-frame observation is
    # discarded, so it should be the cheap grayscale one (RGB where the frames are RGB).
    gray, rgb = _pong(), _pong(grayscale=False)
    assert gray.unwrapped.observation_space.shape == (210, 160)
    assert rgb.unwrapped.observation_space.shape == (210, 160, 3)
    gray.close()
    rgb.close()


def test_sticky_actions_reach_the_emulator():
    env = _pong(sticky_action_probability=0.1)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.1)
    env.close()


def test_noop_starts_vary_with_the_seed_and_can_be_turned_off():
    env = _pong()
    frames = set()
    for seed in range(6):
        env.reset(seed=seed)
        frames.add(env.unwrapped.ale.getEpisodeFrameNumber())
    assert len(frames) > 1 and max(frames) <= 30 * 4
    env.close()
    env = _pong(noop_max=0)
    env.reset(seed=3)
    assert env.unwrapped.ale.getEpisodeFrameNumber() == 0
    env.close()


def test_observation_is_the_max_of_the_last_two_frames_resized():
    env = _pong(noop_max=0, sticky_action_probability=0.0)
    raw = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, obs_type="grayscale")
    env.reset(seed=5)
    raw.reset(seed=5)
    actions = [2, 3, 2, 0, 3, 3, 2, 1] * 6
    for a in actions:
        obs, *_ = env.step(a)
        frames = [raw.step(a)[0] for _ in range(4)]
    pooled = np.maximum(frames[-2], frames[-1])
    want = cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(obs[..., -1], want)
    # The max really matters: the two frames differ (the ball and paddles move).
    assert not np.array_equal(frames[-2], frames[-1])
    env.close()
    raw.close()


def test_channel_stack_keeps_the_newest_frame_last():
    env = ChannelStack(
        gym.make("ALE/Pong-v5", frameskip=4, obs_type="grayscale", repeat_action_probability=0.0), 3
    )
    first, _ = env.reset(seed=0)
    seen = [first[..., -1]]
    for _ in range(3):
        obs, *_ = env.step(0)
        seen.append(obs[..., -1])
    np.testing.assert_array_equal(obs, np.stack(seen[-3:], axis=-1))
    env.close()


def test_rewards_are_the_games_own():
    batch = EnvBatch(EnvConfig(id="ALE/Pong-v5"), 2, [0, 1])
    batch.reset()
    rewards = []
    for _ in range(400):
        _, r, *_ = batch.step(np.zeros(2, np.int32))
        rewards.extend(r.tolist())
    # Standing still in Pong loses points: -1 each, never clipped or scaled on the actor.
    assert set(rewards) <= {-1.0, 0.0, 1.0} and -1.0 in rewards
    batch.close()


def test_preprocessing_options_cannot_be_set_twice():
    with pytest.raises(ValueError, match="spec.env.atari"):
        make_env(EnvConfig(id="ALE/Pong-v5", options={"frameskip": 2}))
    with pytest.raises(ValueError, match="obs_type"):
        make_env(EnvConfig(id="ALE/Pong-v5", options={"obs_type": "ram"}))


def test_atari_ids():
    assert is_atari("ALE/Breakout-v5") and not is_atari("CartPole-v1")


def test_stack_holds_the_last_frames_of_the_same_game():
    stacked, single = _pong(noop_max=0), _pong(noop_max=0, frame_stack=1)
    first, _ = stacked.reset(seed=7)
    frame, _ = single.reset(seed=7)
    history = [frame[..., 0]] * 4
    for a in [2, 3, 0, 2, 2, 3, 1, 0, 3, 2]:
        obs, *_ = stacked.step(a)
        frame, *_ = single.step(a)
        history.append(frame[..., 0])
        np.testing.assert_array_equal(obs, np.stack(history[-4:], axis=-1))
    stacked.close()
    single.close()


def _play_one_game(config, seed=3, max_steps=20_000):
    """Random play of Breakout through an EnvBatch until its first episode ends; returns the
    per-step (terminated, lives, episodes) and the env."""
    envs = EnvBatch(EnvConfig(id="ALE/Breakout-v5", atari=config), 1, seeds=[seed])
    envs.reset()
    rng = np.random.default_rng(seed)
    ale = envs.envs[0].unwrapped.ale
    steps = []
    for _ in range(max_steps):
        _, _, terminated, truncated, episodes, _ = envs.step(rng.integers(0, 4, 1).astype(np.int32))
        steps.append((bool(terminated[0]), ale.lives(), episodes))
        if episodes:
            break
    envs.close()
    return steps


def test_life_loss_terminal_ends_training_episodes_but_not_the_game():
    steps = _play_one_game(AtariConfig(life_loss_terminal=True))
    terminals = [i for i, (term, _, _) in enumerate(steps) if term]
    # Breakout has 5 lives: 4 lost lives read as terminal with the game going on, then the
    # game over ends the one episode, which holds the whole game.
    assert len(terminals) == 5 and terminals[-1] == len(steps) - 1
    assert all(not eps for _, _, eps in steps[:-1])
    assert [steps[i][1] for i in terminals[:-1]] == [4, 3, 2, 1]
    ((_, _, length),) = steps[-1][2]
    assert length == len(steps)


def test_terminal_on_life_loss_resets_the_game_each_life():
    # gymnasium's option, as documented: the first lost life ends the episode and resets.
    steps = _play_one_game(AtariConfig(terminal_on_life_loss=True))
    assert steps[-1][0] and len(steps[-1][2]) == 1
    assert steps[-1][1] == 5  # a fresh game after the reset: all lives back
