"""The live progress line of `seedrl train`, computed from the learner's status snapshots."""

from __future__ import annotations

import collections
import sys
import time
from typing import TextIO

from seedrl.common.config import BudgetConfig


def format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Renders status snapshots as a progress bar (on a terminal) or periodic lines (in logs).

    Args:
      name: the experiment name.
      budget: ``spec.budget``, for the bar's fraction.
      out: where to write.
      every_s: seconds between lines when ``out`` is not a terminal.
    """

    def __init__(self, name: str, budget: BudgetConfig, out: TextIO = sys.stdout,
                 every_s: float = 10.0):
        self.name = name
        self.budget = budget
        self.out = out
        self.tty = out.isatty()
        self.every_s = every_s
        self._last_line = 0.0
        self._history: collections.deque[tuple[float, int]] = collections.deque(maxlen=20)
        self._width = 0

    def fraction(self, status: dict) -> float | None:
        """How far through the budget the run is (None with no step or time limit)."""
        parts = []
        if self.budget.max_env_steps:
            parts.append(status.get("env_steps", 0) / self.budget.max_env_steps)
        if self.budget.max_seconds:
            parts.append(status.get("elapsed", 0.0) / self.budget.max_seconds)
        return min(1.0, max(parts)) if parts else None

    def steps_per_second(self, status: dict) -> float:
        """Env steps per second over the last few snapshots."""
        self._history.append((status.get("elapsed", 0.0), status.get("env_steps", 0)))
        (t0, s0), (t1, s1) = self._history[0], self._history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def line(self, status: dict) -> str:
        """One line describing the snapshot."""
        rate = self.steps_per_second(status)
        frac = self.fraction(status)
        bar = ""
        if frac is not None:
            filled = int(round(frac * 20))
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {frac:4.0%} "
        steps = f"{status.get('env_steps', 0):,}"
        if self.budget.max_env_steps:
            steps += f"/{self.budget.max_env_steps:,}"
        mean = status.get("mean_return")
        ret = "-" if mean is None else f"{mean:.1f}"
        window = status.get("return_window", 0)
        if status.get("eval_mean_return") is not None:
            ret += f" | eval {status['eval_mean_return']:.1f}"
        return (f"{self.name} {bar}{steps} steps | {rate:,.0f} steps/s | "
                f"{status.get('episodes', 0):,} episodes | return({window}) {ret} | "
                f"actors {status.get('actors', 0)} | {format_duration(status.get('elapsed', 0))}")

    def update(self, status: dict) -> None:
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
