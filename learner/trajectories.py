"""Assembling per-environment trajectories into fixed-length unrolls on the learner.

SEED keeps trajectories on the learner: actors send observations, the learner already knows the
actions and policy outputs it produced. An actor's K environments advance in lock-step, so one
:class:`UnrollBuilder` per stream holds preallocated arrays of shape ``[T + 1, K, ...]`` and each
step writes one row for all K envs at once (one numpy write per field, not K).

Row t of field ``f`` holds, for every env of the stream: ``observation`` (x_t), ``reward`` and
``done`` (the outcome of the previous action, which led to x_t), and the agent's outputs for x_t
(``action`` a_t and the behaviour policy's outputs). Consecutive unrolls overlap by one row: the
last row of one is the first row of the next, so the learner can bootstrap from it.

An unroll may also begin before a stream's first step (``prefix``): R2D2's sequences open with
a burn-in, and SEED pads the one a stream has not got yet with zero rows, so that its first
steps are trained too. Such unrolls carry ``padding`` [rows] (true on the zero rows).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np

#: The field of an unroll, with a prefix, that marks the zero rows before the stream's first step.
PADDING = "padding"


class UnrollBuilder:
    """Builds unrolls of ``length`` rows, one every ``period`` rows, for the K envs of a stream.

    V-trace and PPO use ``length = T + 1`` and ``period = T`` (consecutive unrolls share one row
    to bootstrap from); R2D2 uses ``burn-in + m + 1`` rows every ``period`` rows after a
    ``prefix`` of burn-in zero rows, so a row may belong to several unrolls.

    Args:
      unroll_length: T; with the default period every emitted unroll has T + 1 rows.
      num_envs: K.
      fields: name -> (per-env shape, dtype) of every per-step field to store.
      length: rows per unroll, if not ``unroll_length + 1``.
      period: rows between the starts of consecutive unrolls (default ``unroll_length``),
        ``1 <= period <= length``.
      prefix: zero rows before the stream's first step, ``0 <= prefix < length``: the first
        unroll begins that many rows early (and so do later ones that begin before the first
        step), each with the state the first step was computed from. With a prefix, unrolls
        also hold ``padding`` [length, K] bool, true on those rows.
    """

    def __init__(
        self,
        unroll_length: int,
        num_envs: int,
        fields: Mapping[str, tuple[tuple[int, ...], np.dtype]],
        length: int | None = None,
        period: int | None = None,
        prefix: int = 0,
    ):
        self.length = unroll_length + 1 if length is None else length
        self.period = unroll_length if period is None else period
        if not 1 <= self.period <= self.length:
            raise ValueError(
                f"period must be in [1, {self.length}] for unrolls of "
                f"{self.length} rows, got {self.period}"
            )
        if not 0 <= prefix < self.length:
            raise ValueError(
                f"prefix must be in [0, {self.length - 1}] for unrolls of "
                f"{self.length} rows, got {prefix}"
            )
        if prefix and PADDING in fields:
            raise ValueError(f"the field name {PADDING!r} is the builder's own with a prefix")
        self.num_envs = num_envs
        self.prefix = prefix
        self._buffers = {
            name: np.zeros((self.length, num_envs) + tuple(shape), dtype=dtype)
            for name, (shape, dtype) in fields.items()
        }
        self._padding = np.zeros((self.length, num_envs), bool) if prefix else None
        self.initial_state: list[np.ndarray] = []
        # States at the rows of the buffer where later unrolls begin (period, 2 period, ...),
        # oldest first.
        self._pending: collections.deque[list[np.ndarray]] = collections.deque()
        self._start()

    def _start(self) -> None:
        """Empties the builder for a stream's first step: the prefix rows zero."""
        self._row = self.prefix
        self._first = True
        self._pending.clear()
        if self._padding is not None:
            for buf in self._buffers.values():
                buf[: self.prefix] = 0
            self._padding[: self.prefix] = True

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
        if self._first:
            # The stream's first step: the first unroll, and every later one that begins in
            # the prefix, starts from the state it was computed from.
            self._first = False
            self.initial_state = [np.array(s) for s in state_before or []]
            for _ in range(self.period, self._row + 1, self.period):
                self._pending.append([np.array(s) for s in state_before or []])
        elif self._row == 0:
            self.initial_state = [np.array(s) for s in state_before or []]
        elif self._row % self.period == 0:
            self._pending.append([np.array(s) for s in state_before or []])
        for name, buf in self._buffers.items():
            buf[self._row] = row[name]
        if self._padding is not None:
            self._padding[self._row] = False
        self._row += 1
        if self._row < self.length:
            return None
        unroll: dict = {name: buf.copy() for name, buf in self._buffers.items()}
        if self._padding is not None:
            unroll[PADDING] = self._padding.copy()
        unroll["initial_state"] = self.initial_state
        keep = self.length - self.period
        for buf in self._buffers.values():
            buf[:keep] = buf[self.period :]
        if self._padding is not None:
            self._padding[:keep] = self._padding[self.period :]
        if keep == 0:
            self._row = 0
        else:
            self.initial_state = self._pending.popleft()
            self._row = keep
        return unroll

    def reset(self) -> None:
        """Drops the partial unroll (the stream restarted): the next step is a first one."""
        self._start()


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
