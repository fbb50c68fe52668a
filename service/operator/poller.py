"""The status refresh kopf does not drive: :class:`Poller` refreshes every Experiment each
``poll_seconds`` (the learner's ``/status`` has nothing to watch) from the :class:`ChildCache`,
and resyncs that cache with the API server; :class:`PeeringGate` tells it whether this replica
is the active one among peers.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from typing import Any, Mapping

import kubernetes

from seedrl.common.config import (
    GROUP,
    PLURAL,
    VERSION,
)
from seedrl.service.operator.children import MERGE
from seedrl.service.operator.reconciler import (
    ExperimentGone,
    OperatorConfig,
    Reconciler,
    announce,
)
from seedrl.service.operator.status import status_patch, worth_writing
from seedrl.service.operator.watch_cache import WATCHED, ChildCache, list_watched

log = logging.getLogger(__name__)

#: Longest the operator waits at its exit for a refresh under way: one learner /status fetch
#: (3 s) and a few API calls, well within a pod's 30 s termination grace period.
STOP_TIMEOUT_S = 10.0
#: Seconds without a sign of progress (a round begun, an Experiment refreshed) after which
#: :meth:`Poller.health` calls the poller stalled, at least; a slower ``poll_seconds`` gets
#: six rounds. A refresh blocked on an API call that never returns looks like this.
STALL_MIN_S = 120.0


class PeeringGate:
    """Whether this replica is the active one among peers for a namespace's Experiments:
    kopf's rule over its peering object, where every replica keeps
    ``status[identity] = {priority, lifetime, lastseen}`` and the live one of the highest
    priority is active, the others pause. kopf pauses its own watchers; this tells the poller,
    which kopf does not drive, to pause too.

    A cluster-wide kopf has one ClusterKopfPeering. A namespace-scoped one keeps a KopfPeering
    of that name in every namespace it watches (and pauses all its watchers while any of them
    is missing or names a higher peer): the poller follows the Experiment's own namespace's,
    since a peer working there keeps its record there. A peering that cannot be read (missing,
    or the API down) pauses, as kopf stays paused without one.

    Args:
      api_client: the client to read the peering objects with.
      name: the peering objects' name (``--peering``).
      identity, priority: this replica's, as given to kopf.
      clusterwide: True: the ClusterKopfPeering decides for every namespace; False: each
        namespace's KopfPeering for its own.
    """

    def __init__(
        self, api_client, name: str, identity: str, priority: int, clusterwide: bool = True
    ):
        self.api = kubernetes.client.CustomObjectsApi(api_client)
        self.name, self.identity, self.priority, self.clusterwide = (
            name,
            identity,
            priority,
            clusterwide,
        )

    def __call__(self, namespace: str) -> bool:
        """Whether to work on the Experiments of ``namespace`` now."""
        try:
            if self.clusterwide:
                body = self.api.get_cluster_custom_object(
                    "kopf.dev", "v1", "clusterkopfpeerings", self.name
                )
            else:
                body = self.api.get_namespaced_custom_object(
                    "kopf.dev", "v1", namespace, "kopfpeerings", self.name
                )
        except Exception as exc:  # noqa: BLE001 - any failure to read it pauses
            # Unreachable (refused, reset, timed out: the client raises urllib3's errors, not
            # ApiException) pauses as a refusal does; raised, it would end the poller's
            # thread and freeze every status.
            where = "cluster-wide" if self.clusterwide else f"in {namespace}"
            reason = getattr(exc, "reason", None) or exc
            log.warning("cannot read peering %s %s: %s; pausing", self.name, where, reason)
            return False
        return is_active_peer(body.get("status") or {}, self.identity, self.priority)


def is_active_peer(
    peers: Mapping[str, Any], identity: str, priority: int, now: datetime.datetime | None = None
) -> bool:
    """Whether ``identity`` is the live peer of the highest priority (kopf's rule: a peer is
    live until ``lastseen + lifetime``; a tie keeps the lower identity active, so that
    exactly one replica works even then)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for other, info in peers.items():
        if other == identity or not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.datetime.fromisoformat(str(info.get("lastseen")))
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=datetime.timezone.utc)
            alive = seen + datetime.timedelta(seconds=int(info.get("lifetime") or 0)) > now
        except (TypeError, ValueError):
            continue
        theirs = int(info.get("priority") or 0)
        if alive and (theirs > priority or (theirs == priority and other < identity)):
            return False
    return True


