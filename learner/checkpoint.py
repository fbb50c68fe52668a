"""Checkpoints on local disk or Google Cloud Storage, published atomically, resumed after a crash.

Layout under the checkpoint URI (a directory or ``gs://bucket/prefix``)::

    MANIFEST.json                       the only index: which checkpoints exist, newest last
    ckpt-000000012000-1f2e3d4c/         one checkpoint (learner step, then a writer-unique tag)
        variables.index                 TensorFlow's checkpoint of the agent's trackables:
        variables.data-00000-of-00001     networks (and target network), optimizer slots,
                                          normalizer statistics, RNG, plus the counters
        extra.npz                       the agent's extra state as plain arrays (R2D2's replay)
        experiment.yaml                 the resolved Experiment the checkpoint was trained with
        metadata.json                   counters and provenance, for people and the operator

Publication: every file of a checkpoint is uploaded first; then ``MANIFEST.json`` is rewritten
with the new entry, *conditional on the generation this learner last saw* (GCS's
``ifGenerationMatch``; the local store emulates it under a file lock). So:

- a reader never sees a partial checkpoint: what the manifest does not list does not exist, and
  each listed file carries its size and SHA-256, checked before anything is loaded; an entry
  failing its checks is skipped with a warning and never loaded;
- two learners of one experiment cannot both publish: the second manifest write finds the
  generation moved and is refused (:class:`CheckpointConflict`);
- a crash between the uploads and the manifest leaves orphan files that nothing loads (and, on
  local disk, the temporary file of an upload cut short); the next successful publication
  deletes them, with the checkpoints retention dropped.

No pickle anywhere: TensorFlow's format, ``np.load(allow_pickle=False)``, YAML and JSON.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import yaml

from seedrl.common import finite_json
from seedrl.common.config import Experiment, dump_experiment, to_document
from seedrl.common.resume import bound_changes
from seedrl.common.storage import (
    CHECKPOINT_MANIFEST,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    StorageError,
    open_store,
    with_retries,
)
from seedrl.common.wire import EnvSpec, WireError
from seedrl.learner.agents.base import Agent
from seedrl.learner.runtime import LearnerRuntime

log = logging.getLogger(__name__)

MANIFEST = CHECKPOINT_MANIFEST
#: Version of the manifest layout; a reader refuses versions it does not know.
FORMAT = 1
#: The TensorFlow checkpoint's file prefix inside a checkpoint directory.
VARIABLES = "variables"
EXTRA = "extra.npz"
EXPERIMENT = "experiment.yaml"
METADATA = "metadata.json"
_NAME = re.compile(r"^ckpt-\d{12}-[0-9a-f]{8}$")
_HASH_CHUNK = 1 << 20


class _VariablesInOrder(tf.Module):
    """Every variable of a Keras layer or model, tracked by position and path.

    Keras 3 does not expose sub-layers held in Python lists (an MLP's dense layers, a conv
    stack) to TensorFlow's object graph, so checkpointing a model directly silently leaves
    those weights out. Listing ``layer.variables`` covers all of them. Keys are the position
    (the order is fixed by the architecture) and the Keras path without the per-process
    numbering Keras adds to auto-named layers (``conv2d_3`` -> ``conv2d``), which depends on
    how many models the process built before.
    """

    def __init__(self, layer: tf.keras.layers.Layer):
        super().__init__(name=None)
        self.variables_in_order = {}
        for i, v in enumerate(layer.variables):
            path = re.sub(r"_\d+(?=/|$)", "", str(getattr(v, "path", None) or v.name))
            self.variables_in_order[f"{i:04d}.{path.replace('/', '.')}"] = v


def trackables(agent: Agent) -> dict[str, object]:
    """The agent's checkpointables, with Keras layers replaced by all their variables."""
    return tracked(agent.checkpointables())


def tracked(objects: dict[str, object]) -> dict[str, object]:
    """Checkpointables by name as a checkpoint holds them: Keras layers replaced by all their
    variables. A reader that builds only some of an agent's parts (a policy: its networks)
    restores them from a checkpoint under the same names."""
    return {
        name: _VariablesInOrder(obj) if isinstance(obj, tf.keras.layers.Layer) else obj
        for name, obj in objects.items()
    }


