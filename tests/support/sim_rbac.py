"""RBAC authorization for the simulated API server (:mod:`support.sim_apiserver`).

Modelled on Kubernetes' "Using RBAC Authorization" and "Authorization Overview":

- a request is described by its attributes: user (a pod's service account,
  ``system:serviceaccount:NAMESPACE:NAME``, and its groups ``system:serviceaccounts``,
  ``system:serviceaccounts:NAMESPACE``, ``system:authenticated``), verb (``get``, ``list``,
  ``watch``, ``create``, ``update``, ``patch``, ``delete``, ``deletecollection``), API group,
  resource and subresource (``experiments/status``), namespace and name;
- it is allowed when a rule of a Role bound in its namespace (RoleBinding to a Role or a
  ClusterRole) or of a ClusterRole bound cluster-wide (ClusterRoleBinding) matches it: the
  group, the resource (``*`` any, ``resource/sub`` for a subresource), the verb and, when
  the rule lists ``resourceNames``, the name (a list, watch or create has none and is not
  matched by such a rule). Cluster-scoped resources and requests across all namespaces
  need a ClusterRoleBinding. Rules only add: there is no deny;
- otherwise it is refused with 403 Forbidden and the API server's message, e.g. ``jobs.batch
  "x-learner" is forbidden: User "system:serviceaccount:seedrl-system:op" cannot delete
  resource "jobs" in API group "batch" in the namespace "team-a"``.

The test's own clients (kubectl, helm, the official client with the cluster's kubeconfig)
use another token and act as cluster-admin, as a cluster's administrator does. Discovery
(``/api``, ``/apis``, ``/version``, ``/openapi``) is every authenticated user's
(``system:discovery``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

#: The prefix of a service account's bearer token in the simulated cluster.
TOKEN_PREFIX = "serviceaccount:"


def service_account_token(namespace: str, name: str) -> str:
    """The bearer token a pod of service account ``namespace/name`` presents."""
    return f"{TOKEN_PREFIX}{namespace}:{name}"


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who sends a request: a service account, or None for the cluster's administrator."""

    namespace: str
    name: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> tuple[str, ...]:
        return (
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        )


def subject_of(authorization: str | None) -> Subject | None:
    """The service account a request's ``Authorization`` header names (None: an admin)."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    if not token.startswith(TOKEN_PREFIX):
        return None
    namespace, _, name = token[len(TOKEN_PREFIX) :].partition(":")
    return Subject(namespace, name)


@dataclasses.dataclass(frozen=True)
class Request:
    """The attributes RBAC decides on."""

    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None


def _bound(binding: dict, subject: Subject) -> bool:
    for s in binding.get("subjects") or []:
        kind = s.get("kind")
        if kind == "ServiceAccount":
            if s.get("name") == subject.name and s.get("namespace") == subject.namespace:
                return True
        elif kind == "User" and s.get("name") == subject.user:
            return True
        elif kind == "Group" and s.get("name") in subject.groups:
            return True
    return False


def _rule_allows(rule: dict, req: Request) -> bool:
    if not {"*", req.group} & set(rule.get("apiGroups") or []):
        return False
    wanted = req.resource if req.subresource is None else f"{req.resource}/{req.subresource}"
    resources = set(rule.get("resources") or [])
    if not (
        "*" in resources
        or wanted in resources
        or (req.subresource is not None and f"*/{req.subresource}" in resources)
    ):
        return False
    if not {"*", req.verb} & set(rule.get("verbs") or []):
        return False
    names = rule.get("resourceNames") or []
    return not names or (req.name is not None and req.name in names)


def allowed(
    req: Request,
    subject: Subject,
    roles: Callable[[str], Iterable[dict]],
    cluster_roles: Iterable[dict],
    role_bindings: Callable[[str], Iterable[dict]],
    cluster_role_bindings: Iterable[dict],
) -> bool:
    """Whether RBAC allows ``req`` from ``subject``.

    Args:
      roles: a namespace's Roles; role_bindings: a namespace's RoleBindings.
      cluster_roles, cluster_role_bindings: every ClusterRole and ClusterRoleBinding.
    """
    by_name = {r["metadata"]["name"]: r for r in cluster_roles}

    def rules_of(ref: dict, namespace: str | None) -> list[dict]:
        if ref.get("kind") == "ClusterRole":
            role = by_name.get(ref.get("name"))
        else:
            role = next(
                (r for r in roles(namespace or "") if r["metadata"]["name"] == ref.get("name")),
                None,
            )
        return list((role or {}).get("rules") or [])

    for binding in cluster_role_bindings:
        if _bound(binding, subject) and any(
            _rule_allows(rule, req) for rule in rules_of(binding.get("roleRef") or {}, None)
        ):
            return True
    if req.namespace:
        for binding in role_bindings(req.namespace):
            if _bound(binding, subject) and any(
                _rule_allows(rule, req)
                for rule in rules_of(binding.get("roleRef") or {}, req.namespace)
            ):
                return True
    return False


def forbidden_message(req: Request, subject: Subject, kind_plural: str) -> str:
    """The API server's words for a refused request."""
    what = f"{kind_plural}{'.' + req.group if req.group else ''}"
    target = f'{what} "{req.name}"' if req.name else what
    resource = req.resource if req.subresource is None else f"{req.resource}/{req.subresource}"
    where = f' in the namespace "{req.namespace}"' if req.namespace else " at the cluster scope"
    return (
        f'{target} is forbidden: User "{subject.user}" cannot {req.verb} resource '
        f'"{resource}" in API group "{req.group}"{where}'
    )


def verb_of(method: str, has_name: bool, watch: bool) -> str:
    """The RBAC verb of an HTTP request ("Determine the Request Verb")."""
    if method in ("GET", "HEAD"):
        if watch:
            return "watch"
        return "get" if has_name else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if has_name else "deletecollection",
    }.get(method, method.lower())


def describe(rule: dict[str, Any]) -> str:
    """One rule in a line (for diagnoses)."""
    return f"{rule.get('apiGroups')} {rule.get('resources')} {rule.get('verbs')}" + (
        f" names {rule['resourceNames']}" if rule.get("resourceNames") else ""
    )
