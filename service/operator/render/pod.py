"""What every seedrl pod has, learner or actor: one locked-down container with its resources,
volumes, mounts, environment and probes, and where the pod may run (its accelerator's nodes,
Spot or not, the user's placement)."""

from __future__ import annotations

import copy
from typing import Any, Mapping

from seedrl.common.config import Experiment, PlacementConfig, TolerationConfig, tpu_chips
from seedrl.service.operator.render.common import (
    CONFIG_DIR,
    CONFIG_FILE,
    GPU_RESOURCE,
    LABEL_SPOT,
    RUN_AS,
    RUN_DIR,
    TPU_RESOURCE,
    names,
)
from seedrl.service.operator.render.volume import needs_run_volume, run_volume_claim


def actors_command(*args: str) -> list[str]:
    """The command of a container that runs the actor image's code on the Experiment the pod
    mounts (an actor, or the learner pod's env-spec init container), with ``args`` after it."""
    return ["python", "-m", "seedrl.actors", "--config", CONFIG_FILE, *args]


def container_security_context() -> dict[str, Any]:
    """A container's security context: non-root, no privilege escalation, a read-only root
    filesystem, no capabilities, the runtime's default seccomp profile."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """A pod's security context: non-root, as :data:`RUN_AS` (the volumes' group too)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_resources(res, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A container's requests and limits from a role's resources (memory limited to what it
    requests), with ``extra`` (an accelerator) requested and limited alike."""
    requests: dict[str, Any] = {"cpu": res.cpu, "memory": res.memory}
    limits: dict[str, Any] = {"memory": res.memory}
    if res.cpu_limit:
        limits["cpu"] = res.cpu_limit
    if res.ephemeral_storage:
        requests["ephemeral-storage"] = limits["ephemeral-storage"] = res.ephemeral_storage
    for key, value in (extra or {}).items():
        requests[key] = limits[key] = value
    return {"requests": requests, "limits": limits}


def pod_volumes(exp: Experiment, role: str = "actor") -> list[dict[str, Any]]:
    """A pod's volumes: the config, the run directory (the learner's claim when
    :func:`~seedrl.service.operator.render.volume.needs_run_volume`, else an emptyDir) and /tmp."""
    n = names(exp.metadata.name)
    run: dict[str, Any] = {"emptyDir": {}}
    if role == "learner" and needs_run_volume(exp):
        run = {"persistentVolumeClaim": {"claimName": run_volume_claim(exp)}}
    return [
        {"name": "config", "configMap": {"name": n.config}},
        {"name": "run", **run},
        {"name": "tmp", "emptyDir": {}},
    ]


def container_mounts() -> list[dict[str, Any]]:
    """Where a container mounts :func:`pod_volumes`: the config read-only."""
    return [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]


def container_env(exp: Experiment) -> list[dict[str, Any]]:
    """A container's environment: the Experiment's and the pod's names, HOME and unbuffered
    output."""
    return [
        {"name": "SEEDRL_EXPERIMENT", "value": exp.metadata.name},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # The root filesystem is read-only: caches (TensorFlow, matplotlib) go to /tmp.
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def accelerator_placement(
    exp: Experiment,
) -> tuple[dict[str, str], list[dict[str, Any]], dict[str, Any]]:
    """Node selector, tolerations and extra resources for the learner's accelerator."""
    acc = exp.spec.learner.accelerator
    if acc.kind == "tpu":
        return (
            {
                "cloud.google.com/gke-tpu-accelerator": acc.tpu.type,
                "cloud.google.com/gke-tpu-topology": acc.tpu.topology,
            },
            [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            {TPU_RESOURCE: str(tpu_chips(acc.tpu.topology))},
        )
    if acc.kind == "gpu":
        return (
            {"cloud.google.com/gke-accelerator": acc.gpu.type},
            [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            {GPU_RESOURCE: str(acc.gpu.count)},
        )
    return {}, [], {}


def base_pod_spec(
    exp: Experiment,
    container: dict[str, Any],
    restart_policy: str,
    grace_seconds: int,
    role: str = "actor",
) -> dict[str, Any]:
    """What every seedrl pod has: one locked-down container, no API token, no service links.
    The learner runs as ``spec.serviceAccountName``, the actors as
    ``spec.actors.serviceAccountName``: never the learner's, whose cloud credentials
    (Workload Identity) reach the checkpoints."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace_seconds,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": pod_volumes(exp, role),
    }
    account = (
        exp.spec.service_account_name if role == "learner" else exp.spec.actors.service_account_name
    )
    if account:
        pod_spec["serviceAccountName"] = account
    return pod_spec


#: Seconds the startup probe gives a slow start (TensorFlow's import, a checkpoint restore)
#: before liveness counts.
STARTUP_SECONDS = 300


def probes(port: str, ready_path: str, period: int = 5) -> dict[str, Any]:
    """Probes on a seedrl process's HTTP endpoint (:mod:`seedrl.common.metrics_http`):
    ``/healthz`` answers while the process serves; ``ready_path`` once it does its work. The
    startup probe gives a slow start :data:`STARTUP_SECONDS` before liveness counts; liveness
    then restarts a process whose endpoint stops answering for two minutes.

    ``period``: seconds between startup and readiness probes, so how long a process may do
    its work before it is ready (in its Service's endpoints) in the worst case.
    """
    return {
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": STARTUP_SECONDS // period,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": ready_path, "port": port},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }


def toleration(tol: TolerationConfig) -> dict[str, Any]:
    """A toleration as a pod spec holds it (empty parts left out)."""
    out: dict[str, Any] = {"operator": tol.operator}
    for key, value in (("key", tol.key), ("value", tol.value), ("effect", tol.effect)):
        if value:
            out[key] = value
    if tol.toleration_seconds is not None:
        out["tolerationSeconds"] = tol.toleration_seconds
    return out


def _and_node_terms(ours: list[dict], theirs: list[dict]) -> list[dict]:
    """Required node affinity that holds where both hold: terms are ORed, a term's
    expressions ANDed ("Assigning Pods to Nodes"), so each of ``theirs`` gets ours added
    (one of ``ours`` at most: the operator renders a single term)."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    (mine,) = ours
    return [
        {
            **term,
            "matchExpressions": [
                *(term.get("matchExpressions") or []),
                *mine.get("matchExpressions", []),
            ],
        }
        for term in theirs
    ]


def apply_placement(
    placement: PlacementConfig,
    pod_spec: dict[str, Any],
    node_selector: Mapping[str, str],
    tolerations: list[dict[str, Any]],
    node_terms: list[dict[str, Any]],
) -> None:
    """Puts a role's placement on its pod spec, in place, merged with the operator's own
    ``node_selector`` (wins on a shared key), ``tolerations`` (first) and required
    ``node_terms`` (added to every term of the user's)."""
    selector = {**placement.node_selector, **node_selector}
    if selector:
        pod_spec["nodeSelector"] = selector
    merged = [*tolerations, *(toleration(t) for t in placement.tolerations)]
    if merged:
        pod_spec["tolerations"] = merged
    affinity = copy.deepcopy(placement.affinity)
    node = affinity.get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = _and_node_terms(node_terms, list(required.get("nodeSelectorTerms") or []))
    if terms:
        affinity["nodeAffinity"] = {
            **node,
            "requiredDuringSchedulingIgnoredDuringExecution": {
                **required,
                "nodeSelectorTerms": terms,
            },
        }
    if affinity:
        pod_spec["affinity"] = affinity
    if placement.priority_class_name:
        pod_spec["priorityClassName"] = placement.priority_class_name
    if placement.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in placement.image_pull_secrets]


SPOT_TOLERATION = {"key": LABEL_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