class Poller:
    """Refreshes every Experiment's status each ``poll_seconds`` (and at once when its learner
    Job changes): the learner's ``/status`` has nothing to watch.

    The Experiment and its children come from the :class:`ChildCache`; the Experiment is read
    afresh only before it is healed and after a conflicting status write (see
    :meth:`refresh`): one that is gone (its DELETED event missed) is dropped from the cache and
    its series with it, never healed. Status is written only where it changed.
    Each Experiment is refreshed only where this replica is active for its namespace
    (``config.active``). Every ``resync_seconds``, at the next round after kopf re-listed
    a kind, and before its first refresh where it becomes active, it :meth:`resync`\\ s the
    cache with the API server.
    """

    def __init__(self, config: OperatorConfig, rec: "Reconciler", cache: ChildCache):
        self.config, self.rec, self.cache = config, rec, cache
        #: ``active(namespace)``: whether this replica works there (see :class:`PeeringGate`).
        self.active = config.active
        self._stop = threading.Event()
        self._woken: set[tuple[str, str]] = set()
        self._wake = threading.Event()
        self._relisted = threading.Event()
        #: The namespaces where this replica was active at its last look.
        self._working: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="seedrl-poller", daemon=True)
        self.api = kubernetes.client.CustomObjectsApi(config.api_client)
        #: time.monotonic() of the last sign of progress (see :meth:`health`).
        self.beat = time.monotonic()
        #: What ended the refresh thread, if an error did.
        self.crash: BaseException | None = None
        #: Seconds without progress that :meth:`health` calls a stall.
        self.stall_limit = max(STALL_MIN_S, 6 * config.poll_seconds)

    def start(self) -> None:
        """Starts the refresh thread."""
        self.beat = time.monotonic()
        self._thread.start()

    def health(self, now: float | None = None) -> str | None:
        """Why the poller is not doing its work, or None when it is: its thread ended (other
        than by :meth:`stop`), or nothing progressed for :attr:`stall_limit` seconds. The
        operator's liveness probe fails on it, so that the kubelet restarts an operator whose
        Experiments' status would otherwise freeze while kopf's own tasks look healthy."""
        if self._stop.is_set() or not self._thread.ident:
            return None  # stopping, or not started yet: kopf's own start-up covers that
        if not self._thread.is_alive():
            return f"the poller thread ended: {self.crash!r}"
        quiet = (time.monotonic() if now is None else now) - self.beat
        if quiet > self.stall_limit:
            return f"the poller made no progress for {quiet:.0f} s (limit {self.stall_limit:.0f} s)"
        return None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stops it and waits up to ``timeout`` seconds for the refresh under way to end.

        Waiting matters at the operator's exit: a daemon thread still refreshing (and logging)
        while the interpreter finalizes aborts the process (CPython's "could not acquire lock
        for <stderr> at interpreter shutdown"), which a SIGTERM'd operator must not do.
        """
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the poller did not stop within %.0f s", timeout)

    def wake(self, namespace: str, name: str) -> None:
        """Refreshes one Experiment now (its learner Job or a learner pod changed)."""
        self._woken.add((namespace, name))
        self._wake.set()

    def relisted(self) -> None:
        """Brings the next resync forward to the next round: kopf is listing a kind (again,
        after a watch expired or a pause), which tells nothing of what vanished meanwhile."""
        self._relisted.set()

    def _run(self) -> None:
        try:
            self._rounds()
        except BaseException as exc:  # kept for health(), which reports it
            self.crash = exc
            log.exception("the poller thread ended")

    def _rounds(self) -> None:
        next_all = time.monotonic() + self.config.poll_seconds
        next_resync = time.monotonic() + self.config.resync_seconds
        while not self._stop.is_set():
            self.beat = time.monotonic()
            self._wake.wait(max(0.0, next_all - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return
            if time.monotonic() >= next_all:
                next_all = time.monotonic() + self.config.poll_seconds
                if self._relisted.is_set() or time.monotonic() >= next_resync:
                    self._relisted.clear()
                    next_resync = time.monotonic() + self.config.resync_seconds
                    try:
                        self.resync()
                    except Exception:  # the watches go on feeding the cache meanwhile
                        log.exception("resyncing the watch cache failed")
                targets = [
                    (b["metadata"]["namespace"], b["metadata"]["name"])
                    for b in self.cache.experiments()
                ]
                self._woken.clear()
            else:
                targets, self._woken = list(self._woken), set()
            try:
                self.poll(targets)
            except Exception:  # the poller outlives any round: it is the status's only writer
                log.exception("polling %d Experiment(s) failed", len(targets))

    def poll(self, targets: list[tuple[str, str]]) -> None:
        """Refreshes the given Experiments (namespace, name) of the namespaces where this
        replica is active (asked once per namespace); one failing never stops the others."""
        active: dict[str, bool] = {}
        for namespace, name in targets:
            if self._stop.is_set():
                return
            if namespace not in active:
                try:
                    active[namespace] = self.active(namespace)
                except Exception:  # paused there this round; the thread goes on
                    log.exception("cannot tell whether to work in %s", namespace)
                    active[namespace] = False
                if active[namespace] and namespace not in self._working:
                    # Taking over: while another replica worked here kopf's watches were
                    # paused, and the cache holds what they delivered back then (a learner not
                    # started yet, a Job not ready): list afresh before writing any status.
                    self.resync()
                (self._working.add if active[namespace] else self._working.discard)(namespace)
            if not active[namespace]:
                continue
            try:
                self.refresh(namespace, name)
            except Exception:  # one Experiment never stops the others
                log.exception("refreshing Experiment %s/%s failed", namespace, name)
            self.beat = time.monotonic()

    def resync(self) -> None:
        """Lists each kind the cache holds (in the watched namespaces) and replaces the cache's
        content with it (:meth:`ChildCache.replace`): what vanished without a DELETED event
        goes, an Experiment's series with it. A kind that cannot be listed is left as is."""
        for kind in WATCHED:
            since = self.cache.mark()
            try:
                listed = list_watched(self.config.api_client, kind, self.config.namespaces)
            except (kubernetes.client.ApiException, OSError, ValueError) as exc:
                log.warning("cannot list %ss to resync the watch cache: %s", kind, exc)
                continue
            dropped = self.cache.replace(kind, listed, since)
            for body in dropped:
                if kind == "Experiment":
                    self.rec.forget(body)
            if dropped:
                log.info(
                    "resync: %d %s(s) gone without a DELETED event seen: %s",
                    len(dropped),
                    kind,
                    ", ".join(
                        f"{b['metadata'].get('namespace')}/{b['metadata']['name']}" for b in dropped
                    ),
                )

    def _gone(self, namespace: str, name: str, cached: Mapping[str, Any]) -> None:
        log.info("Experiment %s/%s is gone: forgetting it", namespace, name)
        self.cache.update("Experiment", "DELETED", cached)
        self.rec.forget(cached)

    def _catch_up(self, namespace: str, name: str, cached: Mapping[str, Any]) -> None:
        """After a conflict: the cache takes the Experiment as it is now, so that the next
        round works from it even if its watch event is slow (or was lost)."""
        fresh = self.read(namespace, name)
        if fresh is None:
            self._gone(namespace, name, cached)
        elif fresh["metadata"].get("resourceVersion") != cached["metadata"].get("resourceVersion"):
            self.cache.update("Experiment", "MODIFIED", fresh)

    def read(self, namespace: str, name: str) -> dict | None:
        """The Experiment as the API server has it now; None if it is gone."""
        try:
            response = self.api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def refresh(self, namespace: str, name: str) -> None:
        """Reconciles one Experiment (healing only) and writes what changed in its status.

        The Experiment is the cache's, as the watch last delivered it: an idle Experiment
        costs no request. It is read afresh only where it matters: before anything is made
        or changed for it (``confirm``: a cache that missed its deletion would heal a dead
        Experiment, whose children the garbage collector deletes again), and when a status
        written onto the cached version conflicts (an edit the cache has not seen yet)."""
        cached = self.cache.experiment(namespace, name)
        if cached is None:
            return
        latest: list[Mapping[str, Any]] = [cached]

        def confirm() -> Mapping[str, Any] | None:
            fresh = self.read(namespace, name)
            if fresh is not None:
                latest[0] = fresh
            return fresh

        if cached["metadata"].get("deletionTimestamp"):
            return  # going: a status written now would bring its series back
        with self.config.metrics.reconciling("poll"):
            try:
                status = self.rec.reconcile(
                    cached,
                    heal_only=True,
                    seen=self.cache.observed(namespace, name),
                    confirm=confirm,
                )
            except ExperimentGone:
                self._gone(namespace, name, cached)
                return
            body = latest[0]
            changed = status_patch(body.get("status"), status)
            if not changed or not worth_writing(
                body.get("status"), status, self.config.heartbeat_seconds
            ):
                return
            try:
                # Only onto the Experiment as read: a status computed from an older body (an
                # edit, or the change handler's write, landed meanwhile) would overwrite a
                # newer one (an invalid edit's Valid=False flipped back). 409: the next round
                # computes it afresh.
                self.api.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    {
                        "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                        "status": changed,
                    },
                    _content_type=MERGE,
                    _preload_content=False,
                )
            except kubernetes.client.ApiException as exc:
                if exc.status == 409:
                    log.debug("Experiment %s/%s changed while refreshed", namespace, name)
                    self._catch_up(namespace, name, cached)
                elif exc.status == 404:
                    self._gone(namespace, name, cached)
                if exc.status in (404, 409):
                    return  # gone, or refreshed at the next round
                raise
            announce(self.rec.children, body, status)
