"""The Experiments, learner Jobs, actor Deployments and pods as kopf's watches last delivered
them (:class:`ChildCache`), and the listing (:func:`list_watched`) the poller replaces its
content with, since the watches miss deletions when they re-list.
"""

from __future__ import annotations

import collections
import copy
import functools
import json
import logging
import threading
from typing import Any, Callable, Mapping

import kubernetes

from seedrl.common.config import (
    GROUP,
    PLURAL,
    VERSION,
)
from seedrl.service.operator.render.common import (
    LABEL_EXPERIMENT,
    MANAGED_BY,
    names,
)
from seedrl.service.operator.reconciler import Observed

log = logging.getLogger(__name__)


#: The children the operator made (the labels kopf's watches of Jobs and Deployments select).
_SELECTOR_OURS = f"{LABEL_EXPERIMENT},app.kubernetes.io/managed-by={MANAGED_BY}"


#: What the :class:`ChildCache` holds, selected as kopf's watches select it: kind -> (label
#: selector, None: every object; the list call across all namespaces; the list call in one).
#: The calls take the ApiClient first and return the raw response.
WATCHED: dict[str, tuple[str | None, Callable[..., Any], Callable[..., Any]]] = {
    "Experiment": (
        None,
        lambda c, **kw: kubernetes.client.CustomObjectsApi(c).list_cluster_custom_object(
            GROUP, VERSION, PLURAL, **kw
        ),
        lambda c, ns, **kw: kubernetes.client.CustomObjectsApi(c).list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, **kw
        ),
    ),
    "Job": (
        _SELECTOR_OURS,
        lambda c, **kw: kubernetes.client.BatchV1Api(c).list_job_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.BatchV1Api(c).list_namespaced_job(ns, **kw),
    ),
    "Deployment": (
        _SELECTOR_OURS,
        lambda c, **kw: kubernetes.client.AppsV1Api(c).list_deployment_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.AppsV1Api(c).list_namespaced_deployment(ns, **kw),
    ),
    "Pod": (
        LABEL_EXPERIMENT,
        lambda c, **kw: kubernetes.client.CoreV1Api(c).list_pod_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.CoreV1Api(c).list_namespaced_pod(ns, **kw),
    ),
}


#: Objects per page of a resync's list calls.
_PAGE = 500


def list_watched(
    api_client: kubernetes.client.ApiClient, kind: str, namespaces: tuple[str, ...] = ()
) -> list[dict]:
    """Every object of one of the cache's kinds (:data:`WATCHED`) in ``namespaces`` (empty:
    all), as plain JSON with ``apiVersion`` and ``kind`` filled in as kopf fills them in (a
    list's items lack them). Paged; raises on an API error."""
    selector, everywhere, in_namespace = WATCHED[kind]
    calls: list[Callable[..., Any]] = (
        [functools.partial(in_namespace, api_client, ns) for ns in namespaces]
        if namespaces
        else [functools.partial(everywhere, api_client)]
    )
    items: list[dict] = []
    for call in calls:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_preload_content": False}
            if selector:
                kwargs["label_selector"] = selector
            if token:
                kwargs["_continue"] = token
            page = json.loads(call(**kwargs).data)
            for item in page.get("items") or []:
                if page.get("apiVersion"):
                    item.setdefault("apiVersion", page["apiVersion"])
                item.setdefault("kind", kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return items


class ChildCache:
    """The Experiments, learner Jobs, actor Deployments and pods as the watch streams last
    delivered them (kopf's ``on.event`` handlers feed it; the poller reads it).

    kopf's watches are the fast path, but they miss deletions: after a watch expires (410
    Gone) or a peering pause, kopf lists the objects again (events of type None) and never
    says which ones vanished meanwhile. So the poller also lists each kind itself now and
    then and :meth:`replace`\\ s what is held with that listing. An event handled after the
    listing began wins over the listing, whatever either says (every event is counted,
    deletions included: :meth:`mark`), so that an object a watch delivered while the list
    call ran is not dropped, nor one it deleted meanwhile brought back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], dict]] = collections.defaultdict(dict)
        #: The count of events handled so far, and for each kind the count at each key's last
        #: change (deletions too), while a later :meth:`replace` may still need it.
        self._count = 0
        self._changed: dict[str, dict[tuple[str, str], int]] = collections.defaultdict(dict)

    def update(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Records one watch event (``DELETED`` forgets the object, unless what is held is a
        newer object of that name: the events of two objects may be handled out of order)."""
        meta = body["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        with self._lock:
            self._count += 1
            if event_type == "DELETED":
                held = self._objects[kind].get(key)
                if held is None or not _other_object(held, body):
                    self._objects[kind].pop(key, None)
                    self._changed[kind][key] = self._count
            else:
                self._objects[kind][key] = copy.deepcopy(dict(body))
                self._changed[kind][key] = self._count

    def mark(self) -> int:
        """The count of events handled so far: take it before listing for :meth:`replace`."""
        with self._lock:
            return self._count

    def replace(self, kind: str, listed: list[Mapping[str, Any]], since: int) -> list[dict]:
        """Makes what is held of ``kind`` what a listing says, but for the objects an event
        changed (or deleted) after :meth:`mark` returned ``since``: those stay as the event
        left them, for the listing may predate the event and the watch delivers what comes
        after it in order. The listing must have started after that :meth:`mark`.

        Returns:
          The objects dropped: gone from the API server without a DELETED event seen.
        """
        fresh = {((o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o for o in listed}
        with self._lock:
            held, changed = self._objects[kind], self._changed[kind]
            recent = {key for key, count in changed.items() if count > since}
            out = {key: held[key] for key in recent if key in held}
            for key, obj in fresh.items():
                if key not in recent:
                    out[key] = copy.deepcopy(dict(obj))
            dropped = [obj for key, obj in held.items() if key not in out]
            self._objects[kind] = out
            # Counts up to ``since`` can matter to no later replace: each marks anew.
            self._changed[kind] = {key: changed[key] for key in recent}
            return dropped

    def experiments(self) -> list[dict]:
        """Every Experiment seen, not being deleted."""
        with self._lock:
            return [
                b
                for b in self._objects["Experiment"].values()
                if not b["metadata"].get("deletionTimestamp")
            ]

    def experiment(self, namespace: str, name: str) -> dict | None:
        """One Experiment as last seen."""
        with self._lock:
            return self._objects["Experiment"].get((namespace, name))

    def observed(self, namespace: str, name: str) -> Observed:
        """An Experiment's children as last seen."""
        n = names(name)
        with self._lock:
            pods = [
                p
                for (ns, _), p in self._objects["Pod"].items()
                if ns == namespace
                and (p["metadata"].get("labels") or {}).get(LABEL_EXPERIMENT) == name
            ]
            return Observed(
                self._objects["Job"].get((namespace, n.learner)),
                self._objects["Deployment"].get((namespace, n.actors)),
                pods,
                env_spec_job=self._objects["Job"].get((namespace, n.env_spec)),
                cached=True,
            )


def _other_object(held: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether two bodies of one name are two objects (deleted and made again): their uids
    differ (an unknown uid is taken for the same object)."""
    a, b = held["metadata"].get("uid"), body["metadata"].get("uid")
    return bool(a and b and a != b)
