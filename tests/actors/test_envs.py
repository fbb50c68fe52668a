"""EnvBatch: automatic reset, episode bookkeeping, and recovery from a broken env."""

import gymnasium as gym
import numpy as np
import pytest

from seedrl.actors.envs import EnvBatch, make_env, spec_of
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
    assert (spec.observation_dtype, spec.observation_shape, spec.num_actions) == \
        ("float32", (4,), 2)


def test_episodes_are_reported_and_envs_reset_in_place():
    envs = EnvBatch(EnvConfig(id="CartPole-v1", max_episode_steps=7), 3, seeds=[1, 2, 3])
    obs = envs.reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    episodes = []
    for _ in range(7):
        obs, rewards, terminated, truncated, eps = envs.step(np.zeros(3, np.int32))
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
    obs, rewards, terminated, truncated, episodes = outcomes[-1]
    # Env 0 (the first created) raised at its 3rd step; env 1 carried on.
    assert truncated.tolist() == [True, False] and not terminated.any()
    assert envs.restarts == 1
    assert [e[0] for e in episodes] == [0]
    np.testing.assert_array_equal(obs[0], np.zeros(2))  # a fresh episode
    np.testing.assert_allclose(obs[1], [0.3, 0.3])
    obs, *_ = envs.step(np.zeros(2, np.int32))
    np.testing.assert_allclose(obs[0], [0.1, 0.1])


def test_unknown_env_and_bad_imports_are_clear_errors():
    with pytest.raises(ValueError, match="spec.env.id"):
        make_env(EnvConfig(id="NoSuchEnv-v9"))
    with pytest.raises(ValueError, match="spec.env.imports"):
        make_env(EnvConfig(id="CartPole-v1", imports=["no_such_module_xyz"]))
