"""TensorBoard summaries of a run: returns, losses and throughput, against env frames.

Written with ``tf.summary`` into a local directory. For a ``gs://`` location the event files
are written to a local staging directory and copied to the bucket through ``seedrl.common.storage``
every ``sync_seconds`` (TensorFlow's own ``gs://`` filesystem is not used: it ignores
``STORAGE_EMULATOR_HOST`` and takes its credentials differently from the checkpoints).
Point TensorBoard at the location: ``tensorboard --logdir runs/<name>/tensorboard`` or
``--logdir gs://bucket/prefix/tensorboard``.

Summaries never stop training: a writer that cannot be created (a full disk fails
``CreateSummaryFileWriter`` with ``ResourceExhaustedError``) or that fails to write is counted
in :class:`seedrl.learner.run_files.WriteFailures` and dropped, and a new one (a new event file,
which TensorBoard reads with the others) is tried again ``retry_seconds`` later. The points
written in between are lost; those already written stay.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable

import tensorflow as tf

from seedrl.common.storage import ObjectStore, StorageError, open_store
from seedrl.learner.run_files import WriteFailures

log = logging.getLogger(__name__)

#: Seconds before a writer that failed is replaced by a new one.
RETRY_S = 30.0
#: The name its failures are counted under.
WHAT = "tensorboard"


def _scalar_metadata() -> bytes:
    """What TensorBoard's scalars plugin looks for (``tf.summary.scalar`` itself needs the
    tensorboard package installed; this writes the same records without it)."""
    meta = tf.compat.v1.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    return meta.SerializeToString()


class Summaries:
    """Writes scalar summaries to a local directory or a ``gs://`` prefix.

    Args:
      uri: a local path, ``file://`` URI or ``gs://bucket/prefix``.
      sync_seconds: how often event files are copied to a remote location.
      failures: where failed writes are counted (a fresh counter by default).
      retry_seconds: how long after a failure a new writer is tried.
      clock: monotonic seconds (tests pass their own).

    Raises:
      ValueError: ``uri`` is not a location summaries can go to.
      StorageError: the ``gs://`` store cannot be opened.
    """

    def __init__(
        self,
        uri: str,
        sync_seconds: float = 30.0,
        failures: WriteFailures | None = None,
        retry_seconds: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.uri = uri
        self.sync_seconds = sync_seconds
        self.failures = failures or WriteFailures()
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._store: ObjectStore | None = None
        if uri.startswith("gs://"):
            self._store = open_store(uri)
            self.directory = tempfile.mkdtemp(prefix="seedrl-tensorboard-")
        else:
            self.directory = uri[len("file://") :] if uri.startswith("file://") else uri
        self._writer: tf.summary.SummaryWriter | None = None
        self._retry_at = 0.0
        self._metadata = _scalar_metadata()
        self._last_sync = clock()
        self._synced: dict[str, int] = {}
        self._open()

    def _open(self) -> bool:
        """Creates the writer if there is none and it is time to try; returns whether there
        is one."""
        if self._writer is not None:
            return True
        if self._clock() < self._retry_at:
            return False
        try:
            before = set(os.listdir(self.directory)) if os.path.isdir(self.directory) else set()
        except OSError:
            before = set()
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._writer = tf.summary.create_file_writer(self.directory)
        except (tf.errors.OpError, OSError) as exc:
            self._failed(exc)
            self._remove_empty(before)
            return False
        return True

    def _remove_empty(self, before: set[str]) -> None:
        """Removes the empty event file a failed creation leaves (one per try otherwise)."""
        try:
            for name in set(os.listdir(self.directory)) - before:
                path = os.path.join(self.directory, name)
                if os.path.getsize(path) == 0:
                    os.remove(path)
        except OSError:
            pass

    def _failed(self, exc: BaseException) -> None:
        """Counts a failure and drops the writer: a new one is tried after retry_seconds."""
        self.failures.failed(WHAT, exc)
        writer, self._writer = self._writer, None
        self._retry_at = self._clock() + self.retry_seconds
        if writer is not None:
            try:
                writer.close()
            except tf.errors.OpError:
                pass  # what it had buffered is lost with it

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Writes one value per tag at ``step`` (env frames); None values are skipped."""
        if self._open():
            assert self._writer is not None
            try:
                with self._writer.as_default(step=step):
                    for tag, value in scalars.items():
                        if value is not None and value == value:  # skip missing and NaN
                            tf.summary.write(
                                tag, tf.constant(float(value), tf.float32), metadata=self._metadata
                            )
                self.failures.succeeded(WHAT)
            except tf.errors.OpError as exc:
                self._failed(exc)
        if self._store is not None and self._clock() - self._last_sync >= self.sync_seconds:
            self.sync()

    def sync(self) -> None:
        """Flushes and, for a remote location, copies event files that grew."""
        self._last_sync = self._clock()
        if self._writer is not None:
            try:
                self._writer.flush()
            except tf.errors.OpError as exc:
                self._failed(exc)
        if self._store is None:
            return
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            log.warning("could not list %s: %s", self.directory, exc)
            return
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                size = os.path.getsize(path)
                if self._synced.get(name) == size:
                    continue
                self._store.upload_file(name, path)
                self._synced[name] = size
            except (StorageError, OSError) as exc:  # the next sync tries again
                log.warning("could not copy %s to %s: %s", name, self.uri, exc)

    def close(self) -> None:
        """Final flush (and copy)."""
        self.sync()
        if self._writer is not None:
            try:
                self._writer.close()
            except tf.errors.OpError as exc:
                self.failures.failed(WHAT, exc)
            self._writer = None
