"""ProcessEnvBatch: worker processes and shared memory, checked against the in-process EnvBatch."""

import os
import signal

import gymnasium as gym
import numpy as np
import pytest

from seedrl.actors.envs import EnvBatch
from seedrl.actors.process_envs import ProcessEnvBatch
from seedrl.common.config import EnvConfig

CARTPOLE = EnvConfig(id="CartPole-v1")
#: Short episodes: both terminations and time-limit truncations (with final observations).
SHORT_CARTPOLE = EnvConfig(id="CartPole-v1", max_episode_steps=9)


@pytest.fixture
def batch():
    envs = ProcessEnvBatch(CARTPOLE, 5, seeds=[10, 11, 12, 13, 14], num_processes=2)
    yield envs
    envs.close()


def test_same_seeds_give_the_same_trajectories_as_the_sequential_reference():
    batch = ProcessEnvBatch(SHORT_CARTPOLE, 5, seeds=[10, 11, 12, 13, 14], num_processes=2)
    reference = EnvBatch(SHORT_CARTPOLE, 5, seeds=[10, 11, 12, 13, 14])
    assert batch.num_processes == 2
    np.testing.assert_array_equal(batch.reset(), reference.reset())
    rng = np.random.default_rng(0)
    episodes_seen = finals_seen = 0
    for _ in range(60):
        actions = rng.integers(0, 2, size=5, dtype=np.int32)
        got, want = batch.step(actions), reference.step(actions)
        for g, w in zip(got[:4] + got[5], want[:4] + want[5]):
            np.testing.assert_array_equal(g, w)
        assert got[4] == want[4]
        episodes_seen += len(got[4])
        finals_seen += len(got[5][0])
    # Episode ends, resets and the final observations of truncations were compared too.
    assert episodes_seen > 0 and finals_seen > 0
    reference.close()
    batch.close()


def test_a_killed_worker_is_restarted_and_only_its_envs_are_truncated(batch):
    batch.reset()
    batch.step(np.zeros(5, np.int32))
    victim = batch.worker_pids()[0]  # steps envs 0..1 (5 envs over 2 workers: 0-1, 2-4)
    os.kill(victim, signal.SIGKILL)
    obs, rewards, terminated, truncated, episodes, (final_ids, _) = batch.step(np.ones(5, np.int32))
    assert truncated.tolist() == [True, True, False, False, False]
    assert final_ids.tolist() == []  # nothing to bootstrap from: the worker died
    assert rewards.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert batch.restarts == 1 and batch.worker_pids()[0] != victim
    # The restarted envs begin fresh episodes and step normally afterwards.
    assert np.all(np.abs(obs[:2]) <= 0.05)
    obs, rewards, terminated, truncated, *_ = batch.step(np.zeros(5, np.int32))
    assert rewards.tolist() == [1.0] * 5 and not truncated[:2].any()


class RaisingEnv(gym.Env):
    """Raises on its second step after every reset."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == 2:
            raise RuntimeError("env bug")
        return np.ones(3, np.float32), 1.0, False, False, {}


gym.register("seedrl-test/Raising-v0", entry_point=RaisingEnv, disable_env_checker=True)


def test_an_env_that_raises_inside_a_worker_is_recreated_there():
    # The worker is a fresh interpreter: it imports this test module to find the env.
    config = EnvConfig(id="seedrl-test/Raising-v0", imports=[RaisingEnv.__module__])
    envs = ProcessEnvBatch(config, 2, seeds=[0, 1], num_processes=2)
    try:
        envs.reset()
        envs.step(np.zeros(2, np.int32))
        obs, rewards, terminated, truncated, episodes, _ = envs.step(np.zeros(2, np.int32))
        assert truncated.tolist() == [True, True]
        assert sorted(e[0] for e in episodes) == [0, 1]
        assert envs.restarts == 0  # the workers survived; only the envs were recreated
        np.testing.assert_array_equal(obs, np.zeros((2, 3)))
    finally:
        envs.close()
