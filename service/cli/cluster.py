"""Experiments in a cluster, for the ``seedrl status`` and ``seedrl submit`` commands.

Everything goes through the official ``kubernetes`` client, from
:func:`seedrl.service.kube.api_client` (its docstring says which credentials win).
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Sequence
from typing import Any, Mapping, Optional, cast

import kubernetes

from seedrl.common.config import GROUP, PLURAL, VERSION, AgentConfig, EnvConfig, Experiment
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.operator.render.common import names
from seedrl.service.operator.render.volume import run_volume_claim

FIELD_MANAGER = "seedrl-cli"
APPLY = "application/apply-patch+yaml"


def list_experiments(
    client: kubernetes.client.ApiClient, namespace: str | None
) -> list[dict[str, Any]]:
    """The Experiments in one namespace (all namespaces if None), sorted by namespace, name."""
    api = kubernetes.client.CustomObjectsApi(client)
    if namespace is None:
        response = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, _preload_content=False)
    else:
        response = api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _preload_content=False
        )
    items = json.loads(cast(Any, response).data).get("items") or []
    return sorted(
        items, key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"])
    )


def apply_experiment(
    client: kubernetes.client.ApiClient,
    document: Mapping[str, Any],
    namespace: str,
    force_conflicts: bool = False,
) -> dict[str, Any]:
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
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        body["metadata"]["name"],
        body,
        field_manager=FIELD_MANAGER,
        force=force_conflicts,
        _content_type=APPLY,
        _preload_content=False,
    )
    return json.loads(cast(Any, response).data)


def checkpoint_notice(exp: Experiment, namespace: str) -> str | None:
    """What ``seedrl submit`` tells about where the checkpoints of ``exp`` go in the cluster
    when ``spec.checkpoint.uri`` is empty, or None when it is set.

    The operator then gives the learner a PersistentVolumeClaim of its own
    (:func:`seedrl.service.operator.render.volume.render_run_volume`): a replaced learner pod
    resumes from it, and with ``volumeRetention: Retain`` (the default) it carries no owner
    reference, so it outlives the Experiment and has to be deleted on purpose. Saying so, with
    the claim's name, is what keeps a user from either paying for forgotten disks or deleting
    checkpoints they meant to keep."""
    checkpoint = exp.spec.checkpoint
    if checkpoint.uri:
        return None
    claim = run_volume_claim(exp)
    storage = checkpoint.volume_storage_class_name or "the cluster's default StorageClass"
    lines = [
        f"note: spec.checkpoint.uri is empty: the learner checkpoints onto the "
        f"PersistentVolumeClaim {claim} ({checkpoint.volume_size}, {storage}) in namespace "
        f"{namespace}, which a replaced learner pod (preemption, node loss) resumes from.",
    ]
    if checkpoint.volume_retention == "Retain":
        lines.append(
            "It is kept when the Experiment is deleted (kubectl delete experiment, helm "
            "uninstall); a later Experiment resumes from it only by naming it in "
            "spec.checkpoint.resumeFrom. `seedrl volumes` lists kept ones; delete it, and the "
            f"checkpoints, on purpose with `seedrl volumes delete {claim} -n {namespace}`."
        )
    else:
        lines.append(
            "spec.checkpoint.volumeRetention is Delete: it is deleted, checkpoints and all, "
            "with the Experiment."
        )
    lines.append("Set spec.checkpoint.uri to gs://bucket/prefix to keep them in Cloud Storage.")
    return "\n".join(lines)


def _age(created: str | None, now: datetime.datetime) -> str:
    if not created:
        return "-"
    try:
        then = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc
        )
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


def status_rows(
    items: Sequence[Mapping[str, Any]],
    now: datetime.datetime | None = None,
    with_namespace: bool = False,
) -> list[list[str]]:
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
        valid = next((c for c in status.get("conditions") or [] if c.get("type") == "Valid"), None)
        if valid and valid.get("status") == "False":
            phase = f"{phase} ({valid.get('reason')})"
        row = [
            meta.get("name", "?"),
            phase,
            (spec.get("agent") or {}).get("name", AgentConfig().name),
            (spec.get("env") or {}).get("id", EnvConfig().id),
            f"{actors.get('ready', 0)}/{desired}",
            _count(learner.env_steps) if learner else "-",
            "-" if mean is None else f"{mean:.1f}",
            "-" if cost is None else f"${cost:,.2f}",
            _age(meta.get("creationTimestamp"), now),
        ]
        if with_namespace:
            row.insert(0, meta.get("namespace") or "")
        rows.append(row)
    return rows


def format_table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return (
        "\n".join(
            "   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows
        )
        + "\n"
    )


def get_experiment(
    client: kubernetes.client.ApiClient, namespace: str, name: str
) -> dict[str, Any]:
    """One Experiment as the cluster stores it (status included)."""
    api = kubernetes.client.CustomObjectsApi(client)
    response = api.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
    )
    return json.loads(cast(Any, response).data)


def checkpoint_location(obj: Mapping[str, Any]) -> str:
    """Where ``seedrl eval`` and ``seedrl export`` find an Experiment's policy from outside the
    cluster: the checkpoint its status reports (``lastCheckpoint``), else the newest in
    ``spec.checkpoint.uri`` before the learner has reported one.

    Raises:
      ValueError: the checkpoints are on the learner's PersistentVolumeClaim (no
        ``spec.checkpoint.uri``), which only pods in the cluster can read.
    """
    name = obj["metadata"]["name"]
    uri = ((obj.get("spec") or {}).get("checkpoint") or {}).get("uri") or ""
    if not uri:
        claim = names(name).run_volume
        raise ValueError(
            f"experiment {name} checkpoints onto its PersistentVolumeClaim {claim}, which only "
            f"the cluster can read; set spec.checkpoint.uri to gs://bucket/prefix to evaluate "
            f"or export it from here"
        )
    learner = LearnerStatus.from_experiment_status(obj.get("status") or {})
    last = learner.last_checkpoint if learner else None
    return last if last and "://" in last else uri


def api_error(exc: Exception) -> str:
    """The API server's message for a failed request, else the exception itself."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message") or str(body)
        except (ValueError, AttributeError):
            return str(body)
    return str(exc)
