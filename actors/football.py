"""Google Research Football scenarios (``spec.env.football``) as gymnasium environments.

gfootball 2.10.2 is written against the old gym API (``reset()`` returns the observation alone,
``step()`` returns a 4-tuple, spaces are ``gym.spaces``), so its environment is wrapped in a
gymnasium adapter and the rest of the actor sees an ordinary ``gymnasium.Env``. gfootball is not
a dependency of the package: ``make football`` builds and installs it (see the Makefile).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from seedrl.common.config import FootballConfig

#: Environment ids with this prefix name a Football scenario, e.g. ``Football/5_vs_5``.
FOOTBALL_PREFIX = "Football/"

# create_environment() arguments that spec.env.football owns, or that must stay fixed: rendering
# needs an OpenGL context that actor pods do not have.
_RESERVED_OPTIONS = frozenset({"env_name", "representation", "rewards", "stacked", "render"})

# The engine draws its seeds below this bound (scenario_builder uses randint(0, 2e9)).
_MAX_ENGINE_SEED = 2_000_000_000


def is_football(env_id: str) -> bool:
    """Whether an environment id names a Google Research Football scenario."""
    return env_id.startswith(FOOTBALL_PREFIX)


def _to_gymnasium_space(space) -> gym.Space:
    """Converts an old ``gym`` space to its gymnasium twin (the ones gfootball produces)."""
    # Matched by class name: the classes live in the old gym package, which is only importable
    # where gfootball is installed.
    kind = type(space).__name__
    if kind == "Box":
        return gym.spaces.Box(
            np.asarray(space.low), np.asarray(space.high), space.shape, space.dtype
        )
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    raise TypeError(f"unsupported gfootball space {space!r}")


class FootballEnv(gym.Env):
    """A gfootball environment behind the gymnasium API.

    gfootball ends an episode (a goal, the ball out of play, lost possession, or the scenario's
    full time) with ``done=True``: these are all outcomes of the game, so they are reported as
    ``terminated``; a step limit is added by ``TimeLimit`` on top and reported as ``truncated``.

    Args:
      env: what ``gfootball.env.create_environment`` returned.
    """

    metadata = {"render_modes": []}

    def __init__(self, env):
        self._env = env
        self.observation_space = _to_gymnasium_space(env.observation_space)
        self.action_space = _to_gymnasium_space(env.action_space)
        # Private, but gfootball's own wrappers reach the config the same way.
        self._config = env.unwrapped._config
        # The scenarios read the episode number (11 vs 11 alternates the kick-off by its
        # parity): a seeded reset goes back to it, so it replays a new env's first episode.
        self._first_episode = self._config["episode_number"]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Starts a new episode; with ``seed``, it and the episodes after it are reproducible.

        Left alone, the engine seeds each episode from Python's global ``random`` module, which
        every env in the process shares. Each episode's engine seed is drawn here instead, from
        this env's own generator, which ``seed`` resets.
        """
        super().reset(seed=seed)
        if seed is not None:
            self._config["episode_number"] = self._first_episode
        engine_seed = int(self.np_random.integers(_MAX_ENGINE_SEED))
        # gfootball's config object is shared by all its layers and is read when the next
        # episode's scenario is built, inside the reset below. It derives the order in which the
        # engine processes the teams from the seed, but only once per env (the value then sticks
        # in the config), so that is set for every episode too.
        self._config["game_engine_random_seed"] = engine_seed
        self._config["reverse_team_processing"] = bool(engine_seed % 2)
        obs = self._env.reset()
        return np.asarray(obs, self.observation_space.dtype), {"engine_seed": engine_seed}

    def step(self, action):
        """Plays one step; returns ``(obs, reward, terminated, truncated, info)``."""
        obs, reward, done, info = self._env.step(action)
        return (
            np.asarray(obs, self.observation_space.dtype),
            float(reward),
            bool(done),
            False,
            info,
        )

    def close(self):
        """Returns the engine to gfootball's pool, where the next env in this process reuses it."""
        self._env.close()
        super().close()


def make_football(
    env_id: str, config: FootballConfig, options: dict, max_episode_steps: int | None
) -> gym.Env:
    """Creates a Google Research Football scenario as a gymnasium environment.

    Observations are float32 [115] for ``simple115v2`` and uint8 [72, 96, 4] for ``extracted``
    (the super-minimap; [72, 96, 16] when stacked); actions are ``Discrete(19)`` for one player.

    Args:
      env_id: ``Football/<scenario>``, a scenario of ``gfootball.scenarios`` such as
        ``academy_empty_goal_close`` or ``11_vs_11_easy_stochastic``.
      config: ``spec.env.football``.
      options: ``spec.env.options``, extra keyword arguments of
        ``gfootball.env.create_environment`` (for example ``other_config_options``); the keys
        that ``config`` sets, and ``render``, may not be repeated here.
      max_episode_steps: a limit in steps, or None for the scenario's own game duration.

    Raises:
      ValueError: if the scenario is unknown or options repeat a reserved setting.
    """
    # Imported here so that actors for other envs do not pay for the engine and old gym.
    import gfootball.env
    from gfootball.env import scenario_builder

    scenario = env_id.removeprefix(FOOTBALL_PREFIX)
    # Checked up front: gfootball logs an unknown scenario and calls sys.exit(1).
    known = sorted(scenario_builder.all_scenarios())
    if scenario not in known:
        raise ValueError(
            f"spec.env.id: unknown Football scenario {scenario!r} in {env_id!r}; "
            f"known: {', '.join(known)}"
        )
    clash = _RESERVED_OPTIONS & set(options)
    if clash:
        raise ValueError(
            f"spec.env.options: {sorted(clash)} cannot be set for {env_id}: use "
            f"spec.env.football (rendering is always off)"
        )
    env = gfootball.env.create_environment(
        env_name=scenario,
        representation=config.representation,
        rewards=config.rewards,
        stacked=config.stacked,
        render=False,
        **options,
    )
    env = FootballEnv(env)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    return env
