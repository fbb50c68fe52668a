"""EnvBatch: automatic reset, episode bookkeeping, and recovery from a broken env."""

import gymnasium as gym
import numpy as np
import pytest

from support import seedrl_test_envs  # noqa: F401 - registers SeedrlTest/Crumbling-v0

from seedrl.actors.envs import (
    ENV_FAILURES,
    GAME_CONTINUES,
    EnvBatch,
    EnvsKeepFailing,
    make_env,
    spec_of,
)
from seedrl.common.config import EnvConfig


class FlakyEnv(gym.Env):
    """Raises on its 3rd step after each creation; otherwise an episode lasts 5 steps."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)
    created = 0

    def __init__(self):
        FlakyEnv.created += 1
        self.t = 0
        self.raise_at = 3 if FlakyEnv.created == 1 else None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.raise_at is not None and self.t == self.raise_at:
            raise RuntimeError("simulated env crash")
        return np.full(2, self.t / 10, np.float32), 1.0, self.t >= 5, False, {}


gym.register("seedrl-test/Flaky-v0", entry_point=FlakyEnv, disable_env_checker=True)


def test_spec_of_cartpole():
    env = make_env(EnvConfig(id="CartPole-v1"))
    spec = spec_of(env, "CartPole-v1")
    assert (spec.observation_dtype, spec.observation_shape, spec.num_actions) == (
        "float32",
        (4,),
        2,
    )


def test_episodes_are_reported_and_envs_reset_in_place():
    envs = EnvBatch(EnvConfig(id="CartPole-v1", max_episode_steps=7), 3, seeds=[1, 2, 3])
    obs = envs.reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    episodes = []
    for _ in range(7):
        obs, rewards, terminated, truncated, eps, _ = envs.step(np.zeros(3, np.int32))
        episodes += eps
    # Always pushing left ends CartPole within 7 steps, by failure or by the time limit.
    assert {e[0] for e in episodes} == {0, 1, 2}
    assert all(ret == length for _, ret, length in episodes)
    envs.close()


def test_same_seeds_give_the_same_observations():
    a = EnvBatch(EnvConfig(id="CartPole-v1"), 2, seeds=[5, 6]).reset()
    b = EnvBatch(EnvConfig(id="CartPole-v1"), 2, seeds=[5, 6]).reset()
    np.testing.assert_array_equal(a, b)


def test_a_crashing_env_is_recreated_and_its_episode_truncated():
    FlakyEnv.created = 0
    envs = EnvBatch(EnvConfig(id="seedrl-test/Flaky-v0"), 2, seeds=[0, 1])
    envs.reset()
    outcomes = [envs.step(np.zeros(2, np.int32)) for _ in range(3)]
    obs, rewards, terminated, truncated, episodes, (final_ids, _) = outcomes[-1]
    # Env 0 (the first created) raised at its 3rd step; env 1 carried on.
    assert truncated.tolist() == [True, False] and not terminated.any()
    assert final_ids.tolist() == []  # a crash leaves no final observation to bootstrap from
    assert envs.restarts == 1
    assert [e[0] for e in episodes] == [0]
    np.testing.assert_array_equal(obs[0], np.zeros(2))  # a fresh episode
    np.testing.assert_allclose(obs[1], [0.3, 0.3])
    obs, *_ = envs.step(np.zeros(2, np.int32))
    np.testing.assert_allclose(obs[0], [0.1, 0.1])


def test_envs_that_raise_every_episode_give_up_with_their_traceback():
    envs = EnvBatch(EnvConfig(id="SeedrlTest/Crumbling-v0"), 2, seeds=[0, 1])
    envs.reset()
    steps = 0
    with pytest.raises(EnvsKeepFailing) as failed:
        while steps < 100:
            envs.step(np.ones(2, np.int32))
            steps += 1
    assert failed.value.restarts == ENV_FAILURES and failed.value.episodes == ENV_FAILURES
    assert steps == 3 * ENV_FAILURES // 2 - 1  # two envs, each failing on its third step
    assert "RuntimeError: the floor gave way" in failed.value.last_error
    assert "Traceback (most recent call last)" in failed.value.last_error
    message = str(failed.value)
    assert "10 restarts, 10 episodes finished" in message and "\n" not in message
    assert "seedrl_test_envs/__init__.py:" in message and "in step" in message


def test_many_envs_raising_once_together_go_on():
    # 16 envs raise at their first episode's end, together (a glitch they share): 16
    # restarts, 16 episodes, but each env raised once; only a third failure each gives up.
    envs = EnvBatch(EnvConfig(id="SeedrlTest/Crumbling-v0"), 16, seeds=list(range(16)))
    envs.reset()
    for _ in range(6):
        envs.step(np.ones(16, np.int32))
    assert envs.restarts == 32
    with pytest.raises(EnvsKeepFailing):
        for _ in range(3):
            envs.step(np.ones(16, np.int32))


def test_an_env_that_raises_now_and_then_goes_on_and_counts_its_restarts():
    envs = EnvBatch(EnvConfig(id="SeedrlTest/Crumbling-v0", options={"every": 5}), 2, [0, 1])
    envs.reset()
    for _ in range(3 * 5 * ENV_FAILURES):
        envs.step(np.ones(2, np.int32))
    # One episode in five raised: 2 envs x 50 episodes each, 10 of them cut short.
    assert envs.restarts == 2 * ENV_FAILURES and envs.episodes == 2 * 5 * ENV_FAILURES
    assert "the floor gave way" in envs.last_error


def test_unknown_env_and_bad_imports_are_clear_errors():
    with pytest.raises(ValueError, match="spec.env.id"):
        make_env(EnvConfig(id="NoSuchEnv-v9"))
    with pytest.raises(ValueError, match="spec.env.imports"):
        make_env(EnvConfig(id="CartPole-v1", imports=["no_such_module_xyz"]))


class TimedEnv(gym.Env):
    """Observes its step count; a time limit of 3 steps truncates it. Acts in [0, 5]."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Box(np.float32(0), np.float32(5), (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, False, False, {}


