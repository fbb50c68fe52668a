"""Object stores for checkpoints: a local directory or a Google Cloud Storage prefix.

Both backends offer the few operations an atomically published checkpoint needs: write whole
objects (optionally only if the object is still at a given *generation*, GCS's compare-and-swap),
read one back with its generation, stream large files up and down, list and delete. A name is a
``/``-separated path relative to the store's root.

:func:`open_store` picks the backend from a URI: ``gs://bucket/prefix`` goes through
``google-cloud-storage`` (credentials from Application Default Credentials, which on GKE is
Workload Identity; ``STORAGE_EMULATOR_HOST`` points it at an emulator); a plain path or
``file://`` URI is a local directory. No key material is ever read from or written to the store.

Errors are mapped onto three types so callers need not know the backend: :class:`NotFound`,
:class:`PreconditionFailed` (the generation moved: someone else wrote) and
:class:`TransientStorageError` (worth retrying; see :func:`with_retries`).
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from seedrl.common.files import TEMPORARY_MARK, replace_file, written_whole

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The object that lists a checkpoint location's published checkpoints (see
#: ``learner/checkpoint.py``); its presence means the location holds a run.
CHECKPOINT_MANIFEST = "MANIFEST.json"


def _writer_gone(pid: int) -> bool:
    """Whether the process that wrote a temporary file is gone (this one counts as gone: its
    caller says it writes nothing now)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class StorageError(Exception):
    """Base of the store's errors."""


class NotFound(StorageError):
    """The object does not exist."""


class PreconditionFailed(StorageError):
    """A conditional write found the object at another generation than expected."""


