"""The API server of the simulated cluster (:mod:`support.sim_cluster`): enough of Kubernetes'
REST API, over real HTTP, for kubectl v1.35, helm v4, kopf and the official client.

What it models, each from the API's documented behaviour (kubernetes.io, "API Concepts",
"Server-Side Apply", "Garbage Collection", "API-initiated eviction", "Custom Resources"):

- discovery (``/api``, ``/apis``, APIResourceList per group-version, subresources among them,
  ``pods/eviction`` as policy/v1 Eviction), ``/version``, and an OpenAPI v3 index whose PATCH
  operations declare ``fieldValidation``, so that kubectl validates on the server;
- objects: uid, resourceVersion (one counter), generation (moved by spec changes only),
  creationTimestamp, generateName; the status and scale subresources (a change of status
  through the main resource is ignored, and the reverse; a new Pod or custom resource gets no
  status from its creator, as "Custom Resources: Status subresource" says and the pods
  registry does: a pod starts Pending and its kubelet reports the rest); PUT with
  resourceVersion preconditions (409 on conflict); PATCH as JSON merge patch, JSON patch,
  strategic merge patch (merge patch, lists of named items merged by name: enough for what is
  sent here) and server-side apply (fields a manager applied before and no longer applies are
  removed); ``dryRun``;
- list and watch with label and field selectors (``metadata.name``, ``metadata.namespace``,
  ``spec.nodeName``, ``status.phase``), resourceVersion resumption, ``timeoutSeconds``, and
  ``as=Table`` for kubectl get (a CRD's additionalPrinterColumns); watches can be expired
  (:meth:`ApiServer.expire_watches`): a client resuming from before the compaction gets
  410 Gone and must list again;
- deletion: finalizers and ``deletionTimestamp``; graceful deletion of pods bound to a node
  (the kubelet stops the containers and removes the pod), a pod no kubelet runs removed at
  once (the answer is the deleted Pod, as for every pod deletion); propagation ``Foreground``
  (``foregroundDeletion`` finalizer until dependents are gone), ``Background`` and
  ``Orphan``; the garbage collector deletes dependents whose owners are gone, also one
  created after its owner went (its owner reference names a uid no object has);
- CustomResourceDefinitions: a created CRD is served (Established, NamesAccepted), its objects
  are validated against its openAPIV3Schema;
- the eviction subresource: refused with 429 while a PodDisruptionBudget allows no disruption
  (an unready pod passes with ``unhealthyPodEvictionPolicy: AlwaysAllow``; a budget over pods
  whose controller has no scale subresource, a Job's, works with an integer ``minAvailable``
  only, and any other form refuses every eviction), else the pod gets the condition
  DisruptionTarget (reason EvictionByEvictionAPI) and is deleted gracefully.

- structural pruning of custom resources: fields their schema does not declare are dropped
  before they are stored (spec and status alike), as a real API server does.

- RBAC (:mod:`support.sim_rbac`): a pod's requests carry its service account's token and are
  authorized against the Roles, ClusterRoles and their bindings stored here (403 Forbidden
  otherwise); the test's own clients act as the cluster's administrator.

Not modelled: admission webhooks, managedFields in responses, protobuf.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import json
import math
import random
import re
import uuid
from typing import Any, Callable

import jsonpatch
import jsonschema
from aiohttp import web

from seedrl.common.config import load_yaml as config_load_yaml
from seedrl.common.schema import to_json_schema
from support import sim_rbac
from support.sim_protobuf import ProtobufError, decode_protobuf, pb_field, pb_string

KUBE_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0",
    "gitCommit": "sim",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def now_rfc3339() -> str:
    """A Kubernetes timestamp (UTC, whole seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class Resource:
    """One served resource of a group-version."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    #: For custom resources: the CRD's version entry (schema, printer columns, scale paths).
    crd_version: dict | None = None
    categories: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.group_version}/{self.plural}"

    @property
    def singular(self) -> str:
        return self.kind.lower()


def _builtin() -> list[Resource]:
    R = Resource
    return [
        R("", "v1", "namespaces", "Namespace", False, ("status",), ("ns",)),
        R("", "v1", "nodes", "Node", False, ("status",), ("no",)),
        R("", "v1", "pods", "Pod", True, ("status", "eviction", "log"), ("po",)),
        R("", "v1", "services", "Service", True, ("status",), ("svc",)),
        R("", "v1", "endpoints", "Endpoints", True, (), ("ep",)),
        R("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
        R("", "v1", "secrets", "Secret", True),
        R("", "v1", "serviceaccounts", "ServiceAccount", True, (), ("sa",)),
        R("", "v1", "events", "Event", True, (), ("ev",)),
        R("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("status",), ("pvc",)),
        R("apps", "v1", "deployments", "Deployment", True, ("status", "scale"), ("deploy",)),
        R("apps", "v1", "replicasets", "ReplicaSet", True, ("status", "scale"), ("rs",)),
        R("batch", "v1", "jobs", "Job", True, ("status",)),
        R("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, (), ("netpol",)),
        R(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            ("status",),
            ("pdb",),
        ),
        R("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        R("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        R("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        R("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        R(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            ("status",),
            ("crd", "crds"),
        ),
        R("coordination.k8s.io", "v1", "leases", "Lease"),
    ]


class ApiError(Exception):
    """An API error answered as a metav1 Status."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{resource.plural}{"." + resource.group if resource.group else ""} "{name}" not found',
    )


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch, as far as needed here: a merge patch in which lists of objects
    that all carry ``name`` are merged item by item by name (containers, env, ports, volumes:
    their patchMergeKey is name); ``$patch``/``$retainKeys`` directives are dropped."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = strategic_merge_patch(out.get(key), value)
        elif (
            isinstance(value, list)
            and isinstance(out.get(key), list)
            and value
            and all(isinstance(v, dict) and "name" in v for v in value)
            and all(isinstance(v, dict) and "name" in v for v in out[key])
        ):
            merged = {v["name"]: v for v in out[key]}
            for item in value:
                merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            out[key] = list(merged.values())
        else:
            out[key] = copy.deepcopy(value)
    return out


