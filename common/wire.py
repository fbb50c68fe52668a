"""Arrays and environment specs on the wire: encoding, decoding and checking.

Everything that crosses the actor-learner stream is plain protobuf plus raw array bytes with an
explicit dtype and shape (see ``common/seedrl.proto``). Decoding checks every field against what
the stream agreed on in its handshake and raises :class:`WireError` with a reason that names the
field, so the learner can fail that one stream with INVALID_ARGUMENT and keep serving the rest.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from seedrl.common import seedrl_pb2

#: Bumped whenever a change to seedrl.proto changes meaning; both ends must agree.
PROTOCOL_VERSION = 1

#: Dtypes that may travel on the wire (no object or structured dtypes: they would need pickle).
ALLOWED_DTYPES = frozenset({"uint8", "int8", "uint16", "int16", "int32", "int64", "float16",
                            "float32", "float64", "bool"})


class WireError(ValueError):
    """A message that does not match the protocol or what its stream agreed on."""


def encode_array(array: np.ndarray) -> seedrl_pb2.Tensor:
    """Encodes a numpy array as a Tensor message (little-endian, C order)."""
    array = np.asarray(array)
    if array.dtype.name not in ALLOWED_DTYPES:
        raise WireError(f"dtype {array.dtype.name} cannot be sent on the wire")
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return seedrl_pb2.Tensor(dtype=array.dtype.name, shape=list(array.shape),
                             data=np.ascontiguousarray(little).tobytes())


def decode_array(tensor: seedrl_pb2.Tensor, what: str, dtype: str | None = None,
                 shape: Sequence[int] | None = None) -> np.ndarray:
    """Decodes a Tensor message, checking it against the expected dtype and shape.

    Args:
      tensor: the message.
      what: the field's name, used in error messages.
      dtype: the dtype name it must have, or None to accept any allowed dtype.
      shape: the shape it must have, or None to accept any.

    Returns:
      A read-only array viewing the message bytes (no copy).

    Raises:
      WireError: on an unknown or unexpected dtype, a bad shape, or a byte count that does not
        match the shape.
    """
    if tensor.dtype not in ALLOWED_DTYPES:
        raise WireError(f"{what}: dtype {tensor.dtype!r} is not allowed on the wire")
    if dtype is not None and tensor.dtype != dtype:
        raise WireError(f"{what}: expected dtype {dtype}, got {tensor.dtype}")
    got_shape = tuple(int(d) for d in tensor.shape)
    if any(d < 0 for d in got_shape):
        raise WireError(f"{what}: negative dimension in shape {list(got_shape)}")
    if shape is not None and got_shape != tuple(shape):
        raise WireError(f"{what}: expected shape {list(shape)}, got {list(got_shape)}")
    np_dtype = np.dtype(tensor.dtype).newbyteorder("<")
    expected_bytes = math.prod(got_shape) * np_dtype.itemsize
    if len(tensor.data) != expected_bytes:
        raise WireError(f"{what}: shape {list(got_shape)} of {tensor.dtype} needs "
                        f"{expected_bytes} bytes, got {len(tensor.data)}")
    array = np.frombuffer(tensor.data, dtype=np_dtype).reshape(got_shape)
    return array.astype(np_dtype.newbyteorder("="), copy=False)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Shapes and dtypes of one environment's observations and actions.

    Attributes:
      env_id: the environment id it was made from.
      observation_dtype: numpy dtype name of one observation.
      observation_shape: shape of one observation (without the env axis).
      action_dtype: "int32" for discrete actions, "float32" for continuous ones.
      action_shape: shape of one action; () for discrete actions.
      num_actions: number of discrete actions; 0 for continuous actions.
      action_low, action_high: continuous actions only, the bounds of each action element in C
        order (empty: unbounded). The policy acts in [-1, 1] per element;
        :meth:`to_env_actions` maps that range onto the bounds.
    """

    env_id: str
    observation_dtype: str
    observation_shape: tuple[int, ...]
    action_dtype: str
    action_shape: tuple[int, ...]
    num_actions: int
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @property
    def discrete(self) -> bool:
        """Whether actions are integers in [0, num_actions)."""
        return self.num_actions > 0

    def to_env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Maps continuous actions from the policy's normalised space onto the env's bounds.

        Each element with finite bounds goes from [-1, 1] to [low, high] linearly (values outside
        [-1, 1], which a Gaussian policy samples, are clipped first, so the env only sees legal
        actions); an element with an infinite bound passes unchanged. Discrete actions pass
        unchanged.

        Args:
          actions: [N, *action_shape] in the normalised space.

        Returns:
          float32 [N, *action_shape] in the env's units (int32 actions as given).
        """
        if self.discrete or not self.action_low:
            return actions
        low, high, finite = self._bounds
        clipped = np.clip(actions, -1.0, 1.0)
        scaled = low + (clipped + 1.0) * (0.5 * (high - low))
        return np.where(finite, scaled, actions).astype(np.float32, copy=False)

    @functools.cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        low = np.asarray(self.action_low, np.float64).reshape(self.action_shape)
        high = np.asarray(self.action_high, np.float64).reshape(self.action_shape)
        finite = np.isfinite(low) & np.isfinite(high)
        # Zeros where unbounded, so the unused branch of the np.where stays finite.
        return np.where(finite, low, 0.0), np.where(finite, high, 0.0), finite

    def to_proto(self) -> seedrl_pb2.EnvSpec:
        """The spec as its protobuf message."""
        return seedrl_pb2.EnvSpec(
            env_id=self.env_id, observation_dtype=self.observation_dtype,
            observation_shape=list(self.observation_shape), action_dtype=self.action_dtype,
            action_shape=list(self.action_shape), num_actions=self.num_actions,
            action_low=list(self.action_low), action_high=list(self.action_high))

    @classmethod
    def from_proto(cls, msg: seedrl_pb2.EnvSpec) -> "EnvSpec":
        """Reads and checks a spec from its protobuf message.

        Raises:
          WireError: if the dtypes are not allowed or the shapes or action count are invalid.
        """
        spec = cls(env_id=msg.env_id, observation_dtype=msg.observation_dtype,
                   observation_shape=tuple(int(d) for d in msg.observation_shape),
                   action_dtype=msg.action_dtype,
                   action_shape=tuple(int(d) for d in msg.action_shape),
                   num_actions=int(msg.num_actions),
                   action_low=tuple(float(x) for x in msg.action_low),
                   action_high=tuple(float(x) for x in msg.action_high))
        for name in ("observation_dtype", "action_dtype"):
            if getattr(spec, name) not in ALLOWED_DTYPES:
                raise WireError(f"env_spec.{name}: {getattr(spec, name)!r} is not allowed")
        if any(d <= 0 for d in spec.observation_shape + spec.action_shape):
            raise WireError("env_spec: shapes must have positive dimensions")
        if spec.num_actions < 0:
            raise WireError("env_spec.num_actions: must be >= 0")
        if spec.discrete and (spec.action_dtype != "int32" or spec.action_shape):
            raise WireError("env_spec: discrete actions must be int32 scalars")
        spec._check_bounds()
        return spec

    def _check_bounds(self) -> None:
        low, high = self.action_low, self.action_high
        if self.discrete:
            if low or high:
                raise WireError("env_spec.action_low/high: discrete actions have no bounds")
            return
        size = math.prod(self.action_shape)
        if len(low) != len(high) or (low and len(low) != size):
            raise WireError(f"env_spec.action_low/high: expected {size} bounds each (one per "
                            f"action element) or none, got {len(low)} and {len(high)}")
        for i, (lo, hi) in enumerate(zip(low, high)):
            if math.isnan(lo) or math.isnan(hi) or not lo <= hi or lo == math.inf \
                    or hi == -math.inf:
                raise WireError(f"env_spec.action_low/high[{i}]: need low <= high, got "
                                f"[{lo}, {hi}]")

    def differences(self, other: "EnvSpec") -> list[str]:
        """Human-readable differences from another spec (empty when they match)."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(f"{f.name}: learner has {mine!r}, actor has {theirs!r}")
        return out
