"""Arrays and environment specs on the wire: encoding, decoding and checking.

Everything that crosses the actor-learner stream is plain protobuf plus raw array bytes with an
explicit dtype and shape (see ``common/seedrl.proto``). Decoding checks every field against what
the stream agreed on in its handshake and raises :class:`WireError` with a reason that names the
field, so the learner can fail that one stream with INVALID_ARGUMENT and keep serving the rest.
"""

from __future__ import annotations

import dataclasses
import math
import sys
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
    name = _DTYPE_NAMES.get(array.dtype)
    if name is None:
        name = array.dtype.name
        if name not in ALLOWED_DTYPES:
            raise WireError(f"dtype {name} cannot be sent on the wire")
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
    # tobytes() writes C order whatever the array's layout.
    return seedrl_pb2.Tensor(dtype=name, shape=array.shape, data=array.tobytes())


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
    name = tensor.dtype
    wire_dtype = _WIRE_DTYPES.get(name)
    if wire_dtype is None:
        raise WireError(f"{what}: dtype {name!r} is not allowed on the wire")
    if dtype is not None and name != dtype:
        raise WireError(f"{what}: expected dtype {dtype}, got {name}")
    got_shape = tuple(tensor.shape)
    if shape is not None:
        if got_shape != tuple(shape):
            raise WireError(f"{what}: expected shape {list(shape)}, got {list(got_shape)}")
    elif any(d < 0 for d in got_shape):
        raise WireError(f"{what}: negative dimension in shape {list(got_shape)}")
    data = tensor.data  # read once: every read of a bytes field makes a new object
    expected_bytes = math.prod(got_shape) * wire_dtype.itemsize
    if len(data) != expected_bytes:
        raise WireError(f"{what}: shape {list(got_shape)} of {name} needs "
                        f"{expected_bytes} bytes, got {len(data)}")
    array = np.frombuffer(data, dtype=wire_dtype).reshape(got_shape)
    if _NATIVE_IS_LITTLE:
        return array
    return array.astype(wire_dtype.newbyteorder("="), copy=False)


#: The little-endian numpy dtype of each name allowed on the wire.
_WIRE_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in ALLOWED_DTYPES}
_NATIVE_IS_LITTLE = sys.byteorder == "little"
#: The name of each allowed dtype whose arrays are sent as they are (native order is little
#: endian); reading ``dtype.name`` costs microseconds, a dict lookup a fraction of one.
_DTYPE_NAMES = {np.dtype(name): name for name in ALLOWED_DTYPES} if _NATIVE_IS_LITTLE else {}


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
    """

    env_id: str
    observation_dtype: str
    observation_shape: tuple[int, ...]
    action_dtype: str
    action_shape: tuple[int, ...]
    num_actions: int

    @property
    def discrete(self) -> bool:
        """Whether actions are integers in [0, num_actions)."""
        return self.num_actions > 0

    def to_proto(self) -> seedrl_pb2.EnvSpec:
        """The spec as its protobuf message."""
        return seedrl_pb2.EnvSpec(
            env_id=self.env_id, observation_dtype=self.observation_dtype,
            observation_shape=list(self.observation_shape), action_dtype=self.action_dtype,
            action_shape=list(self.action_shape), num_actions=self.num_actions)

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
                   num_actions=int(msg.num_actions))
        for name in ("observation_dtype", "action_dtype"):
            if getattr(spec, name) not in ALLOWED_DTYPES:
                raise WireError(f"env_spec.{name}: {getattr(spec, name)!r} is not allowed")
        if any(d <= 0 for d in spec.observation_shape + spec.action_shape):
            raise WireError("env_spec: shapes must have positive dimensions")
        if spec.num_actions < 0:
            raise WireError("env_spec.num_actions: must be >= 0")
        if spec.discrete and (spec.action_dtype != "int32" or spec.action_shape):
            raise WireError("env_spec: discrete actions must be int32 scalars")
        return spec

    def differences(self, other: "EnvSpec") -> list[str]:
        """Human-readable differences from another spec (empty when they match)."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(f"{f.name}: learner has {mine!r}, actor has {theirs!r}")
        return out
