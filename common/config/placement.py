"""A role's pods in a cluster, learner and actors alike: their containers' resources
(:class:`ResourcesConfig`) and where they may run (:class:`PlacementConfig`: node selectors,
tolerations, affinity, priority), with :func:`placement_problems` for what the field types
cannot say.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from seedrl.common.config.fields import DNS_LABEL, QUANTITY_PATTERN, QUANTITY_HINT, param


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourcesConfig:
    """Compute resources of one pod's container in a cluster (Kubernetes quantities); the local
    launcher ignores them. Memory is requested and limited alike (a pod that outgrows it is
    stopped rather than starving its neighbours); CPU is limited only when cpuLimit is set."""

    cpu: str = param(
        "1",
        "CPU request, e.g. '500m' or '4'.",
        pattern=QUANTITY_PATTERN,
        pattern_hint=QUANTITY_HINT,
        max_len=32,
    )
    memory: str = param(
        "2Gi",
        "Memory request and limit, e.g. '16Gi'.",
        pattern=QUANTITY_PATTERN,
        pattern_hint=QUANTITY_HINT,
        max_len=32,
    )
    cpu_limit: str = param(
        "",
        "CPU limit; empty sets none, so the container may use idle cores.",
        pattern=f"({QUANTITY_PATTERN})?",
        pattern_hint=QUANTITY_HINT,
        max_len=32,
    )
    ephemeral_storage: str = param(
        "",
        "Ephemeral storage request and limit (logs, scratch). Empty: none for actors; the "
        "learner requests what one checkpoint stages in its /tmp before publishing it (2 GiB, "
        "plus R2D2's replayCheckpointMaxGb; not when queued through Kueue) and its /tmp is "
        "bounded at that.",
        pattern=f"({QUANTITY_PATTERN})?",
        pattern_hint=QUANTITY_HINT,
        max_len=32,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TolerationConfig:
    """One Kubernetes toleration of a role's pods (``spec.learner.placement.tolerations[]``,
    ``spec.actors.placement.tolerations[]``): the pods may run on nodes with a matching taint.
    """

    key: str = param(
        "",
        "The taint key; empty with operator Exists tolerates every taint.",
        pattern=r"([A-Za-z0-9][-A-Za-z0-9_./]*)?",
        pattern_hint="a label key such as team or example.com/dedicated",
        max_len=316,
    )
    operator: str = param(
        "Equal", "Equal (the taint's value must be value) or Exists.", choices=("Equal", "Exists")
    )
    value: str = param("", "The taint value, with operator Equal.", max_len=63)
    effect: str = param(
        "",
        "The taint effect to tolerate: NoSchedule, PreferNoSchedule, NoExecute; empty: all.",
        choices=("", "NoSchedule", "PreferNoSchedule", "NoExecute"),
    )
    toleration_seconds: Optional[int] = param(
        None,
        "With effect NoExecute: how long the pod stays once the taint appears; null: forever.",
        ge=0,
    )


#: The keys of a pod's ``affinity`` (``spec.*.placement.affinity``).
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlacementConfig:
    """Where a role's pods may run in a cluster (``spec.learner.placement``,
    ``spec.actors.placement``), merged with what the operator adds itself: its node selectors
    (TPU and GPU labels, Spot) win over yours on the same key, its tolerations come first, and
    its required node affinity (the learner kept off Spot and preemptible nodes) is added to
    every term of yours. The local launcher ignores it."""

    node_selector: dict[str, str] = param(
        doc="Node labels the pods require, e.g. {cloud.google.com/gke-nodepool: rl-pool}.",
        factory=dict,
    )
    tolerations: list[TolerationConfig] = param(
        doc="Taints the pods tolerate (team-tainted pools, reservations).", factory=list
    )
    affinity: dict[str, Any] = param(
        doc="A Kubernetes Affinity (nodeAffinity, podAffinity, podAntiAffinity), as in a pod spec.",
        factory=dict,
    )
    priority_class_name: str = param(
        "",
        "PriorityClass of the pods; empty uses the cluster's default.",
        pattern=f"({DNS_LABEL}(\\.{DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    image_pull_secrets: list[str] = param(
        doc="Names of Secrets in the Experiment's namespace to pull the images with.",
        factory=list,
        pattern=f"{DNS_LABEL}(\\.{DNS_LABEL})*",
        pattern_hint="a Secret name (a DNS subdomain)",
        max_len=253,
    )


def placement_problems(placement: PlacementConfig, path: str) -> list[tuple[str, str]]:
    """What is wrong with one role's placement that its field types cannot say: the
    affinity's keys, and tolerations whose parts contradict each other."""
    problems = []
    for key in placement.affinity:
        if key not in AFFINITY_KEYS:
            problems.append(
                (f"{path}.affinity.{key}", f"unknown field; known: {', '.join(AFFINITY_KEYS)}")
            )
        elif not isinstance(placement.affinity[key], dict):
            problems.append((f"{path}.affinity.{key}", "must be a mapping"))
    for i, tol in enumerate(placement.tolerations):
        where = f"{path}.tolerations[{i}]"
        if tol.operator == "Exists" and tol.value:
            problems.append((f"{where}.value", "must be empty with operator Exists"))
        if not tol.key and tol.operator != "Exists":
            problems.append((f"{where}.operator", "must be Exists when key is empty"))
        if tol.toleration_seconds is not None and tol.effect != "NoExecute":
            problems.append((f"{where}.tolerationSeconds", "needs effect NoExecute"))
    return problems
