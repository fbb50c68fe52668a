"""A user's own environment package, as a test stands it in: importing it registers
``SeedrlTest/Corridor-v0`` (and ``SeedrlTest/BrokenReset-v0``, which no actor can reset) with
gymnasium (what ``spec.env.imports`` is for)."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor of ``length`` cells; reaching the end pays 1 and ends.

    Observations are the one-hot position (float32); action 1 steps right, 0 steps left.
    """

    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._pos = 0

    def _obs(self):
        obs = np.zeros(self.length, np.float32)
        obs[self._pos] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = 0
        return self._obs(), {}

    def step(self, action):
        self._pos = max(0, self._pos + (1 if action == 1 else -1))
        done = self._pos == self.length - 1
        return self._obs(), float(done), done, False, {}


if "SeedrlTest/Corridor-v0" not in gym.registry:
    gym.register("SeedrlTest/Corridor-v0", entry_point=Corridor, max_episode_steps=100)


class BrokenReset(Corridor):
    """A registered env that can be made (its spaces are fine) but never reset: the actors
    that step it fail at their first reset, every time they are started."""

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("this corridor is closed for repairs")


if "SeedrlTest/BrokenReset-v0" not in gym.registry:
    gym.register("SeedrlTest/BrokenReset-v0", entry_point=BrokenReset)
