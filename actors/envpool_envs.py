"""Atari games stepped by envpool: a whole batch per call, in C++ threads (``spec.env.backend``).

envpool runs ALE with the DQN preprocessing in C++: the emulator at one frame per call with
sticky actions done by ALE itself, up to ``noopMax`` no-op frames after a reset, the frame skip
with a max over the last two frames, the grayscale palette, an area resize and the frame stack,
which is what :func:`seedrl.actors.atari.make_atari` builds from gymnasium's
``AtariPreprocessing``. With sticky actions off and one no-op the two give the same frames,
rewards and episode ends step for step (tests/actors/test_envpool_envs.py). The differences that
remain, none of which changes what an observation looks like:

- Seeds: each env's seed (``env_seeds``) seeds its emulator and no-op draws inside envpool, not
  through gymnasium's seeding, so with sticky actions or no-ops the two backends play different
  (equally distributed) episodes from the same seed.
- ALE's own limit of 108,000 frames per episode becomes 108,000 / frameSkip agent steps; ALE
  counts the no-op frames of the start as well, so gymnasium truncates up to ``noopMax /
  frameSkip`` steps earlier.
- ``terminalOnLifeLoss``: gymnasium stops the frame skip at the frame the life is lost, envpool
  plays the step's remaining frames; both then end the episode and reset the game.

What the pool does not do itself is done here, on arrays: the channels-last layout the networks
read ([K, H, W, C], oldest frame first, as ``ChannelStack``), lost lives (``lifeLossTerminal``
and ``terminalOnLifeLoss``, read from the lives envpool reports; its own ``episodic_life`` resets
with new no-ops, which neither of ours does), and the wire protocol's episode bookkeeping: the
observation after an episode's end is already the next episode's first, which needs a reset of
just those envs (envpool's own reset waits for the next step).
"""

from __future__ import annotations

import logging
import os
import traceback

import cv2
import numpy as np

from seedrl.common.config import ATARI_PREFIX, EnvConfig, envpool_problems
from seedrl.common.wire import EnvSpec

log = logging.getLogger(__name__)

#: ALE's limit of emulator frames per episode (ale-py's v5 envs): envpool counts agent steps.
ALE_MAX_FRAMES = 108_000
#: Added per restart of a pool to its envs' seeds, so a new pool does not replay old episodes
#: (as :class:`~seedrl.actors.process_envs.ProcessEnvBatch` does for a worker).
RESTART_SEED_STRIDE = 1_000_003


def envpool_task(env_id: str) -> str:
    """envpool's name of an ALE game: ``ALE/Pong-v5`` is ``Pong-v5``."""
    return env_id.removeprefix(ATARI_PREFIX)


def envpool_unsupported(config: EnvConfig) -> str | None:
    """Why envpool cannot step ``spec.env`` as gymnasium would, naming the field; None if it can."""
    problems = envpool_problems(config)
    if problems:
        return "; ".join(f"{path}: {reason}" for path, reason in problems)
    try:
        import envpool
    except ImportError as exc:
        return f"spec.env.backend: envpool is not installed here ({exc})"
    task = envpool_task(config.id)
    if task not in envpool.list_all_envs():
        return f"spec.env.id: envpool has no game {task!r}"
    return None


def resolve_backend(config: EnvConfig) -> str:
    """The backend that steps ``spec.env`` in batches: 'envpool' or 'gymnasium'.

    ``auto`` takes envpool where it gives the same observations and gymnasium elsewhere.

    Raises:
      ValueError: ``spec.env.backend`` is envpool and envpool cannot step this env.
    """
    if config.backend == "gymnasium" or (config.backend == "auto" and not config.is_atari):
        return "gymnasium"
    reason = envpool_unsupported(config)
    if reason is None:
        return "envpool"
    if config.backend == "envpool":
        raise ValueError(f"spec.env.backend is envpool, but {reason}")
    return "gymnasium"


def _int32(seed: int) -> int:
    """A seed as the signed 32-bit int envpool takes: the same 32 bits, so distinct uint32
    seeds (:func:`~seedrl.actors.main.env_seeds`) stay distinct."""
    seed %= 2**32
    return seed - 2**32 if seed >= 2**31 else seed