def _paths(obj: Any, prefix: tuple = ()) -> set[tuple]:
    """The leaf paths of a document (lists are leaves: applied as a whole)."""
    if isinstance(obj, dict) and obj:
        out: set[tuple] = set()
        for key, value in obj.items():
            out |= _paths(value, prefix + (key,))
        return out
    return {prefix}


def _remove_path(obj: dict, path: tuple) -> None:
    node = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------


def _label_requirements(selector: str) -> list[tuple[str, str, set[str]]]:
    out = []
    for term in re.split(r",(?![^()]*\))", selector):
        term = term.strip()
        if not term:
            continue
        m = re.fullmatch(r"([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if m:
            out.append((m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}))
        elif "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", {v.strip()}))
        elif "==" in term or "=" in term:
            k, v = re.split("==?", term, maxsplit=1)
            out.append((k.strip(), "=", {v.strip()}))
        elif term.startswith("!"):
            out.append((term[1:].strip(), "!", set()))
        else:
            out.append((term, "exists", set()))
    return out


def labels_match(selector: str | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (equality- and set-based) matches ``labels``."""
    for key, op, values in _label_requirements(selector or ""):
        have = labels.get(key)
        if op == "=" and have not in values:
            return False
        if op == "!=" and have in values:
            return False
        if op == "in" and have not in values:
            return False
        if op == "notin" and have in values:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!" and key in labels:
            return False
    return True


def selector_matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector object (matchLabels, matchExpressions) matches ``labels``."""
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


_FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "status.phase": ("status", "phase"),
    "involvedObject.name": ("involvedObject", "name"),
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.uid": ("involvedObject", "uid"),
    "involvedObject.namespace": ("involvedObject", "namespace"),
}