class CheckpointError(RuntimeError):
    """The checkpoint location cannot be used (nothing loadable, or unreadable manifest)."""


class CheckpointConflict(CheckpointError):
    """Another learner published to the same location since this one last read it."""


class NonFiniteVariables(CheckpointError):
    """The agent's variables hold NaN or infinity: publishing them would push good
    checkpoints out of the ``keep`` window, so they are not saved."""


def non_finite_variables(objects: dict[str, object]) -> list[str]:
    """Names of the floating variables of ``objects`` (an agent's checkpointables: Keras
    layers, optimizers, modules, variables) that hold NaN or infinity."""
    bad = []
    for name, obj in objects.items():
        if isinstance(obj, tf.Variable):
            variables = [obj]
        else:
            variables = list(getattr(obj, "variables", None) or [])
        for v in variables:
            # Keras 3 variables name their dtype as a string.
            if tf.as_dtype(v.dtype).is_floating and not bool(
                tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v)))
            ):
                bad.append(f"{name}/{getattr(v, 'path', None) or v.name}")
    return bad


def checkpoint_uri(uri: str, run_dir: str | None) -> str | None:
    """Where checkpoints go: ``spec.checkpoint.uri``, or ``<run_dir>/checkpoints`` if empty."""
    if uri:
        return uri
    return os.path.join(run_dir, "checkpoints") if run_dir else None


def _file_digest(path: str) -> dict:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            sha.update(chunk)
    return {"size": os.path.getsize(path), "sha256": sha.hexdigest()}


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read_manifest(store: ObjectStore) -> tuple[dict | None, int]:
    """The manifest and its generation; ``(None, 0)`` when there is none yet.

    Raises:
      CheckpointError: the manifest exists but is not one this version can read. Nothing is
        written over it: a person has to look.
    """
    try:
        data, generation = with_retries(
            lambda: store.read(MANIFEST), what=f"reading {store.uri}/{MANIFEST}"
        )
    except NotFound:
        return None, 0
    try:
        manifest = json.loads(data)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("checkpoints"), list):
            raise ValueError("no list of checkpoints")
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, this learner reads {FORMAT}")
    except ValueError as exc:
        raise CheckpointError(
            f"{store.uri}/{MANIFEST} is unreadable ({exc}); move it away to "
            f"start over, nothing was changed"
        ) from None
    return manifest, generation


class _Downloaded:
    """A verified checkpoint copied to a local temporary directory."""

    def __init__(self, entry: dict, directory: str):
        self.entry = entry
        self.directory = directory

    @property
    def name(self) -> str:
        return self.entry["name"]

    def path(self, file: str) -> str:
        return os.path.join(self.directory, file)

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _download_verified(store: ObjectStore, entry: dict) -> _Downloaded:
    """Copies one manifest entry's files locally and checks sizes and SHA-256s.

    Raises:
      CheckpointError: a file is missing or differs from the manifest.
    """
    name = entry.get("name", "")
    files = entry.get("files")
    if not _NAME.match(str(name)) or not isinstance(files, dict) or not files:
        raise CheckpointError(f"malformed manifest entry {name!r}")
    directory = tempfile.mkdtemp(prefix="seedrl-restore-")
    try:
        for file, expected in files.items():
            if "/" in file or file.startswith("."):
                raise CheckpointError(f"{name}: bad file name {file!r}")
            local = os.path.join(directory, file)
            try:
                with_retries(
                    functools.partial(store.download_file, f"{name}/{file}", local),
                    what=f"downloading {name}/{file}",
                )
            except NotFound:
                raise CheckpointError(f"{name}/{file} is missing") from None
            got = _file_digest(local)
            if got != {"size": expected.get("size"), "sha256": expected.get("sha256")}:
                raise CheckpointError(
                    f"{name}/{file} fails its checksum: {got['size']} bytes, "
                    f"sha256 {got['sha256'][:12]}…, the manifest says "
                    f"{expected.get('size')} bytes, "
                    f"{str(expected.get('sha256'))[:12]}…"
                )
        return _Downloaded(entry, directory)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def fetch_checkpoint(store: ObjectStore, name: str | None = None) -> _Downloaded:
    """Downloads and verifies one checkpoint of a store, for a reader that is not a learner
    (evaluation, export): the named one, or else the newest listed one that verifies (older
    ones are tried when a newer one fails its checks, as a resuming learner does). The caller
    removes the copy with ``cleanup()``.

    Raises:
      CheckpointError: no manifest, an unreadable one, no such name, or nothing verifies.
    """
    manifest, _ = read_manifest(store)
    entries = (manifest or {}).get("checkpoints", [])
    if not entries:
        raise CheckpointError(f"{store.uri} holds no checkpoints (no {MANIFEST} listing any)")
    if name is not None:
        named = [e for e in entries if e.get("name") == name]
        if not named:
            raise CheckpointError(
                f"{store.uri} lists no checkpoint {name} (it lists "
                f"{', '.join(str(e.get('name')) for e in entries[-3:])}"
                f"{' and older' if len(entries) > 3 else ''})"
            )
        return _download_verified(store, named[0])
    problems = []
    for entry in reversed(entries):
        try:
            return _download_verified(store, entry)
        except CheckpointError as exc:
            log.warning("skipping checkpoint %s: %s", entry.get("name"), exc)
            problems.append(str(exc))
    raise CheckpointError(
        f"none of the {len(entries)} checkpoints listed in {store.uri}/{MANIFEST} verifies "
        f"({problems[0]})"
    )