def usable_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class EnvpoolBatch:
    """K Atari envs in one envpool, stepped as one batch (the interface of
    :class:`~seedrl.actors.envs.EnvBatch`).

    After an episode ends the returned observation is already the first of the next episode;
    the final observation of an episode cut by truncation comes back beside it. If the pool
    raises, it is made anew with fresh seeds: every env starts a new episode and the step reads
    as truncated (no final observations, no episodes reported), as when a worker of
    :class:`~seedrl.actors.process_envs.ProcessEnvBatch` dies.

    Args:
      config: ``spec.env``, an Atari game envpool can step (:func:`envpool_unsupported`).
      num_envs: K.
      seeds: one seed per environment.
      num_threads: envpool's worker threads for this batch.
    """

    def __init__(self, config: EnvConfig, num_envs: int, seeds: list[int], num_threads: int = 1):
        reason = envpool_unsupported(config)
        if reason is not None:
            raise ValueError(reason)
        self.config = config
        self.num_envs = num_envs
        self.num_threads = max(1, min(num_threads, num_envs))
        self._seeds = list(seeds)
        #: Pools made anew after raising, the episodes that ended, and the latest traceback.
        self.restarts = 0
        self.episodes = 0
        self.last_error: str | None = None
        self._stepped = False
        self._pool = self._make_pool()
        channels, height, width = self._pool.observation_space.shape
        self.spec = EnvSpec(
            config.id, "uint8", (height, width, channels), "int32", (), self._pool.action_space.n
        )
        self._all = np.arange(num_envs, dtype=np.int32)
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._lives = np.zeros(num_envs, np.int32)

    def _make_pool(self):
        import envpool

        atari = self.config.atari
        options = dict(self.config.options)
        limit = ALE_MAX_FRAMES // atari.frame_skip
        if self.config.max_episode_steps is not None:
            limit = min(limit, self.config.max_episode_steps)
        pool = envpool.make(
            envpool_task(self.config.id),
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=self.num_envs,  # sync: every call returns exactly the envs it stepped
            num_threads=self.num_threads,
            env_seed=[_int32(s + RESTART_SEED_STRIDE * self.restarts) for s in self._seeds],
            max_episode_steps=limit,
            stack_num=atari.frame_stack,
            frame_skip=atari.frame_skip,
            noop_max=atari.noop_max,
            img_height=atari.screen_size,
            img_width=atari.screen_size,
            gray_scale=atari.grayscale,
            repeat_action_probability=atari.sticky_action_probability,
            full_action_space=atari.full_action_space,
            mode=int(options.get("mode", -1)),  # -1: the game's default
            difficulty=int(options.get("difficulty", -1)),
            # gymnasium's preprocessing presses no FIRE after a reset, clips no rewards (the
            # learner does) and ends no episode on a lost life (handled here, see the module).
            use_fire_reset=False,
            reward_clip=False,
            episodic_life=False,
            use_inter_area_resize=True,  # cv2.INTER_AREA, as AtariPreprocessing resizes
        )
        keys = list(pool._state_keys)
        names = ("info:env_id", "obs", "reward", "done", "trunc", "info:lives")
        self._keys = {name: keys.index(name) for name in names}
        return pool

    def _call(self, env_ids: np.ndarray, actions: np.ndarray | None):
        """Steps (or, without actions, resets) the envs ``env_ids``; their results in that
        order: (channels-first obs, reward, done, trunc, lives)."""
        # envpool's low-level send/recv: its gymnasium layer rebuilds nested info dicts per
        # call (~0.1 ms), which this loop does not read.
        if actions is None:
            self._pool._reset(env_ids)
        else:
            self._pool.send(actions, env_ids)
        state = self._pool._recv()
        k = self._keys
        ids = state[k["info:env_id"]]
        got = (
            state[k["obs"]],
            state[k["reward"]],
            state[k["done"]],
            state[k["trunc"]],
            state[k["info:lives"]],
        )
        if not np.array_equal(ids, env_ids):  # a sync pool answers in order; never trust it
            order = np.argsort(ids)[np.argsort(np.argsort(env_ids))]
            got = tuple(np.asarray(x)[order] for x in got)
        return got

    def _channels_last(self, obs: np.ndarray, out: np.ndarray) -> None:
        """Writes [M, C, H, W] frames into ``out`` [M, H, W, C]: per env a 2-D transpose of
        [C, H*W], which OpenCV does ~10x faster than numpy's strided copy of the batch."""
        m, c = obs.shape[:2]
        for i in range(m):
            cv2.transpose(obs[i].reshape(c, -1), out[i].reshape(-1, c))

    def reset(self) -> np.ndarray:
        """Resets every env; returns observations [K, *obs_shape].

        A batch already stepped is made anew first, so that, as with EnvBatch, each env starts
        again from its seed.
        """
        if self._stepped:
            self._pool.close()
            self._pool = self._make_pool()
            self._stepped = False
        obs, _, _, _, lives = self._call(self._all, None)
        out = np.empty((self.num_envs,) + self.spec.observation_shape, np.uint8)
        self._channels_last(obs, out)
        self._lives[:] = lives
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return out

    def step(self, actions: np.ndarray):
        """Steps every env with its action; same return values as
        :meth:`~seedrl.actors.envs.EnvBatch.step`."""
        self._stepped = True
        k = self.num_envs
        try:
            obs_cf, reward, done, trunc, lives = self._call(
                self._all, np.asarray(actions, np.int32)
            )
        except Exception:  # noqa: BLE001 - a broken pool is made anew, the actor goes on
            return self._restart()
        atari = self.config.atari
        reward = np.asarray(reward, np.float32)
        truncated = np.asarray(trunc, bool)
        terminated = np.asarray(done, bool) & ~truncated
        ended = terminated | truncated
        lost = (lives < self._lives) & ~ended
        if atari.terminal_on_life_loss:
            terminated = terminated | lost
            ended = ended | lost
        elif atari.life_loss_terminal:
            # Terminal for the learner only: the game, its episode and return go on.
            terminated = terminated | lost
        self._returns += reward
        self._lengths += 1
        obs = np.empty((k,) + self.spec.observation_shape, np.uint8)
        self._channels_last(obs_cf, obs)
        self._lives[:] = lives
        ends = np.flatnonzero(ended)
        episodes = [(int(i), float(self._returns[i]), int(self._lengths[i])) for i in ends]
        cut = np.flatnonzero(truncated & ~terminated)
        final = (cut.astype(np.int64), obs[cut])  # fancy indexing copies: safe to overwrite
        if ends.size:
            self._returns[ends] = 0.0
            self._lengths[ends] = 0
            ids = ends.astype(np.int32)
            try:
                new_obs, _, _, _, new_lives = self._call(ids, None)
            except Exception:  # noqa: BLE001 - as broken as a step that raises
                return self._restart()
            fresh = np.empty((len(ids),) + self.spec.observation_shape, np.uint8)
            self._channels_last(new_obs, fresh)
            obs[ends] = fresh
            self._lives[ends] = new_lives
        self.episodes += len(episodes)
        return obs, reward, terminated, truncated, episodes, final

    def _restart(self):
        """Makes the pool anew after it raised; the step's results: every env truncated."""
        from seedrl.actors.envs import ENV_FAILURES, EnvsKeepFailing

        self.last_error = traceback.format_exc()
        log.error("envpool raised; making the pool anew:\n%s", self.last_error.rstrip())
        self.restarts += 1
        if self.restarts >= ENV_FAILURES and self.restarts >= self.episodes:
            raise EnvsKeepFailing(self.restarts, self.episodes, self.last_error)
        try:
            self._pool.close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self._pool = self._make_pool()
        self._stepped = False
        obs = self.reset()
        k = self.num_envs
        return (
            obs,
            np.zeros(k, np.float32),
            np.zeros(k, bool),
            np.ones(k, bool),
            [],
            (np.zeros(0, np.int64), np.zeros((0,) + self.spec.observation_shape, np.uint8)),
        )

    def close(self) -> None:
        """Stops the pool's threads."""
        self._pool.close()
