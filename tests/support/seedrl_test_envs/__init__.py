"""A user's own environment package, as a test stands it in: importing it registers
``SeedrlTest/Corridor-v0`` (and ``SeedrlTest/BrokenReset-v0``, which no actor can reset, and
``SeedrlTest/AsymmetricPendulum-v0``, whose action bounds are [-0.5, 3.0]) with gymnasium (what
``spec.env.imports`` is for)."""

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


class Conveyor(gym.Env):
    """Three cells A -> B -> C, then C forever; leaving C pays 1 each step, nothing else pays.

    Episodes start at A or at C (even odds) and are meant to run under a time limit of 2 steps:
    from A the limit cuts the episode on arriving at C, so the value of the observation the
    limit interrupted (C: 1 / (1 - gamma)) and that of the one before it (B) differ, and only
    bootstrapping from the true final observation gives B its value gamma / (1 - gamma).
    Observations are one-hot (float32); the two actions do the same.
    """

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self._cell = 0

    def _obs(self):
        obs = np.zeros(3, np.float32)
        obs[self._cell] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell = 0 if self.np_random.random() < 0.5 else 2
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if self._cell == 2 else 0.0
        self._cell = min(2, self._cell + 1)
        return self._obs(), reward, False, False, {}


if "SeedrlTest/Conveyor-v0" not in gym.registry:
    gym.register("SeedrlTest/Conveyor-v0", entry_point=Conveyor)


class BrokenReset(Corridor):
    """A registered env that can be made (its spaces are fine) but never reset: the actors
    that step it fail at their first reset, every time they are started."""

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("this corridor is closed for repairs")


if "SeedrlTest/BrokenReset-v0" not in gym.registry:
    gym.register("SeedrlTest/BrokenReset-v0", entry_point=BrokenReset)


class Crumbling(Corridor):
    """An env that raises where each of its episodes would end (its third step), or only on
    every ``every``-th episode: a broken env, or a flaky one."""

    def __init__(self, every: int = 1):
        super().__init__()
        self.every = every
        self._episodes = 0
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._steps += 1
        if self._steps == 3:
            self._episodes += 1
            if self._episodes % self.every == 0:
                raise RuntimeError("the floor gave way at the end of the corridor")
            return self._obs(), 1.0, True, False, {}
        return super().step(action)


if "SeedrlTest/Crumbling-v0" not in gym.registry:
    gym.register("SeedrlTest/Crumbling-v0", entry_point=Crumbling)


def _asymmetric_pendulum(**kwargs):
    """Pendulum-v1 (its 200-step limit included) whose torque is asked for in [-0.5, 3.0]:
    bounds neither +-1 nor symmetric, so a policy that forgot to map its [-1, 1] onto them
    would act visibly wrong."""
    env = gym.make("Pendulum-v1", **kwargs)
    low, high = np.array([-0.5], np.float32), np.array([3.0], np.float32)
    return gym.wrappers.RescaleAction(env, min_action=low, max_action=high)


if "SeedrlTest/AsymmetricPendulum-v0" not in gym.registry:
    gym.register("SeedrlTest/AsymmetricPendulum-v0", entry_point=_asymmetric_pendulum)
