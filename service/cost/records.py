"""Pod records: what each pod (or local process) requested and the intervals it ran.

- A :class:`PodRecord` is one pod with its role (``learner`` or ``actor``), what it requested
  (:class:`Resources`), whether it ran on Spot capacity, and the wall-clock intervals it ran. A
  pod restarted as a new pod is a new record; a container restarted inside a pod does not stop
  the bill (GKE keeps the pod's resources reserved), so it stays one interval.
- A suspended Experiment has no pods, so its suspended time costs nothing: cost accrues only
  inside the intervals of the records.
- :func:`pod_record` reads a Kubernetes pod object (a dict as the API returns it); the operator
  keeps the records of pods that are gone (:meth:`PodRecord.to_dict`, whose keys and schema are
  :class:`StoredRecord`'s) and merges them with the live ones (:func:`merge_records`).
- :func:`rendered_machines` reads the pods :func:`seedrl.service.operator.render.render`
  makes of an Experiment, so that a local run (:func:`local_records`) and the planner price
  exactly what the cluster would run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

from seedrl.common.config import Experiment, param, parse_document, to_document
from seedrl.common.quantity import cpu_cores, memory_gib, parse_quantity
from seedrl.service.operator import render
from seedrl.service.operator.render.common import (
    ENV_SPEC_ROLE,
    GPU_RESOURCE,
    LABEL_ROLE,
    TPU_RESOURCE,
)

#: Roles a record can have; the report's breakdown is keyed by them.
ROLES = ("learner", "actor")
#: GKE's TPU node-label values -> price-table keys.
TPU_ACCELERATORS = {
    "tpu-v4-podslice": "v4",
    "tpu-v5-lite-podslice": "v5e",
    "tpu-v5-lite-device": "v5e",
    "tpu-v5p-slice": "v5p",
    "tpu-v6e-slice": "v6e",
}
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
GPU_LABEL = "cloud.google.com/gke-accelerator"
SPOT_LABELS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
#: Pod labels that may carry the role, first found wins.
ROLE_LABELS = (LABEL_ROLE, "app.kubernetes.io/component")


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one pod requested.

    Attributes:
      cpu: vCPUs.
      memory_gib: GiB of memory.
      accelerator: ``"tpu"``, ``"gpu"`` or None.
      accelerator_type: the price-table key (``"v5e"``, ``"nvidia-l4"``); "" without one.
      accelerator_count: chips or GPUs on this pod.
    """

    cpu: float
    memory_gib: float
    accelerator: str | None = None
    accelerator_type: str = ""
    accelerator_count: int = 0

    def describe(self) -> str:
        """``"8 x tpu v5e, 4 vCPU/16 GiB"``."""
        parts = []
        if self.accelerator and self.accelerator_count:
            parts.append(f"{self.accelerator_count} x {self.accelerator} {self.accelerator_type}, ")
        else:
            parts.append("cpu ")
        parts.append(f"{self.cpu:g} vCPU/{self.memory_gib:g} GiB")
        return "".join(parts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredRecord:
    """A pod record as stored (``status.costRecords`` in a cluster, ``cost.json`` locally)."""

    name: str = param(doc="The pod's uid (or name), or a local process's name@session.")
    role: str = param(doc="learner or actor.", choices=ROLES)
    spot: bool = param(False, "Whether the pod ran on Spot capacity.")
    cpu: float = param(0.0, "vCPUs requested.", ge=0.0)
    memory_gib: float = param(0.0, "GiB of memory requested.", ge=0.0)
    accelerator: Optional[str] = param(None, "tpu, gpu or null.")
    accelerator_type: str = param("", "The price-table key of the accelerator (v5e, ...).")
    accelerator_count: int = param(0, "Chips or GPUs requested.", ge=0)
    intervals: list[list[Optional[float]]] = param(
        doc="[start, end] in Unix seconds of each interval the pod ran; end null while it runs.",
        factory=list,
    )
    pods: int = param(1, "Pods a compacted record stands for.", ge=0)
    seconds: float = param(0.0, "Their summed running time.", ge=0.0)


@dataclasses.dataclass(frozen=True)
class PodRecord:
    """One pod (or local process) and the intervals it ran, in Unix seconds.

    ``end`` None means still running: priced up to the report's ``now``.
    """

    name: str
    role: str
    resources: Resources
    spot: bool
    intervals: tuple[tuple[float, float | None], ...]

    #: A compacted record (:func:`compact_records`) stands for this many pods that are gone...
    pods: int = 1
    #: ...which ran this many seconds together (besides ``intervals``).
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """Plain data (for status fields and cost.json); :func:`record_from_dict` reverses it.
        A record of one pod leaves out ``pods`` and ``seconds`` (the stored history stays
        small)."""
        r = self.resources
        out = to_document(
            StoredRecord(
                name=self.name,
                role=self.role,
                spot=self.spot,
                cpu=r.cpu,
                memory_gib=r.memory_gib,
                accelerator=r.accelerator,
                accelerator_type=r.accelerator_type,
                accelerator_count=r.accelerator_count,
                intervals=[[s, e] for s, e in self.intervals],
                pods=self.pods,
                seconds=self.seconds,
            )
        )
        if self.pods == 1 and not self.seconds:
            del out["pods"], out["seconds"]
        return out


def record_from_dict(data: Mapping[str, Any]) -> PodRecord:
    """A record from :meth:`PodRecord.to_dict`'s output.

    Raises:
      ConfigError: naming the bad field of a malformed stored record.
    """
    doc = parse_document(StoredRecord, dict(data), "record")
    return PodRecord(
        name=doc.name,
        role=doc.role,
        spot=doc.spot,
        resources=Resources(
            cpu=doc.cpu,
            memory_gib=doc.memory_gib,
            accelerator=doc.accelerator,
            accelerator_type=doc.accelerator_type,
            accelerator_count=doc.accelerator_count,
        ),
        intervals=tuple(
            (float(s), None if e is None else float(e))
            for s, e, *_ in doc.intervals
            if s is not None
        ),
        pods=doc.pods,
        seconds=doc.seconds,
    )


#: Records of pods that are gone kept one by one (the most recent); older ones are folded into
#: one record per role and machine (:func:`compact_records`), so that the stored history stays
#: bounded however many pods an Experiment goes through (an Experiment object is limited to
#: 1.5 MiB by etcd).
KEEP_GONE_RECORDS = 50
#: Name prefix of a compacted record.
COMPACTED = "gone:"


def compact_records(
    records: Sequence[PodRecord], listed: Iterable[str], keep: int = KEEP_GONE_RECORDS
) -> list[PodRecord]:
    """Folds the records of pods that are gone into one record per role, Spot and machine:
    the pods' count and summed running time, which price the same.

    A record is folded only when its pod is no longer listed (``listed``: the names of the pods
    seen now; a listed pod's record is rewritten at every observation) and every interval of
    it is closed; the ``keep`` most recently ended ones stay as they are.
    """
    listed = set(listed)
    gone = [
        r
        for r in records
        if not r.name.startswith(COMPACTED)
        and r.name not in listed
        and r.intervals
        and all(e is not None for _, e in r.intervals)
    ]
    gone.sort(key=lambda r: max(e or 0.0 for _, e in r.intervals), reverse=True)
    fold = {id(r) for r in gone[keep:]}
    if not fold:
        return list(records)
    out: list[PodRecord] = []
    folded: dict[str, PodRecord] = {}
    for rec in records:
        if id(rec) not in fold and not rec.name.startswith(COMPACTED):
            out.append(rec)
            continue
        res = rec.resources
        key = (
            f"{COMPACTED}{rec.role}:{'spot' if rec.spot else 'on-demand'}:{res.cpu:g}:"
            f"{res.memory_gib:g}:{res.accelerator or ''}:{res.accelerator_type}:"
            f"{res.accelerator_count}"
        )
        seconds = rec.seconds + union_seconds(rec.intervals, 0.0)
        pods = rec.pods
        if key in folded:
            seconds += folded[key].seconds
            pods += folded[key].pods
        folded[key] = PodRecord(
            name=key,
            role=rec.role,
            resources=res,
            spot=rec.spot,
            intervals=(),
            pods=pods,
            seconds=seconds,
        )
    return out + list(folded.values())


def merge_records(
    previous: Iterable[PodRecord], current: Iterable[PodRecord], now: float | None = None
) -> list[PodRecord]:
    """The history after a new observation of an Experiment's pods.

    A pod in ``current`` replaces its earlier record (its intervals are newer). A pod only in
    ``previous`` is gone (deleted, replaced, or its Experiment suspended): its record stays,
    and an interval still open is closed at ``now`` (the observation that found it gone), if
    given; the operator should rather price a pod's final object from its DELETED event.
    """
    by_name = {r.name: r for r in previous}
    live = {r.name: r for r in current}
    for name, record in by_name.items():
        if name not in live and now is not None and any(e is None for _, e in record.intervals):
            by_name[name] = dataclasses.replace(
                record, intervals=tuple((s, now if e is None else e) for s, e in record.intervals)
            )
    by_name.update(live)
    return list(by_name.values())


def union_seconds(intervals: Sequence[tuple[float, float | None]], now: float) -> float:
    """Seconds covered by the intervals, overlaps counted once, open ones ending at ``now``."""
    spans = sorted((s, now if e is None else e) for s, e in intervals)
    total, cur_start, cur_end = 0.0, 0.0, None
    for start, end in spans:
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


# --------------------------------------------------------------------------------------------
# Kubernetes pods -> records
# --------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return stamp.timestamp()
    text = str(value).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text).timestamp()


