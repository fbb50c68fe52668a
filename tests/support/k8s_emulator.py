"""A Kubernetes API for tests: kmock's stateful KubernetesEmulator over real HTTP, with the gaps
that matter to kopf and the official ``kubernetes`` client bridged.

Bridged for kmock 0.8 (pinned in pyproject.toml; re-check these when it moves):

- the client's ``?watch=True`` is not seen as a watch (kmock expects ``true``);
- stored bodies get no namespace, uid, resourceVersion, generation or creationTimestamp
  (namespaced watches miss objects without a namespace; kopf needs the rest): added on create,
  and resourceVersion/generation move on every change as an API server moves them (generation
  only on changes of ``spec``);
- ``/api/v1`` reports groupVersion ``/v1``: reported as ``v1``;
- lists carry no ``kind``: ``<Kind>List`` added;
- server-side apply (a PATCH of ``application/apply-patch+yaml``) of a missing object 404s: it
  creates the object, as an API server does; on an existing one it merges (an API server would
  also drop fields the manager stopped setting; the operator never relies on that in tests);
- the ``scale`` subresource of Experiments writes ``spec.actors.replicas`` (the CRD's
  specReplicasPath) instead of ``spec.replicas``; the ``status`` subresource keeps generation;
- creations answer 200 where an API server answers 201 (the client then returns None): 201;
- a JSON patch whose ``test`` of resourceVersion fails answers 500 (kopf then retries the
  same stale patch): 422, as an API server answers; JSON patches also move resourceVersion;
- lists ignore ``labelSelector``: equality-based selectors (``k=v``, ``k==v``, ``k!=v``,
  ``k``, ``!k``, comma-joined) are applied to list results (set-based ones are refused);
- every request is kept and scanned to match the next one (quadratic under polling): only
  requests in flight are kept;
- ``metadata.deletionTimestamp`` on an object with finalizers is honoured by kmock already.

Not bridged (the tests do not need them): controllers (nothing makes pods; tests write Job and
Deployment status themselves, as the Job and Deployment controllers would), owner-reference
garbage collection, PUT, CRD schema validation (tested apart with jsonschema), field pruning.
The simulated cluster (:mod:`support.sim_cluster`) has all of these, and runs the pods: the
scenario tests use it.

Use :class:`EmulatedCluster` as a context manager: it runs the emulator on its own event loop
in a thread and gives the URL and a ``kubernetes`` client configuration for it.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import threading
import uuid
from typing import Any

import attrs
import jsonpatch
import kmock
import kubernetes
from kmock._internal import enums

#: plural -> kind of the resources the tests touch (kmock guesses kinds badly).
KINDS = {
    "experiments": "Experiment",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "services": "Service",
    "networkpolicies": "NetworkPolicy",
    "jobs": "Job",
    "deployments": "Deployment",
    "events": "Event",
    "namespaces": "Namespace",
    "pods": "Pod",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "poddisruptionbudgets": "PodDisruptionBudget",
    "workloads": "Workload",
    "issuers": "Issuer",
    "certificates": "Certificate",
}
RESOURCES = {
    "seedrl.dev/v1alpha1/experiments": dict(
        kind="Experiment", namespaced=True, subresources={"status", "scale"}
    ),
    "v1/configmaps": dict(kind="ConfigMap", namespaced=True),
    "v1/secrets": dict(kind="Secret", namespaced=True),
    "v1/services": dict(kind="Service", namespaced=True),
    "v1/events": dict(kind="Event", namespaced=True),
    "v1/pods": dict(kind="Pod", namespaced=True, subresources={"status"}),
    "v1/namespaces": dict(kind="Namespace", namespaced=False),
    "networking.k8s.io/v1/networkpolicies": dict(kind="NetworkPolicy", namespaced=True),
    "batch/v1/jobs": dict(kind="Job", namespaced=True, subresources={"status"}),
    "apps/v1/deployments": dict(
        kind="Deployment", namespaced=True, subresources={"status", "scale"}
    ),
    "v1/persistentvolumeclaims": dict(kind="PersistentVolumeClaim", namespaced=True),
    "policy/v1/poddisruptionbudgets": dict(kind="PodDisruptionBudget", namespaced=True),
    "kueue.x-k8s.io/v1beta1/workloads": dict(
        kind="Workload", namespaced=True, subresources={"status"}
    ),
}
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}


@attrs.define(kw_only=True)
class BridgedEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the gaps above bridged."""

    _versions: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    _inflight: set = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for key, info in RESOURCES.items():
            self.resources[key] = kmock.ResourceInfo(verbs=VERBS, **info)

    def _stored(self, request) -> Any:
        key = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            return self.objects[key]
        return None

    async def _handle(self, request):  # kmock's hook
        # kmock keeps every request for assertions and scans them all to match each new one,
        # which grows quadratic over an operator's polling; keep only those in flight.
        self._requests[:] = [r for r in self._requests if r is request or id(r) in self._inflight]
        changes: dict[str, Any] = {}
        if request.action == enums.action.LIST and str(request.params.get("watch", "")).lower() in (
            "true",
            "1",
        ):
            changes["action"] = enums.action.WATCH
        content_type = request.headers.get("Content-Type", "")
        if (
            request.action == enums.action.UPDATE
            and content_type.startswith("application/apply-patch")
            and request.subresource is None
            and self._stored(request) is None
        ):
            changes["action"] = enums.action.CREATE
        action = changes.get("action", request.action)
        if action == enums.action.CREATE and isinstance(request.data, dict):
            data = dict(request.data)
            meta = dict(data.get("metadata") or {})
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["resourceVersion"] = str(next(self._versions))
            meta["generation"] = 1
            meta.setdefault(
                "creationTimestamp",
                datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            data["metadata"] = meta
            changes["data"] = data
        elif action == enums.action.UPDATE and isinstance(request.data, dict):
            data = dict(request.data)
            stored = self._stored(request)
            if request.subresource == "scale" and request.resource.plural == "experiments":
                replicas = (data.get("spec") or {}).get("replicas")
                data = {"spec": {"actors": {"replicas": replicas}}}
            meta = dict(data.get("metadata") or {})
            meta["resourceVersion"] = str(next(self._versions))
            if (
                stored is not None
                and request.subresource != "status"
                and "spec" in data
                and _merged(stored.get("spec"), data["spec"]) != stored.get("spec")
            ):
                meta["generation"] = int(stored.get("metadata", {}).get("generation", 1)) + 1
            data["metadata"] = meta
            changes["data"] = data
        elif action == enums.action.UPDATE and isinstance(request.data, list):
            # A JSON patch (kopf's finalizer changes): applied atomically, version moves too.
            changes["data"] = [
                *request.data,
                {
                    "op": "add",
                    "path": "/metadata/resourceVersion",
                    "value": str(next(self._versions)),
                },
            ]
        if changes:
            # kmock matches reactions by the identity of the recorded request: swap it in place.
            new = attrs.evolve(request, **changes)
            for i in range(len(self._requests) - 1, -1, -1):
                if self._requests[i] is request:
                    self._requests[i] = new
                    break
            request = new
        self._inflight.add(id(request))
        try:
            response = await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as exc:
            # kopf guards its JSON patches with a test of resourceVersion; an API server
            # answers a failed test with 422, on which kopf re-reads; kmock answers 500.
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc)) from None
        finally:
            self._inflight.discard(id(request))
        if request.action == enums.action.CREATE and response.status == 200:
            response.set_status(201)  # the client only deserializes a 201 for creations
        return response

    async def _serve_list(self, request):
        out = await super()._serve_list(request)
        selector = request.params.get("labelSelector")
        if selector:
            out = {**out, "items": [obj for obj in out["items"] if _selects(str(selector), obj)]}
        kind = KINDS.get(request.resource.plural, "")
        group = request.resource.group
        return {
            "kind": f"{kind}List",
            "apiVersion": f"{group}/{request.resource.version}"
            if group
            else request.resource.version,
            **out,
        }

    async def _serve_version(self, request):
        out = await super()._serve_version(request)
        if request.resource.group == "":
            out["groupVersion"] = request.resource.version
        return out


