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

from collections.abc import Mapping

import numpy as np


class UnrollBuilder:
    """Builds unrolls of ``unroll_length + 1`` steps for the K envs of one stream.

    Args:
      unroll_length: T; every emitted unroll has T + 1 rows.
      num_envs: K.
      fields: name -> (per-env shape, dtype) of every per-step field to store.
    """

    def __init__(self, unroll_length: int, num_envs: int,
                 fields: Mapping[str, tuple[tuple[int, ...], np.dtype]]):
        self.length = unroll_length + 1
        self.num_envs = num_envs
        self._buffers = {name: np.zeros((self.length, num_envs) + tuple(shape), dtype=dtype)
                         for name, (shape, dtype) in fields.items()}
        self._row = 0
        self.initial_state: list[np.ndarray] = []

    def append(self, row: Mapping[str, np.ndarray],
               state_before: list[np.ndarray] | None = None) -> dict[str, np.ndarray] | None:
        """Writes one step of all K envs; returns a finished unroll or None.

        Args:
          row: field name -> array of shape [K, ...]; must name every field.
          state_before: the agent's recurrent state (list of [K, ...] arrays) used to compute
            this row's outputs; kept as the unroll's initial state when this is its first row.

        Returns:
          None, or a dict field -> array [T + 1, K, ...] (a copy the caller owns), plus the key
          ``initial_state`` holding the list of state arrays at the unroll's first row.
        """
        if self._row == 0 or self._row == self.length - 1:
            # Row 0 opens this unroll; the last row also opens the next one.
            state = [np.array(s) for s in state_before or []]
            if self._row == 0:
                self.initial_state = state
            else:
                next_state = state
        for name, buf in self._buffers.items():
            buf[self._row] = row[name]
        self._row += 1
        if self._row < self.length:
            return None
        unroll: dict = {name: buf.copy() for name, buf in self._buffers.items()}
        unroll["initial_state"] = self.initial_state
        for buf in self._buffers.values():
            buf[0] = buf[-1]
        self.initial_state = next_state
        self._row = 1
        return unroll

    def reset(self) -> None:
        """Drops the partial unroll (the stream restarted)."""
        self._row = 0


def split_unroll(unroll: Mapping[str, object]) -> list[dict[str, np.ndarray]]:
    """Splits a [T + 1, K, ...] unroll into K single-env unrolls of shape [T + 1, ...]."""
    state = unroll.get("initial_state", [])
    fields = {k: v for k, v in unroll.items() if k != "initial_state"}
    num_envs = next(iter(fields.values())).shape[1]
    return [{**{k: v[:, i] for k, v in fields.items()},
             "initial_state": [s[i] for s in state]} for i in range(num_envs)]


def stack_unrolls(unrolls: list[Mapping[str, object]]) -> dict[str, object]:
    """Stacks single-env unrolls into a time-major batch [T + 1, B, ...]; states as [B, ...]."""
    out: dict[str, object] = {}
    for key in unrolls[0]:
        if key == "initial_state":
            out[key] = [np.stack([u[key][j] for u in unrolls]) for j in
                        range(len(unrolls[0][key]))]
        else:
            out[key] = np.stack([u[key] for u in unrolls], axis=1)
    return out