def fields_match(selector: str | None, obj: dict) -> bool:
    """Whether a field selector (``a=b``, ``a!=b``, comma-joined) matches ``obj``."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        negate = "!=" in term
        key, value = re.split("!=|==?", term, maxsplit=1)
        path = _FIELDS.get(key.strip())
        if path is None:
            raise ApiError(400, "BadRequest", f"field label not supported: {key.strip()}")
        have: Any = obj
        for part in path:
            have = (have or {}).get(part) if isinstance(have, dict) else None
        if ((have or "") == value.strip()) == negate:
            return False
    return True


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Event:
    """One change of one object, as a watch sends it."""

    rv: int
    type: str
    resource: Resource
    obj: dict


class Store:
    """Every object, the change log watches resume from, and the listeners (controllers)."""

    LOG = 20000

    def __init__(self):
        self.resources: dict[str, Resource] = {}
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.log: list[Event] = []
        self._rv = itertools.count(1)
        self.rv = 0
        self.listeners: list[Callable[[Event], None]] = []
        self.watchers: set[asyncio.Queue] = set()
        #: Watches resuming from before this resourceVersion get 410 Gone (compacted).
        self.compacted_rv = 0
        #: (resource key, namespace, name, manager) -> the fields that manager applied.
        self.applied: dict[tuple, set[tuple]] = {}
        for r in _builtin():
            self.resources[r.key] = r

    # -- resources --------------------------------------------------------------------

    def resource(self, group: str, version: str, plural: str) -> Resource:
        key = f"{group}/{version}/{plural}" if group else f"{version}/{plural}"
        if key not in self.resources:
            raise ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({plural}.{group or 'core'})",
            )
        return self.resources[key]

    def by_kind(self, api_version: str, kind: str) -> Resource:
        for r in self.resources.values():
            if r.group_version == api_version and r.kind == kind:
                return r
        raise ApiError(404, "NotFound", f"no matches for kind {kind} in version {api_version}")

    def register_crd(self, crd: dict) -> None:
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            subs = tuple(version.get("subresources") or {})
            r = Resource(
                spec["group"],
                version["name"],
                names["plural"],
                names["kind"],
                spec.get("scope", "Namespaced") == "Namespaced",
                subs,
                tuple(names.get("shortNames") or ()),
                version,
                tuple(names.get("categories") or ()),
            )
            self.resources[r.key] = r

    def unregister_crd(self, crd: dict) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            key = f"{spec['group']}/{version['name']}/{spec['names']['plural']}"
            r = self.resources.pop(key, None)
            if r is not None:
                for k in [k for k in self.objects if k[0] == key]:
                    self._emit("DELETED", r, self.objects.pop(k))

    # -- objects ----------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> dict | None:
        return self.objects.get((resource.key, namespace if resource.namespaced else "", name))

    def list(self, resource: Resource, namespace: str | None = None) -> list[dict]:
        return [
            o
            for (key, ns, _), o in sorted(self.objects.items())
            if key == resource.key and (namespace is None or ns == namespace)
        ]

    def next_rv(self) -> str:
        self.rv = next(self._rv)
        return str(self.rv)

    def put(self, resource: Resource, obj: dict, event: str) -> dict:
        """Stores ``obj`` (its metadata already complete but resourceVersion) and tells."""
        meta = obj["metadata"]
        meta["resourceVersion"] = self.next_rv()
        key = (resource.key, meta.get("namespace", "") if resource.namespaced else "", meta["name"])
        self.objects[key] = obj
        self._emit(event, resource, obj)
        return obj

    def remove(self, resource: Resource, obj: dict) -> None:
        meta = obj["metadata"]
        key = (resource.key, meta.get("namespace", "") if resource.namespaced else "", meta["name"])
        if self.objects.pop(key, None) is not None:
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self.next_rv()
            for k in [k for k in self.applied if k[:3] == key]:
                del self.applied[k]
            self._emit("DELETED", resource, obj)

    def _emit(self, type_: str, resource: Resource, obj: dict) -> None:
        event = Event(self.rv, type_, resource, copy.deepcopy(obj))
        self.log.append(event)
        if len(self.log) > self.LOG:
            del self.log[: len(self.log) - self.LOG]
        for queue in list(self.watchers):
            queue.put_nowait(event)
        for listener in list(self.listeners):
            listener(event)


# --------------------------------------------------------------------------------------------
# The HTTP API
# --------------------------------------------------------------------------------------------

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def load_yaml(raw: bytes) -> Any:
    """One YAML (or JSON) document of a request body, read as the API server's YAML decoder reads
    it: YAML 1.2 floats (``1e-7`` is a number). That is the reading of seedrl's own
    :func:`seedrl.common.config.load_yaml`, used here as it is (its 1 MiB limit is under the
    API server's 3 MiB request limit, and far over any body sent here).

    Raises:
      ValueError: not UTF-8, not YAML, or not exactly one document.
    """
    return config_load_yaml(raw.decode("utf-8"), "the request body")


class ApiServer:
    """The REST API over a :class:`Store`, on an aiohttp application.

    Hooks the rest of the simulated cluster sets:
      on_pod_delete: called with a pod that got a deletionTimestamp (the kubelet stops it);
        None: pods are removed at once, as for pods no kubelet runs.
    """

    def __init__(self, store: Store | None = None):
        self.store = store or Store()
        self.pod_has_kubelet: Callable[[dict], bool] = lambda pod: False
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.requests = 0
        #: Every request RBAC refused, in the API server's words.
        self.forbidden: list[str] = []
        #: Open: watches are served; cleared by :meth:`expire_watches`.
        self.watch_gate = asyncio.Event()
        self.watch_gate.set()

    # -- routing ----------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            return await self._route(request)
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.path in ("/version", "/version/"):
            return web.json_response(KUBE_VERSION)
        if request.path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if parts[:1] == ["openapi"]:
            return self._openapi(parts[1:], request)
        if parts == ["api"]:
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                    ],
                }
            )
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        if parts[:1] == ["api"] and len(parts) == 2:
            return web.json_response(self._resource_list("", parts[1]))
        if parts[:1] == ["apis"] and len(parts) == 2:
            groups = {g["name"]: g for g in self._group_list()["groups"]}
            if parts[1] not in groups:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **groups[parts[1]]})
        if parts[:1] == ["apis"] and len(parts) == 3:
            return web.json_response(self._resource_list(parts[1], parts[2]))
        if parts[:1] == ["api"]:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"]:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"no route for {request.path}")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) == 2 and rest[0] == "namespaces" and request.method != "GET":
            pass
        resource = self.store.resource(group, version, rest[0])
        if namespace is not None and not resource.namespaced:
            raise ApiError(404, "NotFound", "cluster-scoped resource in a namespace path")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if resource.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", "a namespaced resource needs a namespace")
        ns = namespace or ""
        method = request.method
        subject = sim_rbac.subject_of(request.headers.get("Authorization"))
        if subject is not None:
            self._authorize(subject, request, resource, namespace, name, sub)
        if name is None:
            if method == "GET":
                if request.query.get("watch") in ("true", "1", "True"):
                    return await self._watch(request, resource, namespace)
                return self._list_response(request, resource, namespace)
            if method == "POST":
                body = await self._body(request)
                return web.json_response(self.create(resource, ns, body, request.query), status=201)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        if sub == "scale":
            return web.json_response(await self._scale(request, resource, ns, name))
        if sub == "eviction" and resource.plural == "pods" and method == "POST":
            body = await self._body(request)
            return web.json_response(self.evict(ns, name, body), status=201)
        if sub == "log" and resource.plural == "pods":
            return web.Response(text=self.pod_log(ns, name, request.query))
        if sub not in (None, "status"):
            raise ApiError(404, "NotFound", f"no subresource {sub}")
        if method == "GET":
            obj = self.store.get(resource, ns, name)
            if obj is None:
                raise _not_found(resource, name)
            return web.json_response(obj)
        if method == "PUT":
            body = await self._body(request)
            return web.json_response(self.update(resource, ns, name, body, sub, request.query))
        if method == "PATCH":
            body = await request.read()
            return web.json_response(
                self.patch(resource, ns, name, body, request.content_type, sub, request.query)
            )
        if method == "DELETE":
            raw = await request.read()
            if request.content_type == "application/vnd.kubernetes.protobuf" and raw:
                options = _decode_protobuf(raw)
            else:
                options = json.loads(raw) if raw.strip() else {}
            return web.json_response(self.delete(resource, ns, name, options, request.query))
        raise ApiError(405, "MethodNotAllowed", method)

    def _authorize(
        self,
        subject: sim_rbac.Subject,
        request: web.Request,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        sub: str | None,
    ) -> None:
        """Refuses with 403 what RBAC does not allow a service account (support.sim_rbac)."""
        watch = request.query.get("watch") in ("true", "1", "True")
        req = sim_rbac.Request(
            verb=sim_rbac.verb_of(request.method, name is not None, watch),
            group=resource.group,
            resource=resource.plural,
            subresource=sub,
            namespace=namespace if resource.namespaced else None,
            name=name,
        )
        rbac = "rbac.authorization.k8s.io"
        roles = self.store.resource(rbac, "v1", "roles")
        bindings = self.store.resource(rbac, "v1", "rolebindings")
        if sim_rbac.allowed(
            req,
            subject,
            lambda ns: self.store.list(roles, ns),
            self.store.list(self.store.resource(rbac, "v1", "clusterroles")),
            lambda ns: self.store.list(bindings, ns),
            self.store.list(self.store.resource(rbac, "v1", "clusterrolebindings")),
        ):
            return
        message = sim_rbac.forbidden_message(req, subject, resource.plural)
        self.forbidden.append(message)
        raise ApiError(403, "Forbidden", message)

    async def _body(self, request: web.Request) -> dict:
        raw = await request.read()
        if request.content_type == "application/vnd.kubernetes.protobuf":
            return _decode_protobuf(raw)
        try:
            body = load_yaml(raw) if "yaml" in request.content_type else json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"cannot decode the body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        return body

    # -- discovery --------------------------------------------------------------------

    def _group_list(self) -> dict:
        groups: dict[str, list[str]] = {}
        for r in self.store.resources.values():
            if r.group:
                versions = groups.setdefault(r.group, [])
                if r.version not in versions:
                    versions.append(r.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in sorted(groups.items())
            ],
        }

    def _resource_list(self, group: str, version: str) -> dict:
        gv = f"{group}/{version}" if group else version
        items = []
        for r in self.store.resources.values():
            if r.group_version != gv:
                continue
            verbs = [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
            items.append(
                {
                    "name": r.plural,
                    "singularName": r.singular,
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": verbs,
                    **({"shortNames": list(r.short_names)} if r.short_names else {}),
                    **({"categories": list(r.categories)} if r.categories else {}),
                }
            )
            for sub in r.subresources:
                entry = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    entry.update(kind="Scale", group="autoscaling", version="v1")
                elif sub == "eviction":
                    entry.update(kind="Eviction", group="policy", version="v1", verbs=["create"])
                elif sub == "log":
                    entry.update(verbs=["get"])
                items.append(entry)
        if not items:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({gv})"
            )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": items,
        }

    def _openapi(self, parts: list[str], request: web.Request) -> web.StreamResponse:
        if parts == ["v3"]:
            gvs = sorted({r.group_version for r in self.store.resources.values()})
            paths = {}
            for gv in gvs:
                path = f"api/{gv}" if "/" not in gv else f"apis/{gv}"
                paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={self.store.rv}"}
            return web.json_response({"paths": paths})
        if parts[:1] == ["v3"]:
            gv = "/".join(parts[2:]) if parts[1] == "apis" else "/".join(parts[2:])
            ops = {}
            for r in self.store.resources.values():
                if r.group_version != gv:
                    continue
                gvk = {"group": r.group, "version": r.version, "kind": r.kind}
                params = [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ]
                base = f"/{'apis/' + gv if r.group else 'api/' + gv}"
                item = (
                    f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}"
                    if r.namespaced
                    else f"{base}/{r.plural}/{{name}}"
                )
                ops[item] = {
                    "patch": {"x-kubernetes-group-version-kind": gvk, "parameters": params},
                    "put": {"x-kubernetes-group-version-kind": gvk, "parameters": params},
                }
            return web.json_response(
                {
                    "openapi": "3.0.0",
                    "info": {"title": "sim", "version": "v1"},
                    "paths": ops,
                    "components": {"schemas": {}},
                }
            )
        if parts == ["v2"]:
            # A minimal OpenAPI v2 document in the protobuf encoding clients ask for (gnostic's
            # openapi_v2.Document: swagger = 1, info = 2 with title = 1, version = 2). It
            # declares no types, so a client validating against it checks nothing: the
            # server validates (fieldValidation, custom resources' schemas).
            info = pb_string(1, "sim") + pb_string(2, "v1")
            document = pb_string(1, "2.0") + pb_field(2, info)
            return web.Response(
                body=document,
                content_type=("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
            )
        raise ApiError(404, "NotFound", "no such OpenAPI document")

    # -- reads ------------------------------------------------------------------------

    def _selected(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> list[dict]:
        labels = request.query.get("labelSelector")
        fields = request.query.get("fieldSelector")
        return [
            o
            for o in self.store.list(resource, namespace)
            if labels_match(labels, (o["metadata"].get("labels") or {})) and fields_match(fields, o)
        ]

    def _list_response(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> web.Response:
        items = self._selected(request, resource, namespace)
        if "as=Table" in request.headers.get("Accept", ""):
            return web.json_response(self._table(resource, items))
        return web.json_response(
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.group_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": items,
            }
        )

    def _table(self, resource: Resource, items: list[dict]) -> dict:
        columns = [
            {
                "name": "Name",
                "type": "string",
                "format": "name",
                "description": "Name",
                "priority": 0,
            }
        ]
        getters: list[Callable[[dict], Any]] = [lambda o: o["metadata"]["name"]]
        printer = (resource.crd_version or {}).get("additionalPrinterColumns")
        if printer:
            for col in printer:
                columns.append(
                    {
                        "name": col["name"],
                        "type": col["type"],
                        "format": col.get("format", ""),
                        "description": col.get("description", ""),
                        "priority": col.get("priority", 0),
                    }
                )
                getters.append(lambda o, p=col["jsonPath"], t=col["type"]: _cell(o, p, t))
        else:
            if resource.kind == "Pod":
                for name, get in (
                    ("Ready", _pod_ready),
                    ("Status", _pod_status),
                    ("Restarts", _pod_restarts),
                    ("Node", lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
                ):
                    columns.append(
                        {
                            "name": name,
                            "type": "string",
                            "format": "",
                            "description": name,
                            "priority": 0,
                        }
                    )
                    getters.append(get)
            columns.append(
                {"name": "Age", "type": "date", "format": "", "description": "Age", "priority": 0}
            )
            getters.append(lambda o: _age(o["metadata"].get("creationTimestamp")))
        rows = []
        for o in items:
            rows.append(
                {
                    "cells": [get(o) for get in getters],
                    "object": {
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"],
                    },
                }
            )
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": str(self.store.rv)},
            "columnDefinitions": columns,
            "rows": rows,
        }

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> web.StreamResponse:
        labels = request.query.get("labelSelector")
        fields = request.query.get("fieldSelector")
        since = request.query.get("resourceVersion") or "0"
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        await self.watch_gate.wait()
        queue: asyncio.Queue = asyncio.Queue()
        self.store.watchers.add(queue)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)

        def wanted(event: Event) -> bool:
            if event.resource.key != resource.key:
                return False
            meta = event.obj["metadata"]
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return labels_match(labels, meta.get("labels") or {}) and fields_match(
                fields, event.obj
            )

        async def send(type_: str, obj: dict) -> None:
            await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        try:
            if since in ("0", ""):
                for obj in self._selected(request, resource, namespace):
                    await send("ADDED", obj)
            else:
                start = int(since)
                if start < self.store.compacted_rv or (
                    self.store.log
                    and self.store.log[0].rv > start + 1
                    and start < self.store.log[0].rv - 1
                ):
                    await send(
                        "ERROR", ApiError(410, "Expired", "too old resource version").status()
                    )
                    return response
                for event in list(self.store.log):
                    if event.rv > start and wanted(event):
                        await send(event.type, event.obj)
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    event = await asyncio.wait_for(queue.get(), min(left, 30))
                    if event is None:  # closed by expire_watches
                        break
                except asyncio.TimeoutError:
                    if request.query.get("allowWatchBookmarks") in ("true", "1"):
                        await send(
                            "BOOKMARK",
                            {
                                "kind": resource.kind,
                                "apiVersion": resource.group_version,
                                "metadata": {"resourceVersion": str(self.store.rv)},
                            },
                        )
                    continue
                if wanted(event):
                    await send(event.type, event.obj)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(queue)
        return response

    def expire_watches(self) -> None:
        """Ends every open watch and holds new ones back until :meth:`release_watches`: what
        an API server restart, an etcd compaction or a long network partition does to its
        clients. Changes made meanwhile reach no watch."""
        self.watch_gate.clear()
        for queue in list(self.store.watchers):
            queue.put_nowait(None)

    def release_watches(self) -> None:
        """Lets watches in again, with the history compacted up to now: a client resuming
        from a resourceVersion before it gets 410 Gone ("API Concepts: Efficient detection
        of changes") and must list again, seeing no DELETED event for what went meanwhile."""
        self.store.compacted_rv = self.store.rv
        self.store.log.clear()
        self.watch_gate.set()

    def pod_log(self, namespace: str, name: str, query) -> str:
        """``kubectl logs``: the kubelet keeps each container's log on disk."""
        pod = self.store.get(self.store.resource("", "v1", "pods"), namespace, name)
        if pod is None:
            raise _not_found(self.store.resource("", "v1", "pods"), name)
        path = (pod["metadata"].get("annotations") or {}).get("sim.seedrl.dev/log")
        if not path:
            return ""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    # -- writes -----------------------------------------------------------------------

    def _validate(self, resource: Resource, obj: dict, strict: bool) -> None:
        if obj.get("kind") not in (None, resource.kind):
            raise ApiError(
                400, "BadRequest", f"kind {obj.get('kind')} does not match {resource.kind}"
            )
        version = resource.crd_version
        if version and (version.get("schema") or {}).get("openAPIV3Schema"):
            schema = to_json_schema(version["schema"]["openAPIV3Schema"], closed=strict)
            # apiVersion, kind and metadata are every object's, whatever its schema says.
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            errors = sorted(
                jsonschema.Draft202012Validator(schema).iter_errors(body),
                key=lambda e: list(e.absolute_path),
            )
            if errors:
                causes = "; ".join(
                    f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                    for e in errors[:10]
                )
                raise ApiError(
                    422,
                    "Invalid",
                    f"{resource.kind}.{resource.group} "
                    f'"{obj["metadata"].get("name")}" is invalid: '
                    f"{causes}",
                )

    def _prune(self, resource: Resource, obj: dict) -> None:
        """Drops the fields of a custom resource its structural schema does not declare,
        in place ("Custom Resources: Field pruning": what the schema does not specify is
        not persisted, unless under ``x-kubernetes-preserve-unknown-fields``); apiVersion,
        kind and metadata are every object's."""
        version = resource.crd_version
        schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            return
        for key, value in list(obj.items()):
            if key in ("apiVersion", "kind", "metadata"):
                continue
            sub = (schema.get("properties") or {}).get(key)
            if sub is None:
                if not schema.get("x-kubernetes-preserve-unknown-fields"):
                    del obj[key]
            else:
                prune_unknown(value, sub)

    def create(self, resource: Resource, namespace: str, body: dict, query=None) -> dict:
        """Creates an object (POST)."""
        query = query or {}
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name: Required value")
            meta["name"] = meta["generateName"] + "".join(
                random.choice(_NAME_CHARS) for _ in range(5)
            )
        if resource.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the object does not match the namespace of the request",
                )
            meta["namespace"] = namespace
            ns_res = self.store.resource("", "v1", "namespaces")
            if self.store.get(ns_res, "", namespace) is None:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        else:
            meta.pop("namespace", None)
        if self.store.get(resource, namespace, meta["name"]) is not None:
            raise ApiError(
                409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists'
            )
        obj["apiVersion"], obj["kind"] = resource.group_version, resource.kind
        if "status" in resource.subresources and (
            resource.kind == "Pod" or resource.crd_version is not None
        ):
            # The status is the server's to start, then written through /status only.
            obj.pop("status", None)
        self._validate(resource, obj, query.get("fieldValidation") == "Strict")
        self._prune(resource, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = now_rfc3339()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        self._defaults(resource, obj)
        if query.get("dryRun"):
            return obj
        obj = self.store.put(resource, obj, "ADDED")
        self._after_write(resource, obj)
        if meta.get("ownerReferences"):
            # Made after its owner went (a controller acting on a stale cache): the garbage
            # collector finds no owner of that uid and deletes it.
            self._collect_garbage()
        return obj

    def _defaults(self, resource: Resource, obj: dict) -> None:
        if resource.kind == "Service":
            spec = obj.setdefault("spec", {})
            if spec.get("clusterIP") != "None":
                spec.setdefault(
                    "clusterIP", f"10.96.{random.randint(0, 255)}.{random.randint(1, 254)}"
                )
        if resource.kind == "Pod":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
        if resource.kind == "CustomResourceDefinition":
            names = obj["spec"]["names"]
            obj["status"] = {
                "acceptedNames": names,
                "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": r,
                        "message": m,
                        "lastTransitionTime": now_rfc3339(),
                    }
                    for t, r, m in (
                        ("NamesAccepted", "NoConflicts", "no conflicts found"),
                        (
                            "Established",
                            "InitialNamesAccepted",
                            "the initial names have been accepted",
                        ),
                    )
                ],
            }
        if resource.kind == "Namespace":
            obj.setdefault("status", {})["phase"] = "Active"
        if resource.kind == "PersistentVolumeClaim":
            obj.setdefault("status", {}).update(phase="Bound")

    def _after_write(self, resource: Resource, obj: dict) -> None:
        if resource.kind == "CustomResourceDefinition":
            self.store.register_crd(obj)

    def _old_or_404(self, resource: Resource, namespace: str, name: str) -> dict:
        old = self.store.get(resource, namespace, name)
        if old is None:
            raise _not_found(resource, name)
        return old

    def _commit(
        self, resource: Resource, old: dict, new: dict, sub: str | None, query=None
    ) -> dict:
        """Stores a new version of ``old``: only status through /status, never status
        otherwise (when the resource has the subresource); generation follows spec."""
        query = query or {}
        new = copy.deepcopy(new)
        if sub == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            new = merged
        elif "status" in resource.subresources:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "namespace", "name", "generation"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        if old["metadata"].get("deletionTimestamp"):
            meta["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
            if "deletionGracePeriodSeconds" in old["metadata"]:
                meta["deletionGracePeriodSeconds"] = old["metadata"]["deletionGracePeriodSeconds"]
        new["apiVersion"], new["kind"] = resource.group_version, resource.kind
        self._prune(resource, new)
        spec_like = {k: v for k, v in new.items() if k not in ("metadata", "status")}
        old_like = {k: v for k, v in old.items() if k not in ("metadata", "status")}
        if sub != "status" and spec_like != old_like:
            meta["generation"] = int(old["metadata"].get("generation") or 1) + 1
            self._validate(resource, new, query.get("fieldValidation") == "Strict")
        if new == old:
            return old
        if query.get("dryRun"):
            return new
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not self._held_by_kubelet(resource, new)
        ):
            self.store.remove(resource, new)
            self._collect_garbage()
            return new
        self.store.put(resource, new, "MODIFIED")
        self._after_write(resource, new)
        return new

    def _held_by_kubelet(self, resource: Resource, obj: dict) -> bool:
        return resource.kind == "Pod" and self.pod_has_kubelet(obj)

    def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: dict,
        sub: str | None = None,
        query=None,
    ) -> dict:
        """Replaces an object (PUT), with its resourceVersion as a precondition."""
        old = self._old_or_404(resource, namespace, name)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {resource.plural} "
                f'"{name}": the object has been modified; please '
                f"apply your changes to the latest version and "
                f"try again",
            )
        return self._commit(resource, old, body, sub, query)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        raw: bytes,
        content_type: str,
        sub: str | None = None,
        query=None,
    ) -> dict:
        """Patches an object (PATCH) by content type."""
        query = query or {}
        old = self.store.get(resource, namespace, name)
        if "apply-patch" in content_type:
            try:
                applied = load_yaml(raw)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", str(exc)) from None
            manager = query.get("fieldManager")
            if not manager:
                raise ApiError(400, "BadRequest", "fieldManager is required for apply")
            if old is None:
                if sub:
                    raise _not_found(resource, name)
                obj = self.create(resource, namespace, applied, query)
                self.store.applied[
                    (resource.key, namespace if resource.namespaced else "", name, manager)
                ] = _paths(_content(applied))
                return obj
            key = (resource.key, namespace if resource.namespaced else "", name, manager)
            before = self.store.applied.get(key, set())
            now = _paths(_content(applied))
            new = copy.deepcopy(old)
            for path in sorted(before - now, key=len, reverse=True):
                _remove_path(new, path)
            new = merge_patch(new, _content(applied))
            result = self._commit(resource, old, new, sub, query)
            if not query.get("dryRun"):
                self.store.applied[key] = now
            return result
        if old is None:
            raise _not_found(resource, name)
        try:
            patch = json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"cannot decode the patch: {exc}") from None
        if "json-patch" in content_type:
            try:
                new = jsonpatch.apply_patch(old, patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(422, "Invalid", f"the JSON patch failed: {exc}") from None
        elif "strategic-merge-patch" in content_type:
            new = strategic_merge_patch(old, patch)
        else:
            new = merge_patch(old, patch)
        rv = (
            (patch.get("metadata") or {}).get("resourceVersion")
            if isinstance(patch, dict)
            else None
        )
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._commit(resource, old, new, sub, query)

    def delete(
        self, resource: Resource, namespace: str, name: str, options: dict, query=None
    ) -> dict:
        """Deletes an object (DELETE): finalizers, graceful pod deletion, propagation."""
        query = query or {}
        old = self._old_or_404(resource, namespace, name)
        policy = (
            options.get("propagationPolicy") or query.get("propagationPolicy") or ("Background")
        )
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        if grace is not None and int(grace) < 0:
            grace = None  # negative: the object's own default (kubectl's -1)
        if query.get("dryRun") or options.get("dryRun"):
            return old
        obj = copy.deepcopy(old)
        meta = obj["metadata"]
        if policy == "Orphan":
            self._orphan(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self._dependents(meta["uid"])
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        graceful = (
            resource.kind == "Pod"
            and self.pod_has_kubelet(obj)
            and (grace is None or int(grace) > 0)
        )
        if resource.kind == "Pod" and grace is not None and int(grace) == 0:
            graceful = False
        if finalizers or graceful:
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_rfc3339()
                if resource.kind == "Pod":
                    pod_grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                    meta["deletionGracePeriodSeconds"] = int(pod_grace if grace is None else grace)
                meta["finalizers"] = finalizers
                meta["resourceVersion"] = old["metadata"]["resourceVersion"]
                self.store.put(resource, obj, "MODIFIED")
            elif resource.kind == "Pod" and grace is not None:
                meta["deletionGracePeriodSeconds"] = min(
                    int(grace), int(meta.get("deletionGracePeriodSeconds") or 0)
                )
                self.store.put(resource, obj, "MODIFIED")
            if resource.kind == "Pod" and not graceful and not finalizers:
                self.store.remove(resource, obj)
            self._collect_garbage()
            return obj
        self.store.remove(resource, obj)
        if resource.kind == "CustomResourceDefinition":
            self.store.unregister_crd(obj)
        if resource.kind == "Namespace":
            for (key, ns, _), o in list(self.store.objects.items()):
                if ns == name:
                    self.store.remove(self.store.resources[key], o)
        self._collect_garbage()
        if resource.kind == "Pod":
            return obj  # the pods registry answers with the deleted Pod, not a Status
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Success",
            "details": {"name": name, "kind": resource.plural, "uid": meta["uid"]},
        }

    def finish_pod(self, pod: dict) -> None:
        """The kubelet's last word on a deleted pod whose containers have stopped: remove it
        (once its finalizers are gone)."""
        resource = self.store.resource("", "v1", "pods")
        current = self.store.get(resource, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
            return
        if current["metadata"].get("finalizers"):
            return  # removed when the last finalizer goes
        self.store.remove(resource, current)
        self._collect_garbage()

    # -- garbage collection -------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[Resource, dict]]:
        return [
            (self.store.resources[key], o)
            for (key, _, _), o in self.store.objects.items()
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
        ]

    def _orphan(self, uid: str) -> None:
        for resource, obj in self._dependents(uid):
            obj = copy.deepcopy(obj)
            obj["metadata"]["ownerReferences"] = [
                r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != uid
            ]
            self.store.put(resource, obj, "MODIFIED")

    def _collect_garbage(self) -> None:
        """Deletes objects whose every owner is gone, and finishes foreground deletions whose
        dependents are gone (the garbage collector)."""
        for _ in range(20):
            uids = {o["metadata"]["uid"] for o in self.store.objects.values()}
            changed = False
            for (key, ns, name), obj in list(self.store.objects.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if (
                    refs
                    and not any(r.get("uid") in uids for r in refs)
                    and not obj["metadata"].get("deletionTimestamp")
                    and self.store.objects.get((key, ns, name)) is obj
                ):
                    try:
                        self.delete(
                            self.store.resources[key], ns, name, {"propagationPolicy": "Background"}
                        )
                    except ApiError as exc:
                        if exc.code != 404:
                            raise
                    changed = True
            for (key, ns, name), obj in list(self.store.objects.items()):
                if self.store.objects.get((key, ns, name)) is not obj:
                    continue
                meta = obj["metadata"]
                if "foregroundDeletion" in (meta.get("finalizers") or []) and not self._dependents(
                    meta["uid"]
                ):
                    obj = copy.deepcopy(obj)
                    obj["metadata"]["finalizers"] = [
                        f for f in meta["finalizers"] if f != "foregroundDeletion"
                    ]
                    self._commit(
                        self.store.resources[key], self.store.objects[(key, ns, name)], obj, None
                    )
                    changed = True
                elif "foregroundDeletion" in (meta.get("finalizers") or []):
                    for resource, dep in self._dependents(meta["uid"]):
                        if not dep["metadata"].get("deletionTimestamp"):
                            try:
                                self.delete(
                                    resource,
                                    dep["metadata"].get("namespace", ""),
                                    dep["metadata"]["name"],
                                    {"propagationPolicy": "Foreground"},
                                )
                            except ApiError as exc:
                                if exc.code != 404:
                                    raise
                            changed = True
            if not changed:
                return

    # -- subresources -------------------------------------------------------------------

    async def _scale(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> dict:
        obj = self._old_or_404(resource, namespace, name)
        if "scale" not in resource.subresources:
            raise ApiError(404, "NotFound", f"{resource.plural} have no scale subresource")
        paths = ((resource.crd_version or {}).get("subresources") or {}).get("scale") or {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": None,
        }
        if request.method in ("PUT", "PATCH"):
            raw = await request.read()
            body = json.loads(raw)
            if request.method == "PATCH":
                body = merge_patch(self._scale_of(obj, paths), body)
            replicas = (body.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise ApiError(422, "Invalid", "spec.replicas: must be a non-negative integer")
            new = copy.deepcopy(obj)
            _set_path(new, paths["specReplicasPath"], replicas)
            obj = self._commit(resource, obj, new, None)
        return self._scale_of(obj, paths)

    def _scale_of(self, obj: dict, paths: dict) -> dict:
        selector = None
        if paths.get("labelSelectorPath"):
            selector = _get_path(obj, paths["labelSelectorPath"])
        elif (obj.get("spec") or {}).get("selector"):
            selector = ",".join(
                f"{k}={v}" for k, v in obj["spec"]["selector"].get("matchLabels", {}).items()
            )
        meta = obj["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta.get("creationTimestamp"),
            },
            "spec": {"replicas": _get_path(obj, paths["specReplicasPath"]) or 0},
            "status": {
                "replicas": _get_path(obj, paths["statusReplicasPath"]) or 0,
                **({"selector": selector} if selector else {}),
            },
        }

    def pdbs_blocking(self, pod: dict) -> list[str]:
        """The PodDisruptionBudgets that allow no disruption of ``pod`` now."""
        namespace = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        pdb_res = self.store.resource("policy", "v1", "poddisruptionbudgets")
        pods_res = self.store.resource("", "v1", "pods")
        blocking = []
        for pdb in self.store.list(pdb_res, namespace):
            spec = pdb.get("spec") or {}
            if not selector_matches(spec.get("selector"), labels):
                continue
            if not _ready(pod) and spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
                continue
            members = [
                p
                for p in self.store.list(pods_res, namespace)
                if selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and not p["metadata"].get("deletionTimestamp")
            ]
            healthy = sum(1 for p in members if _ready(p))
            expected = len(members)
            if not _integer_min_available(spec) and not all(_controller_scales(p) for p in members):
                # "Specifying a Disruption Budget for your Application" (Arbitrary workloads
                # and arbitrary selectors): for pods whose controller has no scale
                # subresource (a Job, none) only an integer minAvailable works; the
                # disruption controller cannot count the expected pods and marks the budget
                # failed, and the eviction API then refuses every eviction it covers.
                blocking.append(pdb["metadata"]["name"])
                continue
            if "minAvailable" in spec:
                desired = _int_or_percent(spec["minAvailable"], expected, math.ceil)
            else:
                desired = expected - _int_or_percent(
                    spec.get("maxUnavailable", 1), expected, math.floor
                )
            if healthy - desired <= 0:
                blocking.append(pdb["metadata"]["name"])
        return blocking

    def evict(self, namespace: str, name: str, body: dict) -> dict:
        """The eviction subresource (policy/v1 Eviction)."""
        pods_res = self.store.resource("", "v1", "pods")
        pod = self._old_or_404(pods_res, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        blocking = self.pdbs_blocking(pod)
        if blocking:
            raise ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget. "
                f"The disruption budget {blocking[0]} needs more healthy pods.",
            )
        pod = copy.deepcopy(pod)
        set_pod_condition(
            pod, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting"
        )
        self._commit(pods_res, self.store.get(pods_res, namespace, name), pod, "status")
        options = body.get("deleteOptions") or {}
        self.delete(pods_res, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}


#: Built-in controllers with a scale subresource (Deployment, ReplicaSet, StatefulSet,
#: ReplicationController): a budget over their pods may use maxUnavailable and percentages.
_SCALABLE_CONTROLLERS = {"Deployment", "ReplicaSet", "StatefulSet", "ReplicationController"}


def _integer_min_available(spec: dict) -> bool:
    return isinstance(spec.get("minAvailable"), int) and "maxUnavailable" not in spec


def _controller_scales(pod: dict) -> bool:
    """Whether ``pod``'s controller is one the disruption controller can read a scale of."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind") in _SCALABLE_CONTROLLERS
    return False


def prune_unknown(value: Any, schema: dict) -> None:
    """Removes, in place, what a structural schema does not declare from ``value``."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key in list(value):
            if properties is not None and key in properties:
                prune_unknown(value[key], properties[key])
            elif isinstance(additional, dict):
                prune_unknown(value[key], additional)
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and additional is not True:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            prune_unknown(item, schema["items"])


def _decode_protobuf(raw: bytes) -> dict:
    try:
        return decode_protobuf(raw)
    except ProtobufError as exc:
        raise ApiError(415, "UnsupportedMediaType", str(exc)) from None


def _content(obj: dict) -> dict:
    """What an applied configuration sets, without the identity fields."""
    out = copy.deepcopy(obj)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    meta = out.get("metadata") or {}
    for key in ("name", "namespace", "resourceVersion", "uid"):
        meta.pop(key, None)
    return out


def _int_or_percent(value: Any, total: int, rounding) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return int(rounding(total * float(value[:-1]) / 100))
    return int(value)


def _get_path(obj: dict, path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _set_path(obj: dict, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _cell(obj: dict, path: str, type_: str) -> Any:
    value = _get_path(obj, path)
    if value is None:
        return None
    if type_ == "date":
        return _age(value)
    return value


def _age(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc
    )
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    return f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{max(seconds, 0)}s"


def _ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _pod_ready(pod: dict) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(pod['spec']['containers'])}"


def _pod_status(pod: dict) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    # kubectl's own column: an init container not done yet names the pod's state.
    inits = pod["spec"].get("initContainers") or []
    for index, s in enumerate(status.get("initContainerStatuses") or []):
        state = s.get("state") or {}
        term = state.get("terminated")
        if term and not term.get("exitCode"):
            continue
        if term:
            return f"Init:{term.get('reason') or 'Error'}"
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting and waiting != "PodInitializing":
            return f"Init:{waiting}"
        return f"Init:{index}/{len(inits)}"
    for s in status.get("containerStatuses") or []:
        state = s.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            return state["waiting"]["reason"]
        if "terminated" in state and status.get("phase") not in ("Running",):
            return state["terminated"].get("reason") or "Terminated"
    return status.get("reason") or status.get("phase") or "Pending"


def _pod_restarts(pod: dict) -> int:
    return sum(
        s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


def set_pod_condition(
    pod: dict, type_: str, status: str, reason: str = "", message: str = ""
) -> bool:
    """Sets a pod condition in place; returns whether it changed."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    for cond in conditions:
        if cond["type"] == type_:
            if (cond.get("status"), cond.get("reason", ""), cond.get("message", "")) == (
                status,
                reason,
                message,
            ):
                return False
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now_rfc3339()
            cond.update(status=status, reason=reason, message=message)
            return True
    conditions.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
            "lastProbeTime": None,
        }
    )
    return True