#: How checkpoint directories are named (``ckpt-<learner step>-<tag>``).
CHECKPOINT_NAME = _NAME


class Checkpointer:
    """Publishes and restores one learner's checkpoints in a store.

    Use: :meth:`open` before serving (finds, downloads and verifies the checkpoint to resume
    from, failing fast), :meth:`attach` once the agent exists (restores it), then
    :meth:`maybe_save` after training steps and :meth:`save` at the end.

    Args:
      store: where checkpoints live.
      runtime: the runtime whose counters are saved and restored.
      keep: how many recent checkpoints the manifest keeps.
      interval_steps: save every this many learner steps (0: never by steps).
      interval_seconds: save at least this often (0: never by time).
      sleep: how retries wait (tests pass a no-op).
    """

    def __init__(
        self,
        store: ObjectStore,
        runtime: LearnerRuntime,
        keep: int,
        interval_steps: int,
        interval_seconds: float,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.store = store
        self.runtime = runtime
        self.keep = keep
        self.interval_steps = interval_steps
        self.interval_seconds = interval_seconds
        self._sleep = sleep
        window = runtime.returns.maxlen or 0
        self._counters = {
            "learner_steps": tf.Variable(0, dtype=tf.int64),
            "env_steps": tf.Variable(0, dtype=tf.int64),
            "episodes": tf.Variable(0, dtype=tf.int64),
            "elapsed": tf.Variable(0.0, dtype=tf.float64),
            "returns": tf.Variable(np.zeros(window), dtype=tf.float64),
            "returns_count": tf.Variable(0, dtype=tf.int64),
        }
        self._checkpoint: tf.train.Checkpoint | None = None
        self._objects: dict[str, object] = {}
        self._agent: Agent | None = None
        self._manifest: dict | None = None
        self._generation = 0
        self._resume_from: _Downloaded | None = None
        #: The env spec the checkpoint to resume from was trained on (None: none recorded).
        self.env_spec: EnvSpec | None = None
        self._opened = False
        self._lock = threading.Lock()
        self._last_save_time = time.monotonic()
        self._last_save_step = 0
        self._created = time.time()
        #: Name of the newest checkpoint published or resumed from (None before any).
        self.last_checkpoint: str | None = None
        #: Wall-clock time the newest checkpoint was published (seconds since the epoch).
        self.last_checkpoint_time: float | None = None
        #: How long the newest publication took, in seconds.
        self.last_save_seconds: float | None = None
        #: Failed publications so far (training goes on after each).
        self.failures = 0
        #: Set when another learner took over the location; no further saves are tried.
        self.conflict: CheckpointConflict | None = None

    # -- resume -------------------------------------------------------------------------

    def open(self) -> dict | None:
        """Reads the manifest and fetches the newest checkpoint that verifies.

        Entries failing their checks are skipped with a warning. Returns that checkpoint's
        metadata, or None when the location holds no checkpoint (a fresh start).

        Raises:
          CheckpointError: the manifest is unreadable, no listed checkpoint verifies, or the
            newest one was trained on another env or agent. Nothing is written in that case.
        """
        self._opened = True
        self._manifest, self._generation = read_manifest(self.store)
        entries = (self._manifest or {}).get("checkpoints", [])
        for entry in reversed(entries):
            try:
                got = _download_verified(self.store, entry)
            except CheckpointError as exc:
                log.warning("skipping checkpoint %s: %s", entry.get("name"), exc)
                continue
            self._check_bound_sections(got)
            self._resume_from = got
            with open(got.path(METADATA), encoding="utf-8") as fh:
                metadata = json.load(fh)
            if metadata.get("env_spec") is not None:
                try:
                    self.env_spec = EnvSpec.from_json(metadata["env_spec"])
                except WireError as exc:
                    got.cleanup()
                    raise CheckpointError(
                        f"checkpoint {got.name} records an unreadable env "
                        f"spec ({exc}); nothing was changed"
                    ) from None
            # Reported from now on; attach() restores the same values with the variables.
            r = self.runtime
            r.learner_steps = int(metadata["learner_steps"])
            r.env_steps = int(metadata["env_steps"])
            r.episodes = int(metadata["episodes"])
            r.elapsed_before = float(metadata["elapsed"])
            return metadata
        if entries:
            raise CheckpointError(
                f"none of the {len(entries)} checkpoints listed in "
                f"{self.store.uri}/{MANIFEST} verifies; nothing was changed"
            )
        return None

    def _check_bound_sections(self, got: _Downloaded) -> None:
        with open(got.path(EXPERIMENT), encoding="utf-8") as fh:
            saved = (yaml.safe_load(fh) or {}).get("spec", {})
        changed = bound_changes(saved, to_document(self.runtime.experiment)["spec"])
        if changed:
            got.cleanup()
            section = changed[0].split(".")[1]
            raise CheckpointError(
                f"checkpoint {got.name} in {self.store.uri} was trained with another "
                f"spec.{section}; its variables do not fit this Experiment. Use another "
                f"spec.checkpoint.uri (or experiment name) for a new run"
            )

    def attach(self, agent: Agent) -> None:
        """Binds the agent's variables and restores the checkpoint :meth:`open` found."""
        if not self._opened:
            self.open()
        ours = self.runtime.env_spec
        if self.env_spec is not None and ours is not None and ours != self.env_spec:
            raise CheckpointError(
                "the checkpoint to resume was trained on another env spec: "
                + "; ".join(self.env_spec.differences(ours, "checkpoint", "this run"))
            )
        self._agent = agent
        self._objects = agent.checkpointables()
        self._checkpoint = tf.train.Checkpoint(**trackables(agent), **self._counters)
        got, self._resume_from = self._resume_from, None
        if got is None:
            return
        try:
            self._checkpoint.read(got.path(VARIABLES)).assert_existing_objects_matched()
            if os.path.exists(got.path(EXTRA)):
                with np.load(got.path(EXTRA), allow_pickle=False) as data:
                    agent.load_extra_state({k: data[k] for k in data.files})
                log.info("restored the agent's extra state (replay) from %s", got.name)
        finally:
            got.cleanup()
        r, c = self.runtime, self._counters
        r.learner_steps = int(c["learner_steps"].numpy())
        r.env_steps = int(c["env_steps"].numpy())
        r.episodes = int(c["episodes"].numpy())
        r.elapsed_before = float(c["elapsed"].numpy())
        count = int(c["returns_count"].numpy())
        r.returns.clear()
        # Only finite returns: an infinite one saved by an older learner would otherwise meet
        # any targetReturn and stop every resumed run at once.
        r.returns.extend(x for x in c["returns"].numpy()[:count].tolist() if math.isfinite(x))
        self._last_save_step = r.learner_steps
        self.last_checkpoint = f"{self.store.uri}/{got.name}"
        log.info(
            "resumed from %s at learner step %d, %d env steps",
            self.last_checkpoint,
            r.learner_steps,
            r.env_steps,
        )

    # -- publish ------------------------------------------------------------------------

    def save(self) -> str | None:
        """Publishes a checkpoint now; returns its URI (None if no agent is attached yet).

        Raises:
          NonFiniteVariables: the variables hold NaN or infinity; nothing was written.
          CheckpointConflict: another learner published here; nothing of ours was listed.
          StorageError, OSError, tf.errors.OpError: the publication failed; the previous
            checkpoints are untouched and still load.
        """
        if self._checkpoint is None or self.conflict is not None:
            return None
        bad = non_finite_variables(self._objects)
        if bad:
            raise NonFiniteVariables(
                f"not saved: {len(bad)} variable(s) hold NaN or infinity "
                f"({', '.join(bad[:3])}); the last good checkpoint stays "
                f"the newest"
            )
        with self._lock:
            start = time.monotonic()
            stage = tempfile.mkdtemp(prefix="seedrl-ckpt-")
            try:
                entry = self._write_local(stage)
                for file in entry["files"]:
                    path = os.path.join(stage, file)
                    with_retries(
                        functools.partial(self.store.upload_file, f"{entry['name']}/{file}", path),
                        what=f"uploading {entry['name']}/{file}",
                        sleep=self._sleep,
                    )
                dropped = self._publish(entry)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
            self._delete_unlisted(dropped)
            self.last_save_seconds = time.monotonic() - start
            self.last_checkpoint_time = time.time()
            self._last_save_time = time.monotonic()
            self._last_save_step = self.runtime.learner_steps
            self.last_checkpoint = f"{self.store.uri}/{entry['name']}"
            log.info(
                "checkpoint %s published in %.1f s", self.last_checkpoint, self.last_save_seconds
            )
            return self.last_checkpoint

    def _write_local(self, stage: str) -> dict:
        """Writes every file of a checkpoint into ``stage``; returns its manifest entry."""
        r, c = self.runtime, self._counters
        # One snapshot for the variables, the metadata and the manifest: actors keep adding
        # env steps and episodes while this runs.
        snap = {
            "learner_steps": r.learner_steps,
            "env_steps": r.env_steps,
            "episodes": r.episodes,
            "elapsed": r.elapsed,
        }
        recent = list(r.returns)
        for key, value in snap.items():
            c[key].assign(value)
        returns = np.zeros(r.returns.maxlen or 0)
        returns[: len(recent)] = recent
        c["returns"].assign(returns)
        c["returns_count"].assign(len(recent))
        self._checkpoint.write(os.path.join(stage, VARIABLES))
        extra = self._agent.extra_state()
        if extra is not None:
            with open(os.path.join(stage, EXTRA), "wb") as fh:
                np.savez(fh, **extra)
        exp: Experiment = r.experiment
        with open(os.path.join(stage, EXPERIMENT), "w", encoding="utf-8") as fh:
            fh.write(dump_experiment(exp))
        metadata = {
            "experiment": exp.metadata.name,
            **snap,
            "mean_return": float(np.mean(recent)) if recent else None,
            "agent": exp.spec.agent.name,
            "env": exp.spec.env.id,
            "run_id": r.run_id,
            "created": _utc_now(),
            "env_spec": r.env_spec.to_json() if r.env_spec is not None else None,
            "tensorflow": tf.__version__,
        }
        with open(os.path.join(stage, METADATA), "w", encoding="utf-8") as fh:
            finite_json.dump(metadata, fh, indent=1, sort_keys=True)
        files = {f: _file_digest(os.path.join(stage, f)) for f in sorted(os.listdir(stage))}
        name = f"ckpt-{snap['learner_steps']:012d}-{secrets.token_hex(4)}"
        return {
            "name": name,
            "learner_steps": snap["learner_steps"],
            "env_steps": snap["env_steps"],
            "created": metadata["created"],
            "files": files,
        }

    def _publish(self, entry: dict) -> list[dict]:
        """Writes the manifest naming ``entry``; returns the entries retention dropped."""
        old = list((self._manifest or {}).get("checkpoints", []))
        kept = (old + [entry])[-self.keep :]
        manifest = {
            "format": FORMAT,
            "experiment": self.runtime.experiment.metadata.name,
            "writer": self.runtime.run_id,
            "updated": entry["created"],
            "checkpoints": kept,
        }
        data = finite_json.dumps(manifest, indent=1, sort_keys=True).encode()

        def write():
            try:
                return self.store.write(MANIFEST, data, if_generation_match=self._generation)
            except PreconditionFailed:
                # A retried write whose first attempt landed sees its own result: fine.
                current, generation = read_manifest(self.store)
                if current == manifest:
                    return generation
                raise

        try:
            self._generation = with_retries(
                write, what=f"writing {self.store.uri}/{MANIFEST}", sleep=self._sleep
            )
        except PreconditionFailed:
            self.conflict = CheckpointConflict(
                f"another learner published to {self.store.uri} since this one read it; this "
                f"learner stops publishing so that the two do not overwrite each other"
            )
            raise self.conflict from None
        self._manifest = manifest
        return [e for e in old if e not in kept]

    def _delete_unlisted(self, dropped: list[dict]) -> None:
        """Removes dropped checkpoints and orphans of interrupted uploads: the files of
        checkpoints no manifest lists, and the temporary files of uploads whose process died
        (best effort)."""
        for prefix in ("ckpt-", MANIFEST):
            try:
                for path in self.store.delete_temporaries(prefix):
                    log.info("deleted %s, left by an interrupted upload", path)
            except OSError as exc:
                log.warning("could not delete temporaries in %s: %s", self.store.uri, exc)
        listed = {e["name"] for e in (self._manifest or {}).get("checkpoints", [])}
        try:
            names = self.store.list("ckpt-")
        except StorageError as exc:
            log.warning("could not list %s for clean-up: %s", self.store.uri, exc)
            return
        for name in names:
            head = name.split("/", 1)[0]
            if _NAME.match(head) and head not in listed:
                try:
                    self.store.delete(name)
                except StorageError as exc:
                    log.warning("could not delete %s/%s: %s", self.store.uri, name, exc)
        if dropped:
            log.info("retention dropped %s", ", ".join(e["name"] for e in dropped))

    def maybe_save(self) -> None:
        """Saves if an interval has passed; called after each training step.

        A failed save is logged and counted, and training goes on: the next interval tries
        again with a fresh checkpoint. A conflict with another learner ends the run.
        """
        if self.conflict is not None:
            return
        steps = self.runtime.learner_steps - self._last_save_step
        due = (self.interval_steps and steps >= self.interval_steps) or (
            self.interval_seconds
            and time.monotonic() - self._last_save_time >= self.interval_seconds
        )
        if not due:
            return
        try:
            self.save()
        except CheckpointConflict as exc:
            log.error("%s", exc)
            self.runtime.finish("checkpoint_conflict")
        except (NonFiniteVariables, StorageError, OSError, tf.errors.OpError) as exc:
            self.failures += 1
            self._last_save_time = time.monotonic()
            self._last_save_step = self.runtime.learner_steps
            log.error("checkpoint failed (%d so far), training goes on: %s", self.failures, exc)

    def status(self) -> dict:
        """Checkpoint fields of the learner's status.

        ``checkpoint_age_s`` counts from the last publication, or from the learner's start
        before its first one: a learner that never manages to checkpoint grows old too.
        """
        age = time.time() - (self.last_checkpoint_time or self._created)
        return {
            "last_checkpoint": self.last_checkpoint,
            "last_checkpoint_time": self.last_checkpoint_time,
            "checkpoint_age_s": age,
            "checkpoint_seconds": self.last_save_seconds,
            "checkpoint_failures": self.failures,
        }


def open_checkpointer(
    uri: str, runtime: LearnerRuntime, keep: int, interval_steps: int, interval_seconds: float
) -> Checkpointer:
    """A :class:`Checkpointer` over the store the URI names (see ``seedrl.common.storage``)."""
    return Checkpointer(open_store(uri), runtime, keep, interval_steps, interval_seconds)
