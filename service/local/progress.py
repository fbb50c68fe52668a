"""The live progress line of `seedrl train`, computed from the learner's status snapshots."""

from __future__ import annotations

import collections
import sys
import time
from typing import TextIO

from seedrl.common.config import BudgetConfig
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.cost.report import format_duration


class Progress:
    """Renders status snapshots as a progress bar (on a terminal) or periodic lines (in logs).

    Args:
      name: the experiment name.
      budget: ``spec.budget``, for the bar's fraction.
      out: where to write.
      every_s: seconds between lines when ``out`` is not a terminal.
    """

    def __init__(
        self, name: str, budget: BudgetConfig, out: TextIO = sys.stdout, every_s: float = 10.0
    ):
        self.name = name
        self.budget = budget
        self.out = out
        self.tty = out.isatty()
        self.every_s = every_s
        self._last_line = 0.0
        self._history: collections.deque[tuple[float, int]] = collections.deque(maxlen=20)
        self._width = 0

    def fraction(self, status: LearnerStatus) -> float | None:
        """How far through the budget the run is (None with no step or time limit)."""
        parts = []
        if self.budget.max_env_steps:
            parts.append(status.env_steps / self.budget.max_env_steps)
        if self.budget.max_seconds:
            parts.append(status.elapsed / self.budget.max_seconds)
        return min(1.0, max(parts)) if parts else None

    def steps_per_second(self, status: LearnerStatus) -> float:
        """Env steps per second over the last few snapshots."""
        self._history.append((status.elapsed, status.env_steps))
        (t0, s0), (t1, s1) = self._history[0], self._history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def line(self, status: LearnerStatus) -> str:
        """One line describing the snapshot."""
        rate = self.steps_per_second(status)
        frac = self.fraction(status)
        bar = ""
        if frac is not None:
            filled = int(round(frac * 20))
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {frac:4.0%} "
        steps = f"{status.env_steps:,}"
        if self.budget.max_env_steps:
            steps += f"/{self.budget.max_env_steps:,}"
        ret = "-" if status.mean_return is None else f"{status.mean_return:.1f}"
        if status.eval_mean_return is not None:
            ret += f" | eval {status.eval_mean_return:.1f}"
        # Shown once an env has raised: each restart cuts an episode short.
        restarts = f" | env restarts {status.env_restarts:,}" if status.env_restarts else ""
        return (
            f"{self.name} {bar}{steps} steps | {rate:,.0f} steps/s | "
            f"{status.episodes:,} episodes | return({status.return_window}) {ret} | "
            f"actors {status.actors}{restarts} | {format_duration(status.elapsed)}"
        )

    def update(self, status: LearnerStatus) -> None:
        """Shows a new snapshot."""
        text = self.line(status)
        if self.tty:
            pad = max(0, self._width - len(text))
            self.out.write("\r" + text + " " * pad)
            self._width = len(text)
            self.out.flush()
        elif time.monotonic() - self._last_line >= self.every_s:
            self.out.write(text + "\n")
            self.out.flush()
            self._last_line = time.monotonic()

    def close(self) -> None:
        """Ends the progress line."""
        if self.tty and self._width:
            self.out.write("\n")
            self.out.flush()
