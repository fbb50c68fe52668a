"""The cost estimate of a local run: its processes priced as the cluster pods they stand for.

`seedrl train` runs one learner and N actors on this machine; a cluster would run the same
processes as the pods the operator renders for the Experiment. :class:`LocalCost` turns each
process's wall-clock running time into a :class:`seedrl.service.cost.PodRecord` with its pod's
requests and writes ``runs/<name>/cost.json``: the report (the same mapping the operator writes as
``status.cost``) and the records it was priced from, so ``seedrl cost NAME`` can re-price them.
A resumed run keeps the records of its earlier sessions: its cost is the whole run's.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from seedrl.common import finite_json
from seedrl.common.files import replace_file
from seedrl.service import cost

log = logging.getLogger(__name__)

COST_FILE = "cost.json"


def read_cost_file(run_dir: str) -> dict | None:
    """``cost.json`` of a run directory, or None when it is missing or unreadable."""
    try:
        with open(os.path.join(run_dir, COST_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class LocalCost:
    """Prices a local run's processes and keeps ``cost.json`` up to date.

    Args:
      exp: the Experiment (machine types and frames per step).
      run_dir: the run directory.
      prices: the price table (default: :func:`seedrl.service.cost.load_prices`).
    """

    def __init__(self, exp: Any, run_dir: str, prices: cost.PriceTable | None = None):
        self.exp = exp
        self.run_dir = run_dir
        self.prices = prices or cost.load_prices()
        previous = read_cost_file(run_dir) or {}
        self.previous = [cost.record_from_dict(r) for r in previous.get("records", [])]
        #: The latest pricing (a :class:`seedrl.service.cost.CostReport`), for the cost gauges.
        self.last_report: cost.CostReport | None = None
        self.session = 1 + max(
            (
                int(r.name.rpartition("@")[2])
                for r in self.previous
                if r.name.rpartition("@")[2].isdigit()
            ),
            default=0,
        )

    def records(self, children: Sequence[Any], now: float) -> list[cost.PodRecord]:
        """This session's processes (``Child`` objects with ``intervals``) and earlier ones'."""
        processes = []
        for child in children:
            role = "learner" if child.name == "learner" else "actor"
            spans = [(start, now if end is None else end) for start, end in child.intervals]
            if spans:
                processes.append((f"{child.name}@{self.session}", role, spans))
        return [*self.previous, *cost.local_records(self.exp, processes)]

    def update(self, children: Sequence[Any], env_steps: int, running: bool) -> dict:
        """Prices the run so far, writes ``cost.json`` atomically, returns the report mapping.
        A ``cost.json`` that cannot be written (a full disk) is logged and the run goes on."""
        now = time.time()
        records = self.records(children, now)
        frames = int(env_steps or 0) * self.exp.spec.env.frames_per_step
        report = cost.compute_cost(
            records,
            self.prices,
            env_frames=frames,
            now=now,
            description=cost.describe_records(records, now),
        )
        self.last_report = report
        status = report.to_status()
        data = {
            "experiment": self.exp.metadata.name,
            "running": running,
            "cost": status,
            "records": [r.to_dict() for r in records],
        }
        path = os.path.join(self.run_dir, COST_FILE)
        try:
            replace_file(path, finite_json.dumps(data, indent=1).encode())
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)
        return status