class TransientStorageError(StorageError):
    """A failure that may go away on retry (network, throttling, a 5xx)."""


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 8.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Calls ``fn`` until it succeeds, retrying :class:`TransientStorageError` with backoff.

    The delay doubles from ``base_delay`` up to ``max_delay``, with jitter so that many
    learners hitting the same outage do not retry in lockstep. Other errors pass through at
    once; the last transient error is raised after ``attempts`` tries.
    """
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TransientStorageError as exc:
            if attempt == attempts:
                raise
            wait = min(delay, max_delay) * (0.5 + random.random() / 2)
            log.warning(
                "%s failed (attempt %d/%d), retrying in %.1f s: %s",
                what,
                attempt,
                attempts,
                wait,
                exc,
            )
            sleep(wait)
            delay *= 2
    raise AssertionError("unreachable")


class ObjectStore(abc.ABC):
    """A flat namespace of objects under one root (a directory or a bucket prefix)."""

    #: The URI this store was opened from (for logs and metadata).
    uri: str

    @abc.abstractmethod
    def read(self, name: str) -> tuple[bytes, int]:
        """Returns ``(data, generation)`` of an object; raises :class:`NotFound`."""

    @abc.abstractmethod
    def write(self, name: str, data: bytes, if_generation_match: int | None = None) -> int:
        """Writes an object whole and returns its new generation.

        Args:
          if_generation_match: write only if the object is at this generation now; 0 means
            "only if it does not exist". None writes unconditionally.

        Raises:
          PreconditionFailed: the condition did not hold; nothing was written.
        """

    @abc.abstractmethod
    def upload_file(self, name: str, path: str) -> None:
        """Copies a local file into the store (streamed: files may be gigabytes)."""

    @abc.abstractmethod
    def download_file(self, name: str, path: str) -> None:
        """Copies an object into a local file; raises :class:`NotFound`."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Names of the objects whose name starts with ``prefix``, sorted."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Deletes an object; a missing one is not an error."""

    def delete_temporaries(self, prefix: str = "") -> Sequence[str]:
        """Deletes what interrupted writes of objects named ``prefix...`` left behind; returns
        the paths deleted. Call it while this process writes nothing to the store.

        A GCS upload is never visible before it completes, so only a local store has any
        (see :meth:`LocalStore.delete_temporaries`).
        """
        return []


# --------------------------------------------------------------------------------------------
# Local directory
# --------------------------------------------------------------------------------------------


class LocalStore(ObjectStore):
    """Objects as files under a directory.

    Writes go to a temporary file that is renamed into place, so a reader sees the old or the
    new content, never half of it. Generations emulate GCS's: a counter per object, kept in a
    hidden sidecar file and updated together with the object under an exclusive ``flock`` on
    the store's lock file, so conditional writes are atomic between processes of one machine.
    """

    _LOCK = ".seedrl-store.lock"

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.uri = self.root

    def _path(self, name: str) -> str:
        parts = [p for p in name.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad object name {name!r}")
        return os.path.join(self.root, *parts)

    def _generation_path(self, name: str) -> str:
        head, tail = os.path.split(self._path(name))
        return os.path.join(head, f".{tail}.generation")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, self._LOCK), "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _generation(self, name: str) -> int:
        if not os.path.exists(self._path(name)):
            return 0
        try:
            with open(self._generation_path(name), encoding="ascii") as fh:
                return int(fh.read().strip() or 1)
        except (OSError, ValueError):
            return 1  # written by something other than this store

    @staticmethod
    def _replace(path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        replace_file(path, data, durable=True)

    def read(self, name):
        with self._locked():
            try:
                with open(self._path(name), "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                raise NotFound(f"{self.uri}/{name}") from None
            return data, self._generation(name)

    def write(self, name, data, if_generation_match=None):
        with self._locked():
            current = self._generation(name)
            if if_generation_match is not None and current != if_generation_match:
                raise PreconditionFailed(
                    f"{self.uri}/{name} is at generation {current}, not {if_generation_match}"
                )
            self._replace(self._path(name), data)
            self._replace(self._generation_path(name), str(current + 1).encode())
            return current + 1

    def upload_file(self, name, path):
        target = self._path(name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # A full disk, say: the partial copy goes at once; one whose process died with it is
        # left for delete_temporaries.
        with written_whole(target) as tmp:
            shutil.copyfile(path, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())

    def download_file(self, name, path):
        try:
            shutil.copyfile(self._path(name), path)
        except FileNotFoundError:
            raise NotFound(f"{self.uri}/{name}") from None

    def list(self, prefix=""):
        names = []
        if not os.path.isdir(self.root):
            return names
        for dirpath, _, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for f in files:
                # Hidden files are the store's own bookkeeping, and temporaries are in flight
                # (or left by a writer that died: see delete_temporaries).
                if f.startswith(".") or TEMPORARY_MARK in f:
                    continue
                name = f if rel == "." else f"{rel.replace(os.sep, '/')}/{f}"
                if name.startswith(prefix):
                    names.append(name)
        return sorted(names)

    def delete_temporaries(self, prefix=""):
        """Deletes the temporary files (``<file>.tmp.<pid>...``) of objects named ``prefix...``
        (their generation files included) whose writer is gone: this process, which writes
        nothing now, or a process that no longer exists. A live process's are left alone (pids
        are only known on this machine: two machines sharing the directory are two writers,
        which the checkpoint manifest refuses anyway)."""
        deleted: list[str] = []
        if not os.path.isdir(self.root):
            return deleted
        for dirpath, _, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for f in files:
                base, mark, tail = f.partition(TEMPORARY_MARK)
                pid = tail.split(".", 1)[0]
                if not mark or not pid.isdigit() or not _writer_gone(int(pid)):
                    continue
                if base.startswith(".") and base.endswith(".generation"):
                    base = base[1 : -len(".generation")]
                name = base if rel == "." else f"{rel.replace(os.sep, '/')}/{base}"
                if name.startswith(prefix):
                    path = os.path.join(dirpath, f)
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)
                        deleted.append(path)
        return deleted

    def delete(self, name):
        for path in (self._path(name), self._generation_path(name)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        # Drop directories the deletion emptied, up to the root.
        parent = os.path.dirname(self._path(name))
        while parent != self.root and parent.startswith(self.root):
            try:
                os.rmdir(parent)
            except OSError:
                break
            parent = os.path.dirname(parent)


# --------------------------------------------------------------------------------------------
# Google Cloud Storage
# --------------------------------------------------------------------------------------------


class GCSStore(ObjectStore):
    """Objects under ``gs://bucket/prefix`` through ``google-cloud-storage``.

    Credentials come from Application Default Credentials (Workload Identity on GKE). With
    ``STORAGE_EMULATOR_HOST`` set the client talks to that emulator anonymously.

    Args:
      bucket, prefix: where the objects live.
      client: a ``google.cloud.storage.Client`` (default: one from the environment).
      retry_timeout: seconds the client itself keeps retrying one request on transient errors
        before it reports them (callers add their own retries around whole operations).
    """

    def __init__(self, bucket: str, prefix: str, client=None, retry_timeout: float = 30.0):
        from google.cloud import storage  # imported here: only gs:// users pay for it
        from google.cloud.storage.retry import DEFAULT_RETRY

        if client is None:
            project = os.environ.get("GOOGLE_CLOUD_PROJECT")
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=project or "seedrl-emulator", credentials=AnonymousCredentials()
                )
            else:
                client = storage.Client(project=project)
        self.client = client
        self._retry = DEFAULT_RETRY.with_timeout(retry_timeout)
        self.bucket = client.bucket(bucket)
        self.prefix = prefix.strip("/")
        self.uri = f"gs://{bucket}/{self.prefix}" if self.prefix else f"gs://{bucket}"

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @contextlib.contextmanager
    def _mapped_errors(self, what: str) -> Iterator[None]:
        from google.api_core import exceptions as gex
        import requests

        try:
            yield
        except gex.NotFound as exc:
            raise NotFound(f"{what}: {exc.message}") from exc
        except gex.PreconditionFailed as exc:
            raise PreconditionFailed(f"{what}: {exc.message}") from exc
        except (
            gex.TooManyRequests,
            gex.ServerError,
            gex.RetryError,
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
            ConnectionError,
        ) as exc:
            raise TransientStorageError(f"{what}: {exc}") from exc
        except gex.GoogleAPICallError as exc:
            raise StorageError(f"{what}: {exc}") from exc

    def read(self, name):
        blob = self.bucket.blob(self._key(name))
        with self._mapped_errors(f"reading {self.uri}/{name}"):
            data = blob.download_as_bytes(retry=self._retry)
        return data, int(blob.generation)

    def write(self, name, data, if_generation_match=None):
        blob = self.bucket.blob(self._key(name))
        with self._mapped_errors(f"writing {self.uri}/{name}"):
            # Unconditional writes are retried by the client too: every object but the
            # manifest has a name no one else writes, so a repeated upload is harmless.
            blob.upload_from_string(
                data,
                content_type="application/octet-stream",
                if_generation_match=if_generation_match,
                retry=self._retry if if_generation_match is None else None,
            )
        return int(blob.generation)

    def upload_file(self, name, path):
        blob = self.bucket.blob(self._key(name))
        with self._mapped_errors(f"uploading {self.uri}/{name}"):
            blob.upload_from_filename(
                path, content_type="application/octet-stream", retry=self._retry
            )

    def download_file(self, name, path):
        blob = self.bucket.blob(self._key(name))
        with self._mapped_errors(f"downloading {self.uri}/{name}"):
            blob.download_to_filename(path, retry=self._retry)

    def list(self, prefix=""):
        start = len(self.prefix) + 1 if self.prefix else 0
        with self._mapped_errors(f"listing {self.uri}"):
            return sorted(
                b.name[start:]
                for b in self.client.list_blobs(
                    self.bucket, prefix=self._key(prefix), retry=self._retry
                )
            )

    def delete(self, name):
        from google.api_core import exceptions as gex

        with self._mapped_errors(f"deleting {self.uri}/{name}"):
            with contextlib.suppress(gex.NotFound):
                self.bucket.blob(self._key(name)).delete(retry=self._retry)


def tensorboard_uri(checkpoint_uri: str, run_dir: str | None) -> str | None:
    """Where a run's TensorBoard summaries go: beside its checkpoints when they have a location
    of their own (``<uri>/tensorboard``, so a cluster run keeps them in its bucket), else the
    run directory's ``tensorboard/``; None when there is neither."""
    if checkpoint_uri:
        return checkpoint_uri.rstrip("/") + "/tensorboard"
    return os.path.join(run_dir, "tensorboard") if run_dir else None


def open_store(uri: str) -> ObjectStore:
    """The store for ``gs://bucket[/prefix]``, ``file:///path`` or a plain local path."""
    if uri.startswith("gs://"):
        bucket, _, prefix = uri[len("gs://") :].partition("/")
        if not bucket:
            raise ValueError(f"{uri!r}: a gs:// URI needs a bucket name")
        return GCSStore(bucket, prefix)
    if uri.startswith("file://"):
        return LocalStore(uri[len("file://") :])
    if "://" in uri:
        raise ValueError(f"{uri!r}: only gs:// URIs, file:// URIs and local paths are supported")
    return LocalStore(uri)
