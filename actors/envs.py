"""Environments an actor steps: made from ``spec.env``, stepped as one batch of K.

Any gymnasium id works; ``spec.env.imports`` names modules to import first so that a package of
the user's own can register its environments.
"""

from __future__ import annotations

import importlib
import logging
import traceback

import gymnasium as gym
import numpy as np

from seedrl.actors import atari, football
from seedrl.common.config import EnvConfig
from seedrl.common.wire import EnvSpec

log = logging.getLogger(__name__)

#: An env that ends a training episode without ending the game (Atari's life loss) returns
#: ``terminated=True`` with ``info[GAME_CONTINUES] = True``: the learner sees a terminal
#: transition, while :class:`EnvBatch` neither resets the env nor reports an episode.
GAME_CONTINUES = atari.GAME_CONTINUES

_NO_ENVS = np.zeros(0, np.int64)


def make_env(config: EnvConfig) -> gym.Env:
    """Creates one environment from ``spec.env``.

    Raises:
      ValueError: if an import fails or gymnasium does not know the id.
    """
    for module in config.imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"spec.env.imports: cannot import {module!r}: {exc}") from None
    try:
        if atari.is_atari(config.id):
            env = atari.make_atari(
                config.id, config.atari, dict(config.options), config.max_episode_steps
            )
        elif football.is_football(config.id):
            env = football.make_football(
                config.id, config.football, dict(config.options), config.max_episode_steps
            )
        else:
            kwargs = dict(config.options)
            if config.max_episode_steps is not None:
                kwargs["max_episode_steps"] = config.max_episode_steps
            env = gym.make(config.id, **kwargs)
    except (gym.error.Error, ImportError) as exc:
        # ImportError: the env family's package (ale-py, gfootball) is not installed here.
        raise ValueError(f"spec.env.id: cannot make {config.id!r}: {exc}") from None
    except TypeError as exc:  # gymnasium passes spec.env.options on as keyword arguments
        raise ValueError(f"spec.env.options: cannot make {config.id!r} with them: {exc}") from None
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and space.dtype == np.float64:
        # MuJoCo and friends observe float64; float32 halves what crosses the wire and is what
        # the networks compute in anyway.
        env = gym.wrappers.TransformObservation(
            env,
            lambda obs: np.asarray(obs, np.float32),
            gym.spaces.Box(
                space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
            ),
        )
    return env


def spec_of(env: gym.Env, env_id: str) -> EnvSpec:
    """The wire spec of an environment's observation and action spaces.

    Raises:
      ValueError: for spaces the wire protocol cannot carry (dicts, tuples, text...).
    """
    obs = env.observation_space
    if not isinstance(obs, gym.spaces.Box):
        raise ValueError(f"{env_id}: observation space {obs} is not an array (Box)")
    act = env.action_space
    if isinstance(act, gym.spaces.Discrete):
        return EnvSpec(env_id, obs.dtype.name, tuple(obs.shape), "int32", (), int(act.n))
    if isinstance(act, gym.spaces.Box):
        # The bounds travel with the spec: the policy acts in [-1, 1] and the learner maps that
        # range onto them, so an env bounded by +-2 or [0, 5] is reachable in full.
        # A space unbounded anywhere sends no bounds: its actions go out as the policy chose.
        bounded = bool(np.all(np.isfinite(act.low)) and np.all(np.isfinite(act.high)))
        low = (
            tuple(float(x) for x in np.broadcast_to(act.low, act.shape).ravel()) if bounded else ()
        )
        high = (
            tuple(float(x) for x in np.broadcast_to(act.high, act.shape).ravel()) if bounded else ()
        )
        return EnvSpec(
            env_id,
            obs.dtype.name,
            tuple(obs.shape),
            "float32",
            tuple(act.shape),
            0,
            action_low=low,
            action_high=high,
        )
    raise ValueError(f"{env_id}: action space {act} is neither Discrete nor Box")


def probe_spec(config: EnvConfig) -> EnvSpec:
    """The wire spec of ``spec.env``, from one environment made and closed at once: how the
    launcher (and ``seedrl validate``) derive from the Experiment the spec the learner serves.

    Raises:
      ValueError: the environment cannot be made, its spaces cannot travel on the wire, or
        ``spec.env.backend`` asks for a backend that cannot step it.
    """
    from seedrl.actors.envpool_envs import resolve_backend

    # The batches' backend gives the same spec as one gymnasium env (tested); resolving it
    # here fails `seedrl validate` and the launcher's probe where the actors would fail.
    resolve_backend(config)
    env = make_env(config)
    try:
        return spec_of(env, config.id)
    finally:
        env.close()


#: The fewest env restarts after which an actor may give up on its envs (see
#: :meth:`EnvBatch.check_failing`).
ENV_FAILURES = 10


class EnvsKeepFailing(RuntimeError):
    """An actor's envs raise at least as often as they finish episodes: the env is broken.

    Args:
      restarts: envs recreated so far.
      episodes: episodes the envs finished meanwhile.
      last_error: the latest traceback, as ``traceback.format_exc()`` wrote it.
    """

    def __init__(self, restarts: int, episodes: int, last_error: str):
        self.restarts = restarts
        self.episodes = episodes
        self.last_error = last_error
        super().__init__(
            f"the environments keep raising ({restarts} restarts, {episodes} episodes "
            f"finished); the last error: {one_line(last_error)}"
        )


def one_line(trace: str) -> str:
    """A traceback on one line: its frames as ``file:line in function``, then the error."""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    frames = [
        line.removeprefix("File ").replace('", line ', ":").replace('"', "")
        for line in lines
        if line.startswith('File "')
    ]
    error = lines[-1] if lines else "unknown error"
    return (" <- ".join(reversed(frames[-3:])) + ": " if frames else "") + error


