"""The cost report as it is written and read: ``status.cost`` in a cluster, ``cost.json``
locally, and the lines `seedrl train` and `seedrl cost` print from it.

:class:`CostStatus` declares the report with :func:`seedrl.common.config.param`, so its
camelCase keys and the CRD's ``status.cost`` schema (:func:`status_schema`, with
``status.costRecords`` from :class:`seedrl.service.cost.records.StoredRecord`) come from one
place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from seedrl.common.config import param
from seedrl.common.schema import dataclass_schema, without_defaults
from seedrl.service.cost.records import COMPACTED, ROLES, PodRecord, StoredRecord, union_seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoleStatus:
    """What one role's pods cost, by resource."""

    total_usd: float = param(0.0, "USD so far.")
    cpu_usd: float = param(0.0, "USD for the vCPUs requested.")
    memory_usd: float = param(0.0, "USD for the memory requested.")
    accelerator_usd: float = param(0.0, "USD for TPU chips or GPUs.")
    pods: int = param(0, "Pods (or local processes) priced, those gone included.")
    pod_hours: float = param(0.0, "Hours the pods ran, summed.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Learner and actors apart."""

    learner: RoleStatus = param(doc="The learner's pods.", factory=RoleStatus)
    actor: RoleStatus = param(doc="The actors' pods.", factory=RoleStatus)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CostStatus:
    """Estimated cost so far: the resources each pod requested x the time it ran x the price
    table's rates (service/cost/)."""

    total_usd: float = param(0.0, "USD so far.")
    usd_per_million_frames: Optional[float] = param(
        None, "USD per million environment frames (null before the first frame)."
    )
    usd_per_hour: float = param(0.0, "What the pods running now cost per hour.")
    env_frames: int = param(0, "Environment frames the cost is divided by.")
    price_table: str = param("", "Version of the price table that priced it.")
    region: str = param("", "The price table's region.")
    prices_taken_on: str = param("", "When the price table's prices were looked up.")
    currency: str = param("USD", "Currency of every amount.")
    as_of: str = param("", "When it was priced (RFC 3339).")
    description: str = param("", "What ran: per role, the pods, their machine and their time.")
    breakdown: Breakdown = param(doc="The cost per role.", factory=Breakdown)


def status_schema() -> dict:
    """OpenAPI v3 (structural, as a CRD wants it) of ``status.cost`` and of the stored records
    (``status.costRecords`` or wherever the operator keeps them): ``{"cost": ..., "records":
    ...}``."""
    # Written by the operator only: the API server has nothing to fill in.
    return {
        "cost": {
            "description": " ".join((CostStatus.__doc__ or "").split()),
            **without_defaults(dataclass_schema(CostStatus)),
        },
        "records": {"type": "array", "items": without_defaults(dataclass_schema(StoredRecord))},
    }


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` of whole seconds."""
    seconds = int(max(0.0, seconds))
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
        seconds = sum(union_seconds(r.intervals, now) + r.seconds for r in recs)
        names = {r.name.split("@")[0] for r in recs if not r.name.startswith(COMPACTED)}
        count = len(names) + sum(r.pods for r in recs if r.name.startswith(COMPACTED))
        label = "learner" if role == "learner" else "actors"
        parts.append(f"{label} {count} x {' + '.join(machines)} {format_duration(seconds)}")
    return ", ".join(parts)


def format_cost_line(status: Mapping[str, Any]) -> str:
    """The one line `seedrl train` ends with, from a ``status.cost`` mapping."""
    per = status.get("usdPerMillionFrames")
    per_text = "n/a" if per is None else f"${per:,.4f}"
    return (
        f"cost: ${status['totalUsd']:,.4f} estimated ({status.get('description', '')}) = "
        f"{per_text} per million frames [prices {status.get('region')} "
        f"{status.get('pricesTakenOn')}, table {status.get('priceTable')}]"
    )


def format_report(status: Mapping[str, Any]) -> str:
    """A multi-line report of a ``status.cost`` mapping (cluster or local)."""
    per = status.get("usdPerMillionFrames")
    lines = [
        f"total:      ${status.get('totalUsd', 0):,.4f} {status.get('currency', 'USD')} "
        f"as of {status.get('asOf', '?')}",
        f"per 1M env frames: {'n/a' if per is None else f'${per:,.4f}'} "
        f"({status.get('envFrames', 0):,} frames)",
    ]
    if status.get("usdPerHour"):
        lines.append(f"now:        ${status['usdPerHour']:,.4f} per hour for the pods running")
    if status.get("description"):
        lines.append(f"ran:        {status['description']}")
    lines.append(
        f"{'role':<9} {'pods':>5} {'pod-hours':>10} {'vCPU $':>10} {'memory $':>10} "
        f"{'accel $':>10} {'total $':>10}"
    )
    for role, b in (status.get("breakdown") or {}).items():
        lines.append(
            f"{role:<9} {b.get('pods', 0):>5} {b.get('podHours', 0):>10.3f} "
            f"{b.get('cpuUsd', 0):>10.4f} {b.get('memoryUsd', 0):>10.4f} "
            f"{b.get('acceleratorUsd', 0):>10.4f} {b.get('totalUsd', 0):>10.4f}"
        )
    lines.append(
        f"prices:     {status.get('priceTable')} ({status.get('region')}, taken "
        f"{status.get('pricesTakenOn')})"
    )
    return "\n".join(lines)