def _selects(selector: str, obj: Any) -> bool:
    """Whether an equality-based label selector matches ``obj``'s labels."""
    labels = ((obj.get("metadata") or {}).get("labels") or {}) if isinstance(obj, dict) else {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if " in " in term or " notin " in term or "(" in term:
            raise kmock.KubernetesError(
                status=400, reason="BadRequest", message=f"set-based selector not bridged: {term}"
            )
        if "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _merged(old: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386) of ``patch`` onto ``old``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(old) if isinstance(old, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


class EmulatedCluster:
    """The bridged emulator served on 127.0.0.1 from a background thread.

    Attributes:
      url: the API server URL.
      emulator: the emulator, for inspecting stored objects.
    """

    def __init__(self, timeout: float = 10.0):
        self.timeout = timeout
        self.url: str = ""
        self.emulator: BridgedEmulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with BridgedEmulator() as emulator, kmock.Server(emulator) as server:
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> "EmulatedCluster":
        self._thread.start()
        if not self._ready.wait(self.timeout) or self._error is not None:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.timeout)

    def configuration(self) -> kubernetes.client.Configuration:
        """A ``kubernetes`` client configuration that talks to this emulator."""
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        return cfg

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new ``kubernetes`` ApiClient for this emulator."""
        return kubernetes.client.ApiClient(self.configuration())