class EnvBatch:
    """K environments stepped in turn, with automatic reset and episode bookkeeping.

    After an episode ends the returned observation is already the first of the next episode,
    as the wire protocol expects; the final observation of an episode cut by truncation comes
    back beside it, for the learner to bootstrap from. An environment that raises is recreated
    and its episode is reported as truncated (with no final observation); the other
    environments go on.

    Args:
      config: ``spec.env``.
      num_envs: K.
      seeds: one seed per environment, for its first reset.
    """

    def __init__(self, config: EnvConfig, num_envs: int, seeds: list[int]):
        self.config = config
        self.num_envs = num_envs
        self._seeds = list(seeds)
        self.envs = [make_env(config) for _ in range(num_envs)]
        self.spec = spec_of(self.envs[0], config.id)
        self._obs_dtype = np.dtype(self.spec.observation_dtype)
        # Discrete(n, start=s) spaces: the wire carries 0..n-1, the env wants s..s+n-1.
        self._starts = [self._action_start(env) for env in self.envs]
        self._returns = [0.0] * num_envs
        self._lengths = [0] * num_envs
        #: Envs recreated after raising, the episodes that ended, and the latest traceback.
        self.restarts = 0
        self.episodes = 0
        self.last_error: str | None = None

    @staticmethod
    def _action_start(env) -> int:
        return int(getattr(env.action_space, "start", 0))

    def reset(self) -> np.ndarray:
        """Resets every env with its seed; returns observations [K, *obs_shape]."""
        obs = np.empty((self.num_envs,) + self.spec.observation_shape, self._obs_dtype)
        for i, env in enumerate(self.envs):
            obs[i], _ = env.reset(seed=self._seeds[i])
        self._returns = [0.0] * self.num_envs
        self._lengths = [0] * self.num_envs
        return obs

    def step(self, actions: np.ndarray):
        """Steps every env with its action.

        Returns:
          observations [K, ...], rewards [K] float32, terminated [K] bool, truncated [K] bool,
          the episodes that ended as a list of (env_id, return, length), and the final
          observations of the episodes truncated by this step as (env ids [M] int64,
          observations [M, ...]).
        """
        # Per-env work stays in plain Python objects and the arrays are built once at the end:
        # numpy scalar reads and writes cost about a microsecond each, as much as a CartPole step.
        k = self.num_envs
        if self.spec.discrete:
            acts = [a + s for a, s in zip(actions.tolist(), self._starts)]
        else:
            # The learner already maps the policy's [-1, 1] onto the bounds and clips; clipping
            # again here guards the env against a learner that does not.
            space = self.envs[0].action_space
            acts = list(np.clip(actions, space.low, space.high))
        obs, rewards, terminated, truncated = [None] * k, [0.0] * k, [False] * k, [False] * k
        returns, lengths = self._returns, self._lengths
        episodes, final_ids, finals = [], [], []
        for i, env in enumerate(self.envs):
            try:
                o, r, term, trunc, info = env.step(acts[i])
            except Exception:  # noqa: BLE001 - one broken env must not stop the others
                self._restart(i, "step")
                env = self.envs[i]
                o, r, term, trunc, info = None, 0.0, False, True, {}  # reset just below
            returns[i] += r
            lengths[i] += 1
            if (term or trunc) and not (term and info.get(GAME_CONTINUES)):
                episodes.append((i, float(returns[i]), lengths[i]))
                returns[i] = 0.0
                lengths[i] = 0
                if trunc and not term and o is not None:
                    final_ids.append(i)
                    finals.append(o)
                try:
                    o, _ = env.reset()
                except Exception:  # noqa: BLE001 - a reset that raises is as broken as a step
                    self._restart(i, "reset")
                    try:
                        o, _ = self.envs[i].reset()
                    except Exception:  # noqa: BLE001 - a new env that cannot reset is broken
                        self.last_error = traceback.format_exc()
                        raise EnvsKeepFailing(
                            self.restarts, self.episodes, self.last_error
                        ) from None
            obs[i], rewards[i], terminated[i], truncated[i] = o, r, term, trunc
        self.episodes += len(episodes)
        self.check_failing()
        final = (
            (np.asarray(final_ids, np.int64), np.asarray(finals, self._obs_dtype))
            if final_ids
            else (_NO_ENVS, np.zeros((0,) + self.spec.observation_shape, self._obs_dtype))
        )
        return (
            np.asarray(obs, self._obs_dtype),
            np.asarray(rewards, np.float32),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            episodes,
            final,
        )

    def check_failing(self) -> None:
        """Raises :class:`EnvsKeepFailing` once the envs have raised at least
        :data:`ENV_FAILURES` times, three times per env, and at least as often as they
        finished episodes: an env that raises now and then goes on (so do envs that all
        raise once together); one that raises every episode ends its actor."""
        if self.restarts >= max(ENV_FAILURES, 3 * self.num_envs) and self.restarts >= self.episodes:
            raise EnvsKeepFailing(self.restarts, self.episodes, self.last_error or "")

    def _restart(self, i: int, where: str) -> None:
        self.last_error = traceback.format_exc()
        log.error("env %d raised in %s; recreating it:\n%s", i, where, self.last_error.rstrip())
        self.restarts += 1
        try:
            self.envs[i].close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self.envs[i] = make_env(self.config)
        self._starts[i] = self._action_start(self.envs[i])

    def close(self) -> None:
        """Closes every environment."""
        for env in self.envs:
            env.close()
