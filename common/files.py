"""Local files written whole: a unique temporary beside the file, then a rename.

Kept apart from :mod:`seedrl.common.storage` (checkpoint stores, GCS) so that a process which
only writes local files (an actor writing its env spec) imports no cloud client.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

#: What marks a temporary file: ``<final name>.tmp.<writer's pid>.<random>``.
TEMPORARY_MARK = ".tmp."


def temporary_path(path: str) -> str:
    """A name for a temporary file to be renamed to ``path``, unique to this call: two writers
    of one file (two processes, or two threads) never share a temporary. It carries the
    writer's pid, so that what a dead writer left can be told from what a live one writes."""
    return f"{path}{TEMPORARY_MARK}{os.getpid()}.{secrets.token_hex(4)}"


def replace_file(path: str, data: bytes, durable: bool = False) -> None:
    """Writes a local file whole: through a temporary beside it (:func:`temporary_path`) and a
    rename, so that a reader sees the old or the new content, never part of one. A failed write
    (a full disk, say) leaves the old content and no temporary behind.

    Args:
      durable: also flush the data to the disk before the rename (for what must survive a
        machine crash: checkpoints and their manifest).

    Raises:
      OSError: the file could not be written; it is as it was.
    """
    with written_whole(path) as tmp:
        with open(tmp, "xb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())


@contextlib.contextmanager
def written_whole(path: str) -> Iterator[str]:
    """Yields a temporary name (:func:`temporary_path`) to write ``path``'s new content to,
    then renames it over ``path``; if the block raises, the temporary goes and ``path`` is as
    it was. What a writer killed meanwhile leaves carries its pid (see
    ``ObjectStore.delete_temporaries``)."""
    tmp = temporary_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
