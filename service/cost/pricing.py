"""Pricing: a price table x the resources each pod requested x the time it ran.

Pure: the operator (:func:`price_pods`), the local launcher and `seedrl cost` all price through
:func:`compute_cost`. Prices are hourly per vCPU, per GiB of memory and per accelerator chip/GPU,
on demand or Spot: that is how GKE Autopilot bills pods; for GKE Standard it is each pod's share
of its nodes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from seedrl.common.config import to_document
from seedrl.service.cost.prices import PriceTable
from seedrl.service.cost.records import (
    ROLES,
    PodRecord,
    Resources,
    compact_records,
    merge_records,
    pod_record,
    record_from_dict,
    union_seconds,
)
from seedrl.service.cost.report import Breakdown, CostStatus, RoleStatus, describe_records

_SECONDS_PER_HOUR = 3600.0
# Reports are rounded to a millionth of a dollar (and of an hour) where they are written.
_DIGITS = 6


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

    def to_status(self) -> RoleStatus:
        """The role's part of the written report."""
        return RoleStatus(
            total_usd=round(self.total_usd, _DIGITS),
            cpu_usd=round(self.cpu_usd, _DIGITS),
            memory_usd=round(self.memory_usd, _DIGITS),
            accelerator_usd=round(self.accelerator_usd, _DIGITS),
            pods=self.pods,
            pod_hours=round(self.pod_hours, _DIGITS),
        )


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
        """The camelCase mapping written as ``status.cost`` and into ``cost.json``
        (:class:`seedrl.service.cost.report.CostStatus`)."""
        per_million = self.usd_per_million_frames
        return to_document(
            CostStatus(
                total_usd=round(self.total_usd, _DIGITS),
                usd_per_million_frames=None if per_million is None else round(per_million, _DIGITS),
                usd_per_hour=round(self.usd_per_hour, _DIGITS),
                env_frames=self.env_frames,
                price_table=self.price_table,
                region=self.region,
                prices_taken_on=self.taken_on,
                currency="USD",
                as_of=_iso(self.as_of),
                description=self.description,
                breakdown=Breakdown(**{role: self.roles[role].to_status() for role in ROLES}),
            )
        )


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def hourly(resources: Resources, spot: bool, prices: PriceTable) -> float:
    """USD per hour of one pod with these requests."""
    rate = resources.cpu * prices.cpu.get(spot) + resources.memory_gib * prices.memory.get(spot)
    if resources.accelerator and resources.accelerator_count:
        rate += resources.accelerator_count * prices.accelerator_rate(
            resources.accelerator, resources.accelerator_type, spot
        )
    return rate


def compute_cost(
    records: Iterable[PodRecord],
    prices: PriceTable,
    env_frames: int = 0,
    now: float | None = None,
    description: str = "",
) -> CostReport:
    """Prices pod records: for each, the hours it ran x (its vCPUs x the vCPU rate + its GiB x
    the GiB rate + its chips x the chip rate), Spot rates for Spot pods; summed per role.

    The report's ``usd_per_hour`` is what the pods still running (an open interval) cost per
    hour now.

    Args:
      records: the pods (any order; several per role for restarts and replicas).
      prices: the price table.
      env_frames: environment frames trained so far (for USD per million frames).
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
            raise ValueError(
                f"pod {rec.name}: role must be one of {', '.join(ROLES)}, got {rec.role!r}"
            )
        hours = (union_seconds(rec.intervals, now) + rec.seconds) / _SECONDS_PER_HOUR
        r = rec.resources
        row = acc[rec.role]
        row[0] += rec.pods
        row[1] += hours
        row[2] += hours * r.cpu * prices.cpu.get(rec.spot)
        row[3] += hours * r.memory_gib * prices.memory.get(rec.spot)
        if r.accelerator and r.accelerator_count:
            row[4] += (
                hours
                * r.accelerator_count
                * prices.accelerator_rate(r.accelerator, r.accelerator_type, rec.spot)
            )
        if any(e is None for _, e in rec.intervals):
            per_hour += hourly(r, rec.spot, prices)
    roles = {role: RoleCost(int(v[0]), v[1], v[2], v[3], v[4]) for role, v in acc.items()}
    total = sum(c.total_usd for c in roles.values())
    per_million = total / (env_frames / 1e6) if env_frames > 0 else None
    return CostReport(
        total_usd=total,
        usd_per_million_frames=per_million,
        env_frames=int(env_frames),
        roles=roles,
        price_table=prices.version,
        region=prices.region,
        taken_on=prices.taken_on,
        as_of=now,
        description=description,
        usd_per_hour=per_hour,
    )


def price_pods(
    previous: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    prices: PriceTable,
    env_frames: int = 0,
    now: float | None = None,
) -> tuple[list[dict], CostReport]:
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
      ``status.cost``; :meth:`seedrl.service.metrics.CostGauges.update` takes the report).
    """
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    current = [pod_record(p) for p in pods]
    records = compact_records(
        merge_records((record_from_dict(r) for r in previous), current, now=now),
        (r.name for r in current),
    )
    report = compute_cost(
        records, prices, env_frames=env_frames, now=now, description=describe_records(records, now)
    )
    return [r.to_dict() for r in records], report
