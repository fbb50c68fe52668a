"""Experiments in a cluster, for the ``seedrl status`` and ``seedrl submit`` commands.

Everything goes through the official ``kubernetes`` client: a kubeconfig (``--kubeconfig``,
``$KUBECONFIG`` or ``~/.kube/config``, optionally a ``--context``) or, inside a pod, its service
account.
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any, Mapping, Optional

import kubernetes

from seedrl.common.config import GROUP, PLURAL, VERSION
from seedrl.common.learner_status import LearnerStatus

FIELD_MANAGER = "seedrl-cli"
APPLY = "application/apply-patch+yaml"


def api_client(kubeconfig: str | None = None, context: str | None = None
               ) -> kubernetes.client.ApiClient:
    """A client for the cluster the kubeconfig (or, with none, the pod's account) points at."""
    if kubeconfig is None and context is None:
        try:
            kubernetes.config.load_incluster_config()
            return kubernetes.client.ApiClient()
        except kubernetes.config.ConfigException:
            pass
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig, context=context,
                                       client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


def default_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's current (or given) context; ``default`` if none."""
    try:
        contexts, current = kubernetes.config.list_kube_config_contexts(kubeconfig)
    except (kubernetes.config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"


def list_experiments(client: kubernetes.client.ApiClient, namespace: str | None
                     ) -> list[dict[str, Any]]:
    """The Experiments in one namespace (all namespaces if None), sorted by namespace, name."""
    api = kubernetes.client.CustomObjectsApi(client)
    if namespace is None:
        response = api.list_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                  _preload_content=False)
    else:
        response = api.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                     PLURAL, _preload_content=False)
    items = json.loads(response.data).get("items") or []
    return sorted(items, key=lambda o: (o["metadata"].get("namespace") or "",
                                        o["metadata"]["name"]))


def apply_experiment(client: kubernetes.client.ApiClient, document: Mapping[str, Any],
                     namespace: str, force_conflicts: bool = False) -> dict[str, Any]:
    """Server-side applies an Experiment document (created, or updated to this content).

    Args:
      client: the cluster.
      document: the Experiment as written (already validated).
      namespace: where it goes; written into its metadata.
      force_conflicts: take over fields another manager (kubectl, an autoscaler) set.

    Returns:
      The Experiment as the cluster stored it.
    """
    body = copy.deepcopy(dict(document))
    body.setdefault("metadata", {})["namespace"] = namespace
    api = kubernetes.client.CustomObjectsApi(client)
    response = api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"], body,
        field_manager=FIELD_MANAGER, force=force_conflicts, _content_type=APPLY,
        _preload_content=False)
    return json.loads(response.data)


def _age(created: str | None, now: datetime.datetime) -> str:
    if not created:
        return "-"
    try:
        then = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _count(value: Optional[int]) -> str:
    if value is None:
        return "-"
    for suffix, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    return str(value)


def status_rows(items: list[Mapping[str, Any]], now: datetime.datetime | None = None,
                with_namespace: bool = False) -> list[list[str]]:
    """The table ``seedrl status`` prints: a header row, then one row per Experiment."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    header = ["NAME", "PHASE", "AGENT", "ENV", "ACTORS", "STEPS", "RETURN", "COST", "AGE"]
    if with_namespace:
        header.insert(0, "NAMESPACE")
    rows = [header]
    for obj in items:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        actors = status.get("actors") or {}
        desired = actors.get("desired", (spec.get("actors") or {}).get("replicas", "-"))
        try:
            learner = LearnerStatus.from_experiment_status(status)
        except ValueError:  # written by another operator version: show what is sure
            learner = None
        mean = learner.mean_return if learner else None
        cost = (status.get("cost") or {}).get("totalUsd")
        phase = status.get("phase") or "-"
        valid = next((c for c in status.get("conditions") or []
                      if c.get("type") == "Valid"), None)
        if valid and valid.get("status") == "False":
            phase = f"{phase} ({valid.get('reason')})"
        row = [meta.get("name", "?"), phase, (spec.get("agent") or {}).get("name", "vtrace"),
               (spec.get("env") or {}).get("id", "CartPole-v1"),
               f"{actors.get('ready', 0)}/{desired}",
               _count(learner.env_steps) if learner else "-",
               "-" if mean is None else f"{mean:.1f}",
               "-" if cost is None else f"${cost:,.2f}", _age(meta.get("creationTimestamp"), now)]
        if with_namespace:
            row.insert(0, meta.get("namespace") or "")
        rows.append(row)
    return rows


def format_table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows) + "\n"
