"""Local checkpoints of the agent and the learner's counters (TensorFlow's own format, no pickle).

A checkpoint holds the agent's trackables (network, optimizer state, sampling RNG), the agent's
extra state as plain arrays in ``ckpt-N.extra.npz`` (R2D2's replay), and the
counters a resumed run continues from: learner steps, env steps, episodes, elapsed seconds and
the recent episode returns. ``tf.train.CheckpointManager`` writes each checkpoint's files before
it updates the ``checkpoint`` index file, so a crash mid-write leaves the previous one loadable.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import tensorflow as tf

from learner.agents.base import Agent
from learner.runtime import LearnerRuntime

log = logging.getLogger(__name__)


#: Suffix of the file beside a checkpoint that holds the agent's extra state (a replay).
EXTRA_SUFFIX = ".extra.npz"


def _write_npz_atomically(path: str, arrays: dict[str, np.ndarray]) -> None:
    """np.savez to a temporary name, then rename (plain arrays, no pickle)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def checkpoint_directory(uri: str, run_dir: str | None) -> str | None:
    """The local directory for ``spec.checkpoint.uri`` (empty: ``<run_dir>/checkpoints``)."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri:
        return uri
    return os.path.join(run_dir, "checkpoints") if run_dir else None


class Checkpointer:
    """Saves and restores one learner's agent and counters.

    Args:
      directory: where checkpoints live.
      runtime: the runtime whose counters are saved and restored.
      keep: how many recent checkpoints to keep.
      interval_steps: save every this many learner steps (0: never by steps).
      interval_seconds: save at least this often (0: never by time).
    """

    def __init__(self, directory: str, runtime: LearnerRuntime, keep: int,
                 interval_steps: int, interval_seconds: float):
        self.directory = directory
        self.runtime = runtime
        self.keep = keep
        self.interval_steps = interval_steps
        self.interval_seconds = interval_seconds
        window = runtime.returns.maxlen
        self._counters = {
            "learner_steps": tf.Variable(0, dtype=tf.int64),
            "env_steps": tf.Variable(0, dtype=tf.int64),
            "episodes": tf.Variable(0, dtype=tf.int64),
            "elapsed": tf.Variable(0.0, dtype=tf.float64),
            "returns": tf.Variable(np.zeros(window), dtype=tf.float64),
            "returns_count": tf.Variable(0, dtype=tf.int64),
        }
        self._manager: tf.train.CheckpointManager | None = None
        self._last_save_time = time.monotonic()
        self._last_save_step = 0
        self.last_checkpoint: str | None = None
        self.failures = 0

    def attach(self, agent: Agent) -> None:
        """Binds the agent's variables and restores the latest checkpoint if there is one."""
        self._agent = agent
        ckpt = tf.train.Checkpoint(**agent.checkpointables(), **self._counters)
        self._manager = tf.train.CheckpointManager(ckpt, self.directory, max_to_keep=self.keep)
        latest = self._manager.latest_checkpoint
        if latest is None:
            return
        ckpt.restore(latest).assert_existing_objects_matched()
        extra = latest + EXTRA_SUFFIX
        if os.path.exists(extra):
            with np.load(extra, allow_pickle=False) as data:
                agent.load_extra_state({k: data[k] for k in data.files})
            log.info("restored the agent's extra state (replay) from %s", extra)
        r = self.runtime
        c = self._counters
        r.learner_steps = int(c["learner_steps"].numpy())
        r.env_steps = int(c["env_steps"].numpy())
        r.episodes = int(c["episodes"].numpy())
        r.elapsed_before = float(c["elapsed"].numpy())
        count = int(c["returns_count"].numpy())
        r.returns.clear()
        r.returns.extend(c["returns"].numpy()[:count].tolist())
        self._last_save_step = r.learner_steps
        self.last_checkpoint = latest
        log.info("resumed from %s at learner step %d, %d env steps", latest, r.learner_steps,
                 r.env_steps)

    def save(self) -> str | None:
        """Writes a checkpoint now; returns its path (None if no agent is attached yet)."""
        if self._manager is None:
            return None
        r = self.runtime
        c = self._counters
        c["learner_steps"].assign(r.learner_steps)
        c["env_steps"].assign(r.env_steps)
        c["episodes"].assign(r.episodes)
        c["elapsed"].assign(r.elapsed)
        returns = np.zeros(r.returns.maxlen)
        recent = list(r.returns)
        returns[:len(recent)] = recent
        c["returns"].assign(returns)
        c["returns_count"].assign(len(recent))
        extra = self._agent.extra_state()
        if extra is not None:
            # Written before the checkpoint that names it: a crash in between leaves an
            # orphan file, never a checkpoint whose replay is missing or half written.
            os.makedirs(self.directory, exist_ok=True)
            prefix = os.path.join(self.directory, f"ckpt-{r.learner_steps}")
            _write_npz_atomically(prefix + EXTRA_SUFFIX, extra)
        path = self._manager.save(checkpoint_number=r.learner_steps)
        self._remove_orphan_extras()
        self._last_save_time = time.monotonic()
        self._last_save_step = r.learner_steps
        self.last_checkpoint = path
        return path

    def _remove_orphan_extras(self) -> None:
        """Deletes extra-state files of checkpoints the manager no longer keeps."""
        kept = {p + EXTRA_SUFFIX for p in self._manager.checkpoints}
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith(EXTRA_SUFFIX) and path not in kept:
                os.remove(path)

    def maybe_save(self) -> None:
        """Saves if an interval has passed; called after each training step.

        A failing save is logged and counted, and training goes on: the next interval tries
        again with a fresh checkpoint.
        """
        steps = self.runtime.learner_steps - self._last_save_step
        due = (self.interval_steps and steps >= self.interval_steps) or (
            self.interval_seconds and time.monotonic() - self._last_save_time
            >= self.interval_seconds)
        if not due:
            return
        try:
            self.save()
        except (OSError, tf.errors.OpError) as exc:
            self.failures += 1
            self._last_save_time = time.monotonic()
            self._last_save_step = self.runtime.learner_steps
            log.error("checkpoint failed (%d so far): %s", self.failures, exc)
