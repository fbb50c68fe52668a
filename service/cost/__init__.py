"""What an Experiment costs: a price table x the resources each pod requested x the time it ran.

Pure: no I/O except reading the price table. The operator, the local launcher and the planner
all price through :func:`compute_cost`:

- A :class:`PodRecord` is one pod (or one local process) with its role (``learner`` or
  ``actor``), what it requested (vCPUs, GiB of memory, accelerator type and count), whether it
  ran on Spot capacity, and the wall-clock intervals it ran. A pod restarted as a new pod is a
  new record; a container restarted inside a pod does not stop the bill (GKE keeps the pod's
  resources reserved), so it stays one interval.
- A suspended Experiment has no pods, so its suspended time costs nothing: cost accrues only
  inside the intervals of the records.
- :func:`pod_record` turns a Kubernetes pod object (a dict as the API returns it) into a record;
  the operator keeps the records of pods that are gone (:meth:`PodRecord.to_dict`) and merges
  them with the live ones (:func:`merge_records`).
- :func:`local_records` prices a local run "as if" on the machine types the Experiment asks
  for in a cluster (:func:`machine_for`).

Prices are hourly list prices per vCPU, per GiB of memory and per accelerator chip/GPU, on
demand or Spot (``service/cost/prices.yaml``, with its sources). That is how GKE Autopilot bills
pods; for GKE Standard it is each pod's share of its nodes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources as importlib_resources
from typing import Any

from seedrl.common.config import ConfigError, load_yaml, tpu_chips
from seedrl.common.quantity import cpu_cores, memory_gib, parse_quantity

#: Roles a record can have; the report's breakdown is keyed by them.
ROLES = ("learner", "actor")
#: Environment variable naming a price-table override file.
PRICES_ENV = "SEEDRL_PRICES"
#: File name of the table inside a directory (a mounted ConfigMap).
PRICES_FILE = "prices.yaml"

_SECONDS_PER_HOUR = 3600.0

# --------------------------------------------------------------------------------------------
# The price table
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Rate:
    """Hourly price of one unit, on demand and on Spot capacity."""

    on_demand: float
    spot: float

    def get(self, spot: bool) -> float:
        """The rate that applies."""
        return self.spot if spot else self.on_demand


@dataclasses.dataclass(frozen=True)
class PriceTable:
    """A versioned table of hourly prices for one region (see ``service/cost/prices.yaml``)."""

    version: str
    region: str
    taken_on: str
    currency: str
    cpu: Rate
    memory: Rate
    tpu: Mapping[str, Rate]
    gpu: Mapping[str, Rate]

    def accelerator_rate(self, kind: str, type_: str, spot: bool) -> float:
        """Price per chip/GPU-hour of an accelerator.

        Raises:
          KeyError: naming the accelerator when the table has no price for it.
        """
        table = self.tpu if kind == "tpu" else self.gpu
        if type_ not in table:
            raise KeyError(f"the price table {self.version} has no {kind} {type_!r} (known: "
                           f"{', '.join(sorted(table))}); add it with --prices FILE")
        return table[type_].get(spot)


def _default_document() -> dict:
    text = importlib_resources.files("seedrl.service.cost").joinpath(PRICES_FILE).read_text("utf-8")
    return load_yaml(text, "service/cost/prices.yaml")


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else value
        return out
    return override


_TOP_KEYS = ("version", "region", "takenOn", "currency", "cpu", "memory", "tpu", "gpu")


def _parse_rate(value: Any, path: str, problems: list[tuple[str, str]]) -> Rate | None:
    if not isinstance(value, dict):
        problems.append((path, f"must be a mapping with onDemand and spot, got {value!r}"))
        return None
    for key in value:
        if key not in ("onDemand", "spot"):
            problems.append((f"{path}.{key}", "unknown field; known fields: onDemand, spot"))
    numbers = {}
    for key in ("onDemand", "spot"):
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 \
                or v == float("inf"):
            problems.append((f"{path}.{key}", f"must be a number >= 0 (USD per hour), got "
                                              f"{v!r}" if key in value else
                                              "required field is missing"))
        else:
            numbers[key] = float(v)
    if len(numbers) != 2:
        return None
    if numbers["spot"] > numbers["onDemand"]:
        problems.append((f"{path}.spot", f"must not exceed onDemand ({numbers['onDemand']:g}), "
                                         f"got {numbers['spot']:g}"))
    return Rate(numbers["onDemand"], numbers["spot"])


def parse_prices(document: Any, source: str = "prices") -> PriceTable:
    """Validates a complete price-table document.

    Raises:
      ConfigError: naming each problem's field path, e.g. ``prices.gpu.nvidia-l4.spot: must
        be a number >= 0 (USD per hour), got 'cheap'``.
    """
    problems: list[tuple[str, str]] = []
    if not isinstance(document, dict):
        raise ConfigError([(source, f"must be a mapping, got {document!r}")])
    for key in document:
        if key not in _TOP_KEYS:
            problems.append((f"{source}.{key}", f"unknown field; known fields: "
                                                f"{', '.join(_TOP_KEYS)}"))
    for key in ("version", "region", "takenOn", "currency"):
        value = document.get(key)
        if isinstance(value, (dt.date, dt.datetime)):
            value = value.isoformat()
        if not isinstance(value, str) or not value.strip():
            problems.append((f"{source}.{key}", f"must be a non-empty string, got {value!r}"))
    if document.get("currency") not in (None, "USD") and isinstance(document.get("currency"), str):
        problems.append((f"{source}.currency", f"only USD is supported, got "
                                               f"{document['currency']!r}"))
    cpu = _parse_rate(document.get("cpu"), f"{source}.cpu", problems)
    memory = _parse_rate(document.get("memory"), f"{source}.memory", problems)
    tables = {}
    for kind in ("tpu", "gpu"):
        section = document.get(kind, {})
        if not isinstance(section, dict):
            problems.append((f"{source}.{kind}", f"must be a mapping of {kind} types to rates, "
                                                 f"got {section!r}"))
            continue
        tables[kind] = {str(name): _parse_rate(rate, f"{source}.{kind}.{name}", problems)
                        for name, rate in section.items()}
    if problems:
        raise ConfigError(problems)
    taken_on = document["takenOn"]
    return PriceTable(version=document["version"], region=document["region"],
                      taken_on=taken_on.isoformat() if isinstance(taken_on, dt.date)
                      else taken_on, currency=document["currency"], cpu=cpu, memory=memory,
                      tpu=tables["tpu"], gpu=tables["gpu"])


def load_prices(path: str | None = None, environ: Mapping[str, str] | None = None) -> PriceTable:
    """The price table: the packaged defaults, with an override merged over them.

    The override is ``path`` if given, else the file named by ``$SEEDRL_PRICES``; a directory
    (a mounted ConfigMap) means its ``prices.yaml``. An override must state its own
    ``version`` (it names the table in every report); any key it leaves out keeps the default.

    Raises:
      ConfigError: the override cannot be read or is invalid, with field paths.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get(PRICES_ENV) or None
    document = _default_document()
    if path is None:
        return parse_prices(document)
    if os.path.isdir(path):
        path = os.path.join(path, PRICES_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([(path, f"cannot read the price table: {exc.strerror}")]) from None
    override = load_yaml(text, path)
    if not isinstance(override, dict):
        raise ConfigError([("prices", f"{path} must hold a mapping, got {override!r}")])
    if "version" not in override:
        raise ConfigError([("prices.version", f"an override ({path}) must name its own "
                                              f"version, so reports say which table priced "
                                              f"them")])
    return parse_prices(_merge(document, override))


# --------------------------------------------------------------------------------------------
# Pod histories
# --------------------------------------------------------------------------------------------

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
            parts.append(f"{self.accelerator_count} x {self.accelerator} "
                         f"{self.accelerator_type}, ")
        else:
            parts.append("cpu ")
        parts.append(f"{self.cpu:g} vCPU/{self.memory_gib:g} GiB")
        return "".join(parts)


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
        """Plain data (for status fields and cost.json); :func:`record_from_dict` reverses it."""
        r = self.resources
        out = {"name": self.name, "role": self.role, "spot": self.spot,
               "cpu": r.cpu, "memoryGib": r.memory_gib, "accelerator": r.accelerator,
               "acceleratorType": r.accelerator_type, "acceleratorCount": r.accelerator_count,
               "intervals": [[s, e] for s, e in self.intervals]}
        if self.pods != 1 or self.seconds:
            out.update(pods=self.pods, seconds=self.seconds)
        return out


def record_from_dict(data: Mapping[str, Any]) -> PodRecord:
    """A record from :meth:`PodRecord.to_dict`'s output."""
    return PodRecord(
        name=str(data["name"]), role=str(data["role"]), spot=bool(data.get("spot", False)),
        resources=Resources(cpu=float(data.get("cpu", 0.0)),
                            memory_gib=float(data.get("memoryGib", 0.0)),
                            accelerator=data.get("accelerator"),
                            accelerator_type=data.get("acceleratorType") or "",
                            accelerator_count=int(data.get("acceleratorCount") or 0)),
        intervals=tuple((float(s), None if e is None else float(e))
                        for s, e in data.get("intervals", [])),
        pods=int(data.get("pods", 1)), seconds=float(data.get("seconds", 0.0)))


#: Records of pods that are gone kept one by one (the most recent); older ones are folded into
#: one record per role and machine (:func:`compact_records`), so that the stored history stays
#: bounded however many pods an Experiment goes through (an Experiment object is limited to
#: 1.5 MiB by etcd).
KEEP_GONE_RECORDS = 50
_COMPACTED = "gone:"


def compact_records(records: Sequence[PodRecord], listed: Iterable[str],
                    keep: int = KEEP_GONE_RECORDS) -> list[PodRecord]:
    """Folds the records of pods that are gone into one record per role, Spot and machine:
    the pods' count and summed running time, which price the same.

    A record is folded only when its pod is no longer listed (``listed``: the names of the pods
    seen now; a listed pod's record is rewritten at every observation) and every interval of
    it is closed; the ``keep`` most recently ended ones stay as they are.
    """
    listed = set(listed)
    gone = [r for r in records if not r.name.startswith(_COMPACTED) and r.name not in listed
            and r.intervals and all(e is not None for _, e in r.intervals)]
    gone.sort(key=lambda r: max(e for _, e in r.intervals), reverse=True)
    fold = {id(r) for r in gone[keep:]}
    if not fold:
        return list(records)
    out: list[PodRecord] = []
    folded: dict[str, PodRecord] = {}
    for rec in records:
        if id(rec) not in fold and not rec.name.startswith(_COMPACTED):
            out.append(rec)
            continue
        res = rec.resources
        key = (f"{_COMPACTED}{rec.role}:{'spot' if rec.spot else 'on-demand'}:{res.cpu:g}:"
               f"{res.memory_gib:g}:{res.accelerator or ''}:{res.accelerator_type}:"
               f"{res.accelerator_count}")
        seconds = rec.seconds + _union_seconds(rec.intervals, 0.0)
        pods = rec.pods
        if key in folded:
            seconds += folded[key].seconds
            pods += folded[key].pods
        folded[key] = PodRecord(name=key, role=rec.role, resources=res, spot=rec.spot,
                                intervals=(), pods=pods, seconds=seconds)
    return out + list(folded.values())


def merge_records(previous: Iterable[PodRecord], current: Iterable[PodRecord],
                  now: float | None = None) -> list[PodRecord]:
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
            by_name[name] = dataclasses.replace(record, intervals=tuple(
                (s, now if e is None else e) for s, e in record.intervals))
    by_name.update(live)
    return list(by_name.values())


def _union_seconds(intervals: Sequence[tuple[float, float | None]], now: float) -> float:
    """Seconds covered by the intervals, overlaps counted once, open ones ending at ``now``."""
    spans = sorted((s, now if e is None else e) for s, e in intervals)
    total, cur_start, cur_end = 0.0, None, None
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
# Cost
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RoleCost:
    """Cost of one role's pods, by resource."""

    pods: int
    pod_hours: float
    cpu_usd: float
    memory_usd: float
    accelerator_usd: float

    @property
    def total_usd(self) -> float:
        """The role's total."""
        return self.cpu_usd + self.memory_usd + self.accelerator_usd


@dataclasses.dataclass(frozen=True)
class CostReport:
    """The priced history of an Experiment."""

    total_usd: float
    usd_per_million_frames: float | None
    env_frames: int
    roles: Mapping[str, RoleCost]
    price_table: str
    region: str
    taken_on: str
    as_of: float
    description: str = ""
    usd_per_hour: float = 0.0

    def to_status(self) -> dict:
        """The camelCase mapping written as ``status.cost`` and into ``cost.json``."""
        return {
            "totalUsd": round(self.total_usd, 6),
            "usdPerMillionFrames": None if self.usd_per_million_frames is None
            else round(self.usd_per_million_frames, 6),
            "usdPerHour": round(self.usd_per_hour, 6),
            "envFrames": self.env_frames,
            "priceTable": self.price_table,
            "region": self.region,
            "pricesTakenOn": self.taken_on,
            "currency": "USD",
            "asOf": _iso(self.as_of),
            "description": self.description,
            "breakdown": {role: {"totalUsd": round(c.total_usd, 6),
                                 "cpuUsd": round(c.cpu_usd, 6),
                                 "memoryUsd": round(c.memory_usd, 6),
                                 "acceleratorUsd": round(c.accelerator_usd, 6),
                                 "pods": c.pods, "podHours": round(c.pod_hours, 6)}
                          for role, c in self.roles.items()},
        }


def status_schema() -> dict:
    """OpenAPI v3 (structural, as a CRD wants it) of ``status.cost`` and of the stored records
    (``status.costRecords`` or wherever the operator keeps them): ``{"cost": ..., "records":
    ...}``."""
    num = {"type": "number"}
    role = {"type": "object", "properties": {
        "totalUsd": num, "cpuUsd": num, "memoryUsd": num, "acceleratorUsd": num,
        "pods": {"type": "integer"}, "podHours": num}}
    text = {"type": "string"}
    cost_schema = {"type": "object", "description": "Estimated cost so far (service/cost/).",
                   "properties": {
                       "totalUsd": num, "usdPerHour": num,
                       "usdPerMillionFrames": {"type": "number",
                                                                "nullable": True},
                       "envFrames": {"type": "integer"}, "priceTable": text, "region": text,
                       "pricesTakenOn": text, "currency": text, "asOf": text,
                       "description": text,
                       "breakdown": {"type": "object", "properties": {r: role for r in ROLES}}}}
    record = {"type": "object", "properties": {
        "name": text, "role": text, "spot": {"type": "boolean"}, "cpu": num, "memoryGib": num,
        "accelerator": {"type": "string", "nullable": True}, "acceleratorType": text,
        "acceleratorCount": {"type": "integer"},
        "intervals": {"type": "array", "items": {"type": "array", "items": {
            "type": "number", "nullable": True}}},
        "pods": {"type": "integer", "description": "Pods a compacted record stands for."},
        "seconds": {"type": "number", "description": "Their summed running time."}}}
    return {"cost": cost_schema, "records": {"type": "array", "items": record}}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def compute_cost(records: Iterable[PodRecord], prices: PriceTable, env_frames: int = 0,
                 now: float | None = None, description: str = "") -> CostReport:
    """Prices pod records: for each, the hours it ran x (its vCPUs x the vCPU rate + its GiB x
    the GiB rate + its chips x the chip rate), Spot rates for Spot pods; summed per role.

    Args:
      records: the pods (any order; several per role for restarts and replicas).
      prices: the price table.
      env_frames: environment frames trained so far (for USD per million frames).
      The report's ``usd_per_hour`` is what the pods still running (an open interval) cost
      per hour now.
      now: where open intervals end (Unix seconds; default: the current time).
      description: a short summary of what ran, carried into the report.

    Raises:
      ValueError: for a role outside :data:`ROLES`.
      KeyError: for an accelerator the table does not price.
    """
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    acc: dict[str, list[float]] = {role: [0, 0.0, 0.0, 0.0, 0.0] for role in ROLES}
    per_hour = 0.0
    for rec in records:
        if rec.role not in ROLES:
            raise ValueError(f"pod {rec.name}: role must be one of {', '.join(ROLES)}, "
                             f"got {rec.role!r}")
        hours = (_union_seconds(rec.intervals, now) + rec.seconds) / _SECONDS_PER_HOUR
        r = rec.resources
        row = acc[rec.role]
        row[0] += rec.pods
        row[1] += hours
        row[2] += hours * r.cpu * prices.cpu.get(rec.spot)
        row[3] += hours * r.memory_gib * prices.memory.get(rec.spot)
        hourly = r.cpu * prices.cpu.get(rec.spot) + r.memory_gib * prices.memory.get(rec.spot)
        if r.accelerator and r.accelerator_count:
            chips = r.accelerator_count * prices.accelerator_rate(
                r.accelerator, r.accelerator_type, rec.spot)
            row[4] += hours * chips
            hourly += chips
        if any(e is None for _, e in rec.intervals):
            per_hour += hourly
    roles = {role: RoleCost(int(v[0]), v[1], v[2], v[3], v[4]) for role, v in acc.items()}
    total = sum(c.total_usd for c in roles.values())
    per_million = total / (env_frames / 1e6) if env_frames > 0 else None
    return CostReport(total_usd=total, usd_per_million_frames=per_million,
                      env_frames=int(env_frames), roles=roles, price_table=prices.version,
                      region=prices.region, taken_on=prices.taken_on, as_of=now,
                      description=description, usd_per_hour=per_hour)


# --------------------------------------------------------------------------------------------
# Kubernetes pods -> records
# --------------------------------------------------------------------------------------------

#: GKE's TPU node-label values -> price-table keys.
TPU_ACCELERATORS = {
    "tpu-v4-podslice": "v4", "tpu-v5-lite-podslice": "v5e", "tpu-v5-lite-device": "v5e",
    "tpu-v5p-slice": "v5p", "tpu-v6e-slice": "v6e",
}
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
GPU_LABEL = "cloud.google.com/gke-accelerator"
SPOT_LABELS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
#: Pod labels that may carry the role, first found wins.
ROLE_LABELS = ("seedrl.dev/role", "app.kubernetes.io/component")


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
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
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


def _pod_requests(spec: Mapping[str, Any], name: str, convert) -> float:
    """The pod's request of one resource: the larger of the sum over its containers and the
    largest init container (init containers run before the others, one at a time)."""
    total = sum(convert(_requests(c)[name]) for c in spec.get("containers") or []
                if name in _requests(c))
    init = [convert(_requests(c)[name]) for c in spec.get("initContainers") or []
            if name in _requests(c)]
    return max([total, *init])


def pod_record(pod: Mapping[str, Any], role: str | None = None) -> PodRecord:
    """The record of a Kubernetes pod object (a dict as the API returns it).

    - role: the argument, else the pod label ``seedrl.dev/role`` or
      ``app.kubernetes.io/component`` (``actors`` counts as ``actor``).
    - resources: requests (limits where a request is missing) summed over containers;
      ``google.com/tpu`` chips with the type from the ``cloud.google.com/gke-tpu-accelerator``
      node selector, or ``nvidia.com/gpu`` with ``cloud.google.com/gke-accelerator``.
    - Spot: a ``cloud.google.com/gke-spot`` (or ``gke-preemptible``) ``"true"`` node selector
      or required node-affinity term.
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
    role = "actor" if role == "actors" else role
    if role not in ROLES:
        raise ValueError(f"pod {meta.get('name')}: cannot tell its role (learner or actor) "
                         f"from labels {', '.join(ROLE_LABELS)}; got {role!r}")
    node = _node_labels(spec)
    accelerator, acc_type, count = None, "", 0
    chips = _pod_requests(spec, "google.com/tpu", parse_quantity)
    gpus = _pod_requests(spec, "nvidia.com/gpu", parse_quantity)
    if chips:
        label = (node.get(TPU_LABEL) or [None])[0]
        if label is None:
            raise ValueError(f"pod {meta.get('name')}: requests google.com/tpu without a "
                             f"{TPU_LABEL} node selector")
        accelerator, acc_type, count = "tpu", TPU_ACCELERATORS.get(label, label), int(chips)
    elif gpus:
        label = (node.get(GPU_LABEL) or [None])[0]
        if label is None:
            raise ValueError(f"pod {meta.get('name')}: requests nvidia.com/gpu without a "
                             f"{GPU_LABEL} node selector")
        accelerator, acc_type, count = "gpu", label, int(gpus)
    spot = any("true" in [v.lower() for v in node.get(k, [])] for k in SPOT_LABELS)
    resources = Resources(cpu=_pod_requests(spec, "cpu", cpu_cores),
                          memory_gib=_pod_requests(spec, "memory", memory_gib),
                          accelerator=accelerator, accelerator_type=acc_type,
                          accelerator_count=count)
    start = _parse_time(status.get("startTime"))
    intervals: tuple[tuple[float, float | None], ...] = ()
    if start is not None:
        end = None
        if status.get("phase") in ("Succeeded", "Failed"):
            finished = [_parse_time(((cs.get("state") or {}).get("terminated") or {})
                                    .get("finishedAt"))
                        for cs in status.get("containerStatuses") or []]
            finished = [f for f in finished if f is not None]
            end = max(finished) if finished else start
        elif meta.get("deletionTimestamp"):
            end = _parse_time(meta["deletionTimestamp"])
        intervals = ((start, max(start, end) if end is not None else None),)
    return PodRecord(name=name, role=role, resources=resources, spot=spot, intervals=intervals)


def price_pods(previous: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
               prices: PriceTable, env_frames: int = 0,
               now: float | None = None) -> tuple[list[dict], CostReport]:
    """One pricing step of the operator: its stored history plus the pods it sees now.

    Args:
      previous: the records stored last time (:meth:`PodRecord.to_dict` mappings), e.g. kept
        in the Experiment's status.
      pods: the Experiment's pods as API dicts (from kopf, or a kubernetes client object
        through ``ApiClient().sanitize_for_serialization``), roles from their labels.
      prices: the price table.
      env_frames: frames trained so far (the learner's status).
      now: the observation time (default: the current time).

    Returns:
      The records to store for next time, and the report (``report.to_status()`` is
      ``status.cost``; :meth:`CostGauges.update` takes the report).
    """
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    current = [pod_record(p) for p in pods]
    records = compact_records(merge_records((record_from_dict(r) for r in previous), current,
                                            now=now), (r.name for r in current))
    report = compute_cost(records, prices, env_frames=env_frames, now=now,
                          description=describe_records(records, now))
    return [r.to_dict() for r in records], report


# --------------------------------------------------------------------------------------------
# Machine types of an Experiment (local estimates and the planner)
# --------------------------------------------------------------------------------------------

#: Used when the Experiment does not say (cluster fields not declared, or left empty).
DEFAULT_LEARNER = Resources(cpu=4.0, memory_gib=16.0)
DEFAULT_ACTOR = Resources(cpu=1.0, memory_gib=2.0)


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    """The first attribute (or key) present and not None among ``names``."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _topology_chips(topology: Any) -> int:
    return tpu_chips(str(topology).lower()) if topology else 0


def _accelerator(acc: Any) -> tuple[str | None, str, int]:
    """``(kind, price-table type, count)`` of an accelerator section, or a bare type string."""
    if acc is None:
        return None, "", 0
    if isinstance(acc, str):
        kind, acc_type = "", acc.lower()
    else:
        kind = str(_get(acc, "kind", default="")).lower()
        section = _get(acc, kind) if kind in ("tpu", "gpu") else None
        if section is not None and not isinstance(section, (str, int, float, bool)):
            acc = section  # ``{kind: tpu, tpu: {type, topology}, gpu: {type, count}}``
        acc_type = str(_get(acc, "type", default="")).lower()
        if acc_type in ("tpu", "gpu", "cpu", "none"):  # ``type: tpu`` names the kind
            kind, acc_type = kind or acc_type, ""
        acc_type = acc_type or str(_get(
            acc, "tpu_type", "tpuType", "gpu_type", "gpuType", "model", "version",
            "accelerator_type", "acceleratorType", "name", default="")).lower()
    if kind in ("cpu", "none") or (not kind and acc_type in ("", "cpu", "none")):
        return None, "", 0
    if not kind:
        kind = "gpu" if acc_type.startswith("nvidia") else "tpu"
    acc_type = TPU_ACCELERATORS.get(acc_type, acc_type)
    if kind == "tpu" and acc_type.startswith("tpu-"):
        acc_type = acc_type[4:]
    count = None if isinstance(acc, str) else _get(acc, "count", "chips", "gpus")
    if count is None:
        count = (0 if isinstance(acc, str) else _topology_chips(_get(acc, "topology"))) or 1
    return kind, acc_type, int(count)


def machine_for(exp: Any, role: str) -> tuple[Resources, bool]:
    """The resources one pod of ``role`` requests in a cluster, and whether it runs on Spot.

    Reads ``spec.learner`` / ``spec.actors``: ``resources`` (``cpu``, ``memory`` as Kubernetes
    quantities, directly or under ``requests``), ``accelerator`` (``kind`` tpu/gpu/cpu, with
    ``type`` and ``topology`` or ``count`` in the section the kind names, or beside it) and
    ``spot``. Every field is read defensively
    (attribute or key, absent or None): what the Experiment does not say comes from
    :data:`DEFAULT_LEARNER` / :data:`DEFAULT_ACTOR`; an actor with ``processesPerActor: P``
    defaults to P + 1 vCPUs.
    """
    section = _get(exp.spec, "learner" if role == "learner" else "actors")
    default = DEFAULT_LEARNER if role == "learner" else DEFAULT_ACTOR
    if role == "actor":
        procs = int(_get(section, "processes_per_actor", "processesPerActor", default=0) or 0)
        if procs:
            default = dataclasses.replace(default, cpu=float(procs + 1))
    res = _get(section, "resources")
    req = _get(res, "requests", default=res) if res is not None else None
    cpu = _get(req, "cpu") if req is not None else None
    mem = _get(req, "memory") if req is not None else None
    kind, acc_type, count = _accelerator(_get(section, "accelerator"))
    resources = Resources(
        cpu=default.cpu if cpu in (None, "") else cpu_cores(cpu),
        memory_gib=default.memory_gib if mem in (None, "") else memory_gib(mem),
        accelerator=kind, accelerator_type=acc_type, accelerator_count=count)
    spot = bool(_get(section, "spot", default=False))
    return resources, spot


def local_records(exp: Any, processes: Iterable[tuple[str, str, Sequence[tuple[float, float]]]],
                  ) -> list[PodRecord]:
    """Records for local processes priced as the cluster pods they stand for.

    Args:
      exp: the Experiment (its machine types: :func:`machine_for`).
      processes: ``(name, role, intervals)`` per process, intervals in Unix seconds.
    """
    machines = {role: machine_for(exp, role) for role in ROLES}
    return [PodRecord(name=name, role=role, resources=machines[role][0],
                      spot=machines[role][1], intervals=tuple(intervals))
            for name, role, intervals in processes]


def format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(round(max(0.0, seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def describe_records(records: Sequence[PodRecord], now: float) -> str:
    """``"learner 1 x cpu 4 vCPU/16 GiB 0:05:12, actors 2 x cpu 1 vCPU/2 GiB 0:10:20"``:
    per role, the pods, their machine and their summed running time."""
    parts = []
    for role in ROLES:
        recs = [r for r in records if r.role == role]
        if not recs:
            continue
        machines = sorted({r.resources.describe() + (" spot" if r.spot else "") for r in recs})
        seconds = sum(_union_seconds(r.intervals, now) + r.seconds for r in recs)
        names = {r.name.split("@")[0] for r in recs if not r.name.startswith(_COMPACTED)}
        count = len(names) + sum(r.pods for r in recs if r.name.startswith(_COMPACTED))
        label = "learner" if role == "learner" else "actors"
        parts.append(f"{label} {count} x {' + '.join(machines)} {format_duration(seconds)}")
    return ", ".join(parts)


def format_cost_line(status: Mapping[str, Any]) -> str:
    """The one line `seedrl train` ends with, from a report's :meth:`CostReport.to_status`."""
    per = status.get("usdPerMillionFrames")
    per_text = "n/a" if per is None else f"${per:,.4f}"
    return (f"cost: ${status['totalUsd']:,.4f} estimated ({status.get('description', '')}) = "
            f"{per_text} per million frames [prices {status.get('region')} "
            f"{status.get('pricesTakenOn')}, table {status.get('priceTable')}]")


def format_report(status: Mapping[str, Any]) -> str:
    """A multi-line report of a ``status.cost`` mapping (cluster or local)."""
    per = status.get("usdPerMillionFrames")
    lines = [f"total:      ${status.get('totalUsd', 0):,.4f} {status.get('currency', 'USD')} "
             f"as of {status.get('asOf', '?')}",
             f"per 1M env frames: {'n/a' if per is None else f'${per:,.4f}'} "
             f"({status.get('envFrames', 0):,} frames)"]
    if status.get("usdPerHour"):
        lines.append(f"now:        ${status['usdPerHour']:,.4f} per hour for the pods running")
    if status.get("description"):
        lines.append(f"ran:        {status['description']}")
    lines.append(f"{'role':<9} {'pods':>5} {'pod-hours':>10} {'vCPU $':>10} {'memory $':>10} "
                 f"{'accel $':>10} {'total $':>10}")
    for role, b in (status.get("breakdown") or {}).items():
        lines.append(f"{role:<9} {b.get('pods', 0):>5} {b.get('podHours', 0):>10.3f} "
                     f"{b.get('cpuUsd', 0):>10.4f} {b.get('memoryUsd', 0):>10.4f} "
                     f"{b.get('acceleratorUsd', 0):>10.4f} {b.get('totalUsd', 0):>10.4f}")
    lines.append(f"prices:     {status.get('priceTable')} ({status.get('region')}, taken "
                 f"{status.get('pricesTakenOn')})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Prometheus
# --------------------------------------------------------------------------------------------

class CostGauges:
    """Prometheus gauges of Experiment costs, for the operator to update after each pricing.

    ``seedrl_experiment_cost_usd{experiment, namespace, role}`` (role learner, actor or total)
    and ``seedrl_experiment_cost_usd_per_million_frames{experiment, namespace}``: the namespace
    keeps apart Experiments of one name in two namespaces.

    Args:
      registry: where to register (default: prometheus_client's global registry; pass a fresh
        ``CollectorRegistry`` in tests).
    """

    def __init__(self, registry=None):
        from prometheus_client import REGISTRY, Gauge

        registry = REGISTRY if registry is None else registry
        self.usd = Gauge("seedrl_experiment_cost_usd",
                         "Estimated cost of an Experiment so far, in USD, from the resources "
                         "its pods requested and the time they ran.",
                         ["experiment", "namespace", "role"], registry=registry)
        self.per_million = Gauge("seedrl_experiment_cost_usd_per_million_frames",
                                 "Estimated USD per million environment frames so far.",
                                 ["experiment", "namespace"], registry=registry)

    def update(self, experiment: str, namespace: str, report: CostReport) -> None:
        """Sets the gauges of one Experiment from its report."""
        for role, c in report.roles.items():
            self.usd.labels(experiment, namespace, role).set(c.total_usd)
        self.usd.labels(experiment, namespace, "total").set(report.total_usd)
        if report.usd_per_million_frames is not None:
            self.per_million.labels(experiment, namespace).set(report.usd_per_million_frames)

    def remove(self, experiment: str, namespace: str) -> None:
        """Drops a deleted Experiment's series."""
        for role in (*ROLES, "total"):
            try:
                self.usd.remove(experiment, namespace, role)
            except KeyError:
                pass
        try:
            self.per_million.remove(experiment, namespace)
        except KeyError:
            pass