def _node_labels(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """nodeSelector entries and required node-affinity ``In`` terms, as label -> values."""
    labels = {k: [str(v)] for k, v in (spec.get("nodeSelector") or {}).items()}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In":
                labels.setdefault(expr.get("key"), []).extend(map(str, expr.get("values") or []))
    return labels


def _requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's effective requests: Kubernetes copies a limit into a missing request."""
    res = container.get("resources") or {}
    out = dict(res.get("limits") or {})
    out.update(res.get("requests") or {})
    return out


def _pod_requests(spec: Mapping[str, Any], name: str, convert: Callable[[Any], float]) -> float:
    """The pod's request of one resource: the larger of the sum over its containers and the
    largest init container (init containers run before the others, one at a time)."""
    total = sum(
        convert(_requests(c)[name]) for c in spec.get("containers") or [] if name in _requests(c)
    )
    init = [
        convert(_requests(c)[name])
        for c in spec.get("initContainers") or []
        if name in _requests(c)
    ]
    return max([total, *init])


def machine_of(spec: Mapping[str, Any], pod: str = "pod") -> tuple[Resources, bool]:
    """What a pod spec requests, and whether it asks for Spot capacity.

    - resources: requests (limits where a request is missing) summed over containers;
      ``google.com/tpu`` chips with the type from the ``cloud.google.com/gke-tpu-accelerator``
      node selector, or ``nvidia.com/gpu`` with ``cloud.google.com/gke-accelerator``.
    - Spot: a ``cloud.google.com/gke-spot`` (or ``gke-preemptible``) ``"true"`` node selector
      or required node-affinity term.

    Raises:
      ValueError: a bad quantity, or an accelerator without its type label (naming ``pod``).
    """
    node = _node_labels(spec)
    accelerator, acc_type, count = None, "", 0
    chips = _pod_requests(spec, TPU_RESOURCE, parse_quantity)
    gpus = _pod_requests(spec, GPU_RESOURCE, parse_quantity)
    if chips:
        label = next(iter(node.get(TPU_LABEL) or []), None)
        if label is None:
            raise ValueError(
                f"pod {pod}: requests {TPU_RESOURCE} without a {TPU_LABEL} node selector"
            )
        accelerator, acc_type, count = "tpu", TPU_ACCELERATORS.get(label, label), int(chips)
    elif gpus:
        label = next(iter(node.get(GPU_LABEL) or []), None)
        if label is None:
            raise ValueError(
                f"pod {pod}: requests {GPU_RESOURCE} without a {GPU_LABEL} node selector"
            )
        accelerator, acc_type, count = "gpu", label, int(gpus)
    spot = any("true" in [v.lower() for v in node.get(k, [])] for k in SPOT_LABELS)
    resources = Resources(
        cpu=_pod_requests(spec, "cpu", cpu_cores),
        memory_gib=_pod_requests(spec, "memory", memory_gib),
        accelerator=accelerator,
        accelerator_type=acc_type,
        accelerator_count=count,
    )
    return resources, spot


def pod_record(pod: Mapping[str, Any], role: str | None = None) -> PodRecord:
    """The record of a Kubernetes pod object (a dict as the API returns it).

    - role: the argument, else the pod label ``seedrl.dev/role`` or
      ``app.kubernetes.io/component`` (``actors`` counts as ``actor``, and so does the
      env-spec Job's pod, which runs the actor image as an actor).
    - resources and Spot: :func:`machine_of` its spec.
    - interval: from ``status.startTime`` (the kubelet took the pod; GKE bills from there,
      image pulls included) to the last container's ``finishedAt`` once the pod has
      Succeeded or Failed, else to ``metadata.deletionTimestamp`` once it is being deleted
      (its grace period is not priced); open while it runs. Container restarts inside the pod
      do not interrupt it. A pod never started has no interval.

    Raises:
      ValueError: an unknown role, a bad quantity, or an accelerator without its type label.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    name = meta.get("uid") or meta.get("name") or "pod"
    if role is None:
        labels = meta.get("labels") or {}
        role = next((labels[k] for k in ROLE_LABELS if k in labels), None)
    role = "actor" if role in ("actors", ENV_SPEC_ROLE) else role
    if role not in ROLES:
        raise ValueError(
            f"pod {meta.get('name')}: cannot tell its role (learner or actor) "
            f"from labels {', '.join(ROLE_LABELS)}; got {role!r}"
        )
    resources, spot = machine_of(spec, meta.get("name") or name)
    start = _parse_time(status.get("startTime"))
    intervals: tuple[tuple[float, float | None], ...] = ()
    if start is not None:
        end = None
        if status.get("phase") in ("Succeeded", "Failed"):
            finished = [
                _parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for cs in status.get("containerStatuses") or []
            ]
            ends = [f for f in finished if f is not None]
            end = max(ends) if ends else start
        elif meta.get("deletionTimestamp"):
            end = _parse_time(meta["deletionTimestamp"])
        intervals = ((start, max(start, end) if end is not None else None),)
    return PodRecord(name=name, role=role, resources=resources, spot=spot, intervals=intervals)


def rendered_machines(exp: Experiment) -> dict[str, tuple[Resources, bool]]:
    """Per role, what one pod of ``exp`` requests in a cluster and whether it runs on Spot:
    :func:`machine_of` the pod templates :func:`seedrl.service.operator.render.render`
    makes (the learner Job's, the actor Deployment's)."""
    out = {}
    for obj in render.render(exp):
        template = (obj.get("spec") or {}).get("template")
        if template:
            role = template["metadata"]["labels"][LABEL_ROLE]
            out[role] = machine_of(template["spec"], obj["metadata"]["name"])
    return out


def local_records(
    exp: Experiment,
    processes: Iterable[tuple[str, str, Sequence[tuple[float, float]]]],
) -> list[PodRecord]:
    """Records for local processes priced as the cluster pods they stand for.

    Args:
      exp: the Experiment (its pods: :func:`rendered_machines`).
      processes: ``(name, role, intervals)`` per process, intervals in Unix seconds.
    """
    machines = rendered_machines(exp)
    return [
        PodRecord(
            name=name,
            role=role,
            resources=machines[role][0],
            spot=machines[role][1],
            intervals=tuple(intervals),
        )
        for name, role, intervals in processes
    ]
