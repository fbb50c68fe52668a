"""K environments stepped in parallel by worker processes, exchanging arrays via shared memory.

TensorFlow Agents' BatchEnv idea: environments in separate processes step without contending
for one interpreter lock, and their results are observed as one batch. Here the parent writes
the actions into a shared-memory block, wakes each worker with a one-byte message on its pipe,
and waits for one byte back; observations, rewards, episode-end flags and finished-episode
records are read from shared memory. Nothing is pickled per step.

Each worker steps a contiguous slice of the K environments with an in-process
:class:`~seedrl.actors.envs.EnvBatch` (so an environment that raises is recreated there). A worker
that dies is started again: its environments begin new episodes and report the step as
truncated, while the rest of the batch goes on.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import multiprocessing.connection as mpc
from multiprocessing import shared_memory

import numpy as np

from seedrl.common.config import EnvConfig
from seedrl.common.wire import EnvSpec

log = logging.getLogger(__name__)

_RESET, _STEP, _CLOSE, _DONE = b"r", b"s", b"c", b"k"
#: Seconds a worker may take to start and make its environments.
START_TIMEOUT_S = 120.0


def _layout(spec: EnvSpec, k: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {
        "obs": ((k,) + spec.observation_shape, np.dtype(spec.observation_dtype)),
        "action": ((k,) + spec.action_shape, np.dtype(spec.action_dtype)),
        "reward": ((k,), np.dtype(np.float32)),
        "terminated": ((k,), np.dtype(bool)),
        "truncated": ((k,), np.dtype(bool)),
        "episode_end": ((k,), np.dtype(bool)),
        "episode_return": ((k,), np.dtype(np.float64)),
        "episode_length": ((k,), np.dtype(np.int64)),
        "has_final": ((k,), np.dtype(bool)),
        "final_obs": ((k,) + spec.observation_shape, np.dtype(spec.observation_dtype)),
    }


class _SharedArrays:
    """Named numpy arrays laid out in one shared-memory block."""

    def __init__(self, layout, name: str | None = None):
        sizes = {key: math.prod(shape) * dtype.itemsize for key, (shape, dtype) in layout.items()}
        total = max(1, sum(-(-s // 64) * 64 for s in sizes.values()))  # 64-byte aligned fields
        self.shm = shared_memory.SharedMemory(name=name, create=name is None, size=total)
        self.arrays: dict[str, np.ndarray] = {}
        offset = 0
        for key, (shape, dtype) in layout.items():
            self.arrays[key] = np.ndarray(shape, dtype, buffer=self.shm.buf, offset=offset)
            offset += -(-sizes[key] // 64) * 64

    def close(self, unlink: bool = False) -> None:
        self.arrays.clear()
        self.shm.close()
        if unlink:
            self.shm.unlink()


def _worker_main(
    config: EnvConfig,
    spec: EnvSpec,
    k: int,
    lo: int,
    hi: int,
    seeds: list[int],
    shm_name: str,
    conn,
) -> None:
    """Steps envs [lo, hi) of the batch on command; runs in the worker process."""
    from seedrl.actors.envs import EnvBatch

    shared = _SharedArrays(_layout(spec, k), name=shm_name)
    a = shared.arrays
    envs = EnvBatch(config, hi - lo, seeds)
    try:
        while True:
            try:
                cmd = conn.recv_bytes()
            except EOFError:
                return  # the parent went away
            if cmd == _RESET:
                a["obs"][lo:hi] = envs.reset()
                a["episode_end"][lo:hi] = False
                a["has_final"][lo:hi] = False
            elif cmd == _STEP:
                obs, reward, terminated, truncated, episodes, (final_ids, final_obs) = envs.step(
                    a["action"][lo:hi]
                )
                a["obs"][lo:hi] = obs
                a["reward"][lo:hi] = reward
                a["terminated"][lo:hi] = terminated
                a["truncated"][lo:hi] = truncated
                a["episode_end"][lo:hi] = False
                for i, ret, length in episodes:
                    a["episode_end"][lo + i] = True
                    a["episode_return"][lo + i] = ret
                    a["episode_length"][lo + i] = length
                a["has_final"][lo:hi] = False
                a["has_final"][lo + final_ids] = True
                a["final_obs"][lo + final_ids] = final_obs
            elif cmd == _CLOSE:
                return
            conn.send_bytes(_DONE)
    finally:
        envs.close()
        shared.close()


class _Worker:
    def __init__(self, index: int, lo: int, hi: int):
        self.index = index
        self.lo = lo
        self.hi = hi
        self.proc = None
        self.conn = None
        self.starts = 0


class ProcessEnvBatch:
    """K environments in worker processes, stepped as one batch (same interface as EnvBatch).

    Args:
      config: ``spec.env``.
      num_envs: K.
      seeds: one seed per environment, for its first reset.
      num_processes: worker processes; the envs are split among them as evenly as possible.
      spec: the environments' spec if known (otherwise one env is made here to read it).
    """

    def __init__(
        self,
        config: EnvConfig,
        num_envs: int,
        seeds: list[int],
        num_processes: int,
        spec: EnvSpec | None = None,
    ):
        if spec is None:
            from seedrl.actors.envs import make_env, spec_of

            probe = make_env(config)
            spec = spec_of(probe, config.id)
            probe.close()
        self.config = config
        self.spec = spec
        self.num_envs = num_envs
        self._seeds = list(seeds)
        #: Workers restarted after dying, the episodes that ended, and the latest death.
        self.restarts = 0
        self.episodes = 0
        self.last_error: str | None = None
        self._ctx = mp.get_context("spawn")  # no inherited threads or locks from the parent
        self._shared = _SharedArrays(_layout(spec, num_envs))
        self._a = self._shared.arrays
        p = max(1, min(num_processes, num_envs))
        bounds = np.linspace(0, num_envs, p + 1).round().astype(int)
        self._workers = [_Worker(i, int(bounds[i]), int(bounds[i + 1])) for i in range(p)]
        try:
            for w in self._workers:
                self._start(w)
        except BaseException:
            self.close()
            raise

    @property
    def num_processes(self) -> int:
        """Worker processes."""
        return len(self._workers)

    def _start(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        # A restarted worker gets fresh seeds so it does not replay the same episodes.
        seeds = [s + 1_000_003 * w.starts for s in self._seeds[w.lo : w.hi]]
        w.proc = self._ctx.Process(
            target=_worker_main,
            name=f"env-worker-{w.index}",
            daemon=True,
            args=(
                self.config,
                self.spec,
                self.num_envs,
                w.lo,
                w.hi,
                seeds,
                self._shared.shm.name,
                child,
            ),
        )
        w.proc.start()
        child.close()
        w.conn = parent
        w.starts += 1

    def _command(self, cmd: bytes, timeout: float | None = None) -> list[_Worker]:
        """Sends ``cmd`` to every worker and waits for all; returns the workers that died."""
        dead, waiting = [], {}
        for w in self._workers:
            try:
                w.conn.send_bytes(cmd)
                waiting[w.conn] = w
            except (BrokenPipeError, OSError):
                dead.append(w)
        while waiting:
            ready = mpc.wait(list(waiting), timeout)
            if not ready:
                raise TimeoutError(f"env workers did not answer within {timeout}s")
            for conn in ready:
                w = waiting.pop(conn)
                try:
                    conn.recv_bytes()
                except (EOFError, OSError):
                    dead.append(w)
        return dead

    def _restart(self, w: _Worker) -> None:
        self.last_error = (
            f"env worker {w.index} (envs {w.lo}..{w.hi - 1}) died with exit code "
            f"{w.proc.exitcode if w.proc else None} (its traceback is in the actor's log)"
        )
        log.warning("%s; restarting it", self.last_error)
        self.restarts += 1
        w.conn.close()
        if w.proc is not None:
            w.proc.join(5)
            if w.proc.is_alive():
                w.proc.kill()
        self._start(w)
        w.conn.send_bytes(_RESET)
        if not w.conn.poll(START_TIMEOUT_S):
            raise TimeoutError(f"restarted env worker {w.index} did not reset in time")
        w.conn.recv_bytes()

    def reset(self) -> np.ndarray:
        """Resets every env with its seed; returns observations [K, *obs_shape] (a copy)."""
        for w in self._command(_RESET, START_TIMEOUT_S):
            self._restart(w)
        return self._a["obs"].copy()

    def step(self, actions: np.ndarray):
        """Steps all K envs in parallel; same return values as :meth:`EnvBatch.step`."""
        a = self._a
        a["action"][...] = actions
        dead = self._command(_STEP, START_TIMEOUT_S)
        for w in dead:
            self._restart(w)
            # Its envs start over: the step that was lost reads as a truncation.
            a["reward"][w.lo : w.hi] = 0.0
            a["terminated"][w.lo : w.hi] = False
            a["truncated"][w.lo : w.hi] = True
            a["episode_end"][w.lo : w.hi] = False
            a["has_final"][w.lo : w.hi] = False
        ends = np.flatnonzero(a["episode_end"])
        episodes = [
            (int(i), float(a["episode_return"][i]), int(a["episode_length"][i])) for i in ends
        ]
        final_ids = np.flatnonzero(a["has_final"]).astype(np.int64)
        self.episodes += len(episodes)
        if dead:
            from seedrl.actors.envs import ENV_FAILURES, EnvsKeepFailing

            # Workers, not envs, restart here: ENV_FAILURES deaths of them.
            if self.restarts >= ENV_FAILURES and self.restarts >= self.episodes:
                raise EnvsKeepFailing(self.restarts, self.episodes, self.last_error or "")
        return (
            a["obs"].copy(),
            a["reward"].copy(),
            a["terminated"].copy(),
            a["truncated"].copy(),
            episodes,
            (final_ids, a["final_obs"][final_ids]),
        )

    def worker_pids(self) -> list[int]:
        """Process ids of the workers (for tests and diagnostics)."""
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        """Stops the workers and frees the shared memory."""
        for w in self._workers:
            if w.conn is not None:
                try:
                    w.conn.send_bytes(_CLOSE)
                except (BrokenPipeError, OSError):
                    pass
        for w in self._workers:
            if w.proc is not None:
                w.proc.join(5)
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(5)
            if w.conn is not None:
                w.conn.close()
        self._workers = []
        if self._shared is not None:
            self._shared.close(unlink=True)
            self._shared = None
