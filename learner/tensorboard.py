"""TensorBoard summaries of a run: returns, losses and throughput, against env frames.

Written with ``tf.summary`` into a local directory. For a ``gs://`` location the event files
are written to a local staging directory and copied to the bucket through ``seedrl.common.storage``
every ``sync_seconds`` (TensorFlow's own ``gs://`` filesystem is not used: it ignores
``STORAGE_EMULATOR_HOST`` and takes its credentials differently from the checkpoints).
Point TensorBoard at the location: ``tensorboard --logdir runs/<name>/tensorboard`` or
``--logdir gs://bucket/prefix/tensorboard``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time

import tensorflow as tf

from seedrl.common.storage import ObjectStore, StorageError, open_store

log = logging.getLogger(__name__)


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
    """

    def __init__(self, uri: str, sync_seconds: float = 30.0):
        self.uri = uri
        self.sync_seconds = sync_seconds
        self._store: ObjectStore | None = None
        if uri.startswith("gs://"):
            self._store = open_store(uri)
            self.directory = tempfile.mkdtemp(prefix="seedrl-tensorboard-")
        else:
            self.directory = uri[len("file://") :] if uri.startswith("file://") else uri
        os.makedirs(self.directory, exist_ok=True)
        self._writer = tf.summary.create_file_writer(self.directory)
        self._metadata = _scalar_metadata()
        self._last_sync = time.monotonic()
        self._synced: dict[str, int] = {}

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Writes one value per tag at ``step`` (env frames); None values are skipped."""
        with self._writer.as_default(step=step):
            for tag, value in scalars.items():
                if value is not None and value == value:  # skip missing and NaN
                    tf.summary.write(
                        tag, tf.constant(float(value), tf.float32), metadata=self._metadata
                    )
        if self._store is not None and time.monotonic() - self._last_sync >= self.sync_seconds:
            self.sync()

    def sync(self) -> None:
        """Flushes and, for a remote location, copies event files that grew."""
        self._writer.flush()
        self._last_sync = time.monotonic()
        if self._store is None:
            return
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if self._synced.get(name) == size:
                continue
            try:
                self._store.upload_file(name, path)
                self._synced[name] = size
            except (StorageError, OSError) as exc:  # the next sync tries again
                log.warning("could not copy %s to %s: %s", name, self.uri, exc)

    def close(self) -> None:
        """Final flush (and copy)."""
        self.sync()
        self._writer.close()
