"""Assembling per-environment trajectories into fixed-length unrolls on the learner.

SEED keeps trajectories on the learner: actors send observations, the learner already knows the
actions and policy outputs it produced. An actor's K environments advance in lock-step, so one
:class:`UnrollBuilder` per stream holds preallocated arrays of shape ``[T + 1, K, ...]`` and each
step writes one row for all K envs at once (one numpy write per field, not K).

Row t of field ``f`` holds, for every env of the stream: ``observation`` (x_t), ``reward`` and
``done`` (the outcome of the previous action, which led to x_t), and the agent's outputs for x_t
(``action`` a_t and the behaviour policy's outputs). Consecutive unrolls overlap by one row: the
last row of one is the first row of the next, so the learner can bootstrap from it.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np


class UnrollBuilder:
    """Builds unrolls of ``length`` rows, one every ``period`` rows, for the K envs of a stream.

    V-trace and PPO use ``length = T + 1`` and ``period = T`` (consecutive unrolls share one row
    to bootstrap from); R2D2 uses ``burn-in + m + 1`` rows every ``m`` (overlapping by the burn-in
    and the bootstrap row), so a row may belong to several unrolls.

    Args:
      unroll_length: T; with the default period every emitted unroll has T + 1 rows.
      num_envs: K.
      fields: name -> (per-env shape, dtype) of every per-step field to store.
      length: rows per unroll, if not ``unroll_length + 1``.
      period: rows between the starts of consecutive unrolls (default ``unroll_length``),
        ``1 <= period <= length``.
    """

    def __init__(
        self,
        unroll_length: int,
        num_envs: int,
        fields: Mapping[str, tuple[tuple[int, ...], np.dtype]],
        length: int | None = None,
        period: int | None = None,
    ):
        self.length = unroll_length + 1 if length is None else length
        self.period = unroll_length if period is None else period
        if not 1 <= self.period <= self.length:
            raise ValueError(
                f"period must be in [1, {self.length}] for unrolls of "
                f"{self.length} rows, got {self.period}"
            )
        self.num_envs = num_envs
        self._buffers = {
            name: np.zeros((self.length, num_envs) + tuple(shape), dtype=dtype)
            for name, (shape, dtype) in fields.items()
        }
        self._row = 0
        self.initial_state: list[np.ndarray] = []
        # States at the rows of the buffer where later unrolls begin (period, 2 period, ...),
        # oldest first.
        self._pending: collections.deque[list[np.ndarray]] = collections.deque()

    def append(
        self, row: Mapping[str, np.ndarray], state_before: list[np.ndarray] | None = None
    ) -> dict[str, np.ndarray] | None:
        """Writes one step of all K envs; returns a finished unroll or None.

        Args:
          row: field name -> array of shape [K, ...]; must name every field.
          state_before: the agent's recurrent state (list of [K, ...] arrays) used to compute
            this row's outputs; kept as the initial state of each unroll this row begins.

        Returns:
          None, or a dict field -> array [length, K, ...] (a copy the caller owns), plus the key
          ``initial_state`` holding the list of state arrays at the unroll's first row.
        """
        if self._row == 0:
            self.initial_state = [np.array(s) for s in state_before or []]
        elif self._row % self.period == 0:
            self._pending.append([np.array(s) for s in state_before or []])
        for name, buf in self._buffers.items():
            buf[self._row] = row[name]
        self._row += 1
        if self._row < self.length:
            return None
        unroll: dict = {name: buf.copy() for name, buf in self._buffers.items()}
        unroll["initial_state"] = self.initial_state
        keep = self.length - self.period
        for buf in self._buffers.values():
            buf[:keep] = buf[self.period :]
        if keep == 0:
            self._row = 0
        else:
            self.initial_state = self._pending.popleft()
            self._row = keep
        return unroll

    def reset(self) -> None:
        """Drops the partial unroll (the stream restarted)."""
        self._row = 0
        self._pending.clear()


def split_unroll(unroll: Mapping[str, object]) -> list[dict[str, np.ndarray]]:
    """Splits a [T + 1, K, ...] unroll into K single-env unrolls of shape [T + 1, ...]."""
    state = unroll.get("initial_state", [])
    fields = {k: v for k, v in unroll.items() if k != "initial_state"}
    num_envs = next(iter(fields.values())).shape[1]
    return [
        {**{k: v[:, i] for k, v in fields.items()}, "initial_state": [s[i] for s in state]}
        for i in range(num_envs)
    ]


def stack_unrolls(unrolls: list[Mapping[str, object]]) -> dict[str, object]:
    """Stacks single-env unrolls into a time-major batch [T + 1, B, ...]; states as [B, ...]."""
    out: dict[str, object] = {}
    for key in unrolls[0]:
        if key == "initial_state":
            out[key] = [np.stack([u[key][j] for u in unrolls]) for j in range(len(unrolls[0][key]))]
        else:
            out[key] = np.stack([u[key] for u in unrolls], axis=1)
    return out


def final_values(batch: Mapping[str, object]) -> np.ndarray:
    """A batch's ``final_value`` rows as float32, zeros when it has none (unrolls made by hand
    in tests and tools): where nothing was truncated they are zero anyway."""
    if "final_value" in batch:
        return np.asarray(batch["final_value"], np.float32)
    return np.zeros(np.shape(batch["reward"]), np.float32)