gym.register("seedrl-test/Timed-v0", entry_point=TimedEnv, disable_env_checker=True)


def test_truncated_episodes_come_back_with_their_final_observation():
    envs = EnvBatch(EnvConfig(id="seedrl-test/Timed-v0", max_episode_steps=3), 2, seeds=[0, 1])
    envs.reset()
    for _ in range(2):
        *_, (final_ids, finals) = envs.step(np.zeros((2, 1), np.float32))
        assert final_ids.tolist() == [] and finals.shape == (0, 1)
    obs, _, terminated, truncated, episodes, (final_ids, finals) = envs.step(
        np.zeros((2, 1), np.float32)
    )
    assert truncated.all() and not terminated.any() and len(episodes) == 2
    np.testing.assert_array_equal(obs, [[0], [0]])  # already the next episode
    assert final_ids.tolist() == [0, 1]
    np.testing.assert_array_equal(finals, [[3], [3]])  # where the time limit cut it


@pytest.mark.parametrize(
    "env_id,low,high",
    [
        ("Pendulum-v1", (-2.0,), (2.0,)),
        ("seedrl-test/Timed-v0", (0.0,), (5.0,)),
        ("CartPole-v1", (), ()),
    ],
)
def test_the_spec_carries_the_action_bounds(env_id, low, high):
    spec = spec_of(make_env(EnvConfig(id=env_id)), env_id)
    assert (spec.action_low, spec.action_high) == (low, high)


class LivesEnv(gym.Env):
    """Loses a life every 2 steps (the game goes on, flagged), the game ends after 6."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        life_lost = self.t % 2 == 0 and self.t < 6
        info = {GAME_CONTINUES: True} if life_lost else {}
        return np.full(1, self.t, np.float32), 1.0, life_lost or self.t == 6, False, info


gym.register("seedrl-test/Lives-v0", entry_point=LivesEnv, disable_env_checker=True)


def test_a_terminal_step_that_leaves_the_game_running_neither_resets_nor_ends_an_episode():
    envs = EnvBatch(EnvConfig(id="seedrl-test/Lives-v0"), 1, seeds=[0])
    envs.reset()
    seen = [envs.step(np.zeros(1, np.int32)) for _ in range(6)]
    assert [s[2][0] for s in seen] == [False, True, False, True, False, True]
    assert [s[0][0, 0] for s in seen] == [1, 2, 3, 4, 5, 0]  # reset only at game over
    assert [s[4] for s in seen[:5]] == [[]] * 5
    assert seen[5][4] == [(0, 6.0, 6)]  # one episode: the whole game
