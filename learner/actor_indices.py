"""Unique, stable actor indices, granted by the learner.

A Deployment's pods have no ordinal, and an index is what an actor's exploration depends on
(R2D2's per-actor epsilon, its evaluation actors) and what seeds its envs. So the learner keeps
the table: an actor with no index of its own asks once (``AssignIndex``) and gets the lowest
index no live actor holds; it says that index in the Hello of every stream it opens, and the
learner confirms it in the Welcome, or names another one if a different live actor holds it.
While no more actors than ``spec.actors.replicas`` are live, every index stays below it: a
replacement pod takes over the index of an actor whose streams are all closed (preempted,
deleted) rather than a new one past the end.

An index stays with its actor while any of its streams is open and for ``hold_seconds`` after
the last one closes (a reconnect keeps it), and for ``hold_seconds`` after it was granted to an
actor that has not connected yet. A learner that restarts starts with an empty table: its
actors reclaim their indices in their Hellos, and for ``reclaim_seconds`` after a resumed start
it grants none, so that a new actor does not take an index a reconnecting one still holds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable


class NotYet(Exception):
    """No index is granted yet (the reclaim window after a restart); ask again shortly."""


@dataclasses.dataclass
class _Holder:
    actor: str
    streams: int = 0
    until: float = 0.0


def actor_of(stream_id: str) -> str:
    """The actor an actor-stream id belongs to: streams of one actor are ``ACTOR/j``."""
    return stream_id.split("/", 1)[0]


class ActorIndices:
    """The table of which actor holds which index (thread-safe).

    Args:
      limit: the indices the actors should use, ``[0, limit)`` (``spec.actors.replicas``);
        past it only when more actors than that are live.
      hold_seconds: how long an index stays with an actor that has no open stream.
      reclaim_seconds: how long after creation no index is granted (a resumed learner's
        actors reclaim theirs first).
      clock: the monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        limit: int = 0,
        hold_seconds: float = 60.0,
        reclaim_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limit = limit
        self.hold_seconds = hold_seconds
        self._clock = clock
        self._open_from = clock() + reclaim_seconds
        self._held: dict[int, _Holder] = {}
        self._lock = threading.Lock()

    def _holder(self, index: int) -> _Holder | None:
        holder = self._held.get(index)
        if holder is not None and holder.streams == 0 and holder.until <= self._clock():
            del self._held[index]
            return None
        return holder

    def _lowest_free(self) -> int:
        index = 0
        while self._holder(index) is not None:
            index += 1
        return index

    def _of(self, actor: str) -> int | None:
        for index in list(self._held):
            holder = self._holder(index)
            if holder is not None and holder.actor == actor:
                return index
        return None

    def assign(self, actor: str) -> int:
        """The index of ``actor``: the one it holds, else the lowest free one, held for
        ``hold_seconds`` until its first stream opens.

        Raises:
          NotYet: within the reclaim window of a resumed learner.
        """
        with self._lock:
            held = self._of(actor)
            if held is not None:
                return held
            if self._clock() < self._open_from:
                raise NotYet("the learner has just resumed; its actors reclaim their indices first")
            index = self._lowest_free()
            if index >= self.limit:
                # Every index below the limit is held: take over the lowest one whose actor
                # has no open stream (gone, or between reconnects: it is told in its Welcome).
                index = next(
                    (
                        i
                        for i in range(self.limit)
                        if (h := self._holder(i)) is not None and h.streams == 0
                    ),
                    index,
                )
            self._held[index] = _Holder(actor, until=self._clock() + self.hold_seconds)
            return index

    def connect(self, stream_id: str, wanted: int) -> int:
        """A stream of an actor opens with the index it says it has: returns the index it acts
        as. ``wanted`` when it is free or already this actor's, else (another live actor holds
        it) the actor's own index or the lowest free one."""
        actor = actor_of(stream_id)
        with self._lock:
            holder = self._holder(wanted)
            if holder is None:
                holder = self._held[wanted] = _Holder(actor)
            elif holder.actor != actor:
                index = self._of(actor)
                if index is None:
                    index = self._lowest_free()
                    self._held[index] = _Holder(actor)
                wanted, holder = index, self._held[index]
            holder.streams += 1
            return wanted

    def disconnect(self, stream_id: str, index: int) -> None:
        """A stream that :meth:`connect` returned ``index`` for has closed."""
        with self._lock:
            holder = self._held.get(index)
            if holder is None or holder.actor != actor_of(stream_id):
                return
            holder.streams = max(0, holder.streams - 1)
            if holder.streams == 0:
                holder.until = self._clock() + self.hold_seconds

    def held(self) -> dict[int, str]:
        """index -> actor for every index held now."""
        with self._lock:
            return {i: h.actor for i in sorted(self._held) if (h := self._holder(i))}
