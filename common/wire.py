"""Arrays and environment specs on the wire: encoding, decoding and checking.

Everything that crosses the actor-learner stream is plain protobuf plus raw array bytes with an
explicit dtype and shape (see ``common/seedrl.proto``). Decoding checks every field against what
the stream agreed on in its handshake and raises :class:`WireError` with a reason that names the
field, so the learner can fail that one stream with INVALID_ARGUMENT and keep serving the rest.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import math
import sys
import zlib
from collections.abc import Sequence

import numpy as np

from seedrl.common import seedrl_pb2

#: Bumped whenever a change to seedrl.proto changes meaning; both ends must agree.
PROTOCOL_VERSION = 1

#: Dtypes that may travel on the wire (no object or structured dtypes: they would need pickle).
ALLOWED_DTYPES = frozenset(
    {"uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool"}
)


#: Largest gRPC message either end sends or accepts: a Step of many large frames (e.g. 256
#: envs of 84x84x4 uint8 is 7 MB) fits with room to spare. A stream whose every Step would be
#: larger is refused at its Hello.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: Largest env spec file read (a real one is about 200 bytes).
MAX_SPEC_FILE_BYTES = 64 * 1024

#: The most a container's termination message holds (the kubelet keeps its first 4096 bytes):
#: the learner's final status travels in one, and so does the env spec an actor image derives
#: for the operator (:meth:`EnvSpec.to_message`).
TERMINATION_MESSAGE_BYTES = 4096

#: What starts an env spec message compressed to fit :data:`TERMINATION_MESSAGE_BYTES`.
_PACKED = "zlib+base64:"

#: Most dimensions of an observation or action (numpy itself stops at 64; real observations
#: have at most 3 or 4). A Hello beyond it is refused before anything is allocated.
MAX_RANK = 8


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


def decode_array(
    tensor: seedrl_pb2.Tensor,
    what: str,
    dtype: str | None = None,
    shape: Sequence[int] | None = None,
) -> np.ndarray:
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
        raise WireError(
            f"{what}: shape {list(got_shape)} of {name} needs "
            f"{expected_bytes} bytes, got {len(data)}"
        )
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
      action_low, action_high: continuous actions only, the finite bounds of each action
        element in C order (empty: unbounded). The policy acts in [-1, 1] per element;
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

        Each element goes from [-1, 1] to [low, high] linearly (values outside [-1, 1], which
        a Gaussian policy samples, are clipped first, so the env only sees legal actions).
        Discrete actions, and continuous ones of a spec without bounds, pass unchanged.

        Args:
          actions: [N, *action_shape] in the normalised space.

        Returns:
          float32 [N, *action_shape] in the env's units (int32 actions as given).
        """
        if self.discrete or not self.action_low:
            return actions
        low, half_range = self._bounds
        return (low + (np.clip(actions, -1.0, 1.0) + 1.0) * half_range).astype(
            np.float32, copy=False
        )

    @functools.cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        low = np.asarray(self.action_low, np.float64).reshape(self.action_shape)
        high = np.asarray(self.action_high, np.float64).reshape(self.action_shape)
        return low, 0.5 * (high - low)

    def to_proto(self) -> seedrl_pb2.EnvSpec:
        """The spec as its protobuf message."""
        return seedrl_pb2.EnvSpec(
            env_id=self.env_id,
            observation_dtype=self.observation_dtype,
            observation_shape=list(self.observation_shape),
            action_dtype=self.action_dtype,
            action_shape=list(self.action_shape),
            num_actions=self.num_actions,
            action_low=list(self.action_low),
            action_high=list(self.action_high),
        )

    @classmethod
    def from_proto(cls, msg: seedrl_pb2.EnvSpec) -> "EnvSpec":
        """Reads and checks a spec from its protobuf message.

        Raises:
          WireError: if the dtypes are not allowed or the shapes or action count are invalid.
        """
        spec = cls(
            env_id=msg.env_id,
            observation_dtype=msg.observation_dtype,
            observation_shape=tuple(int(d) for d in msg.observation_shape),
            action_dtype=msg.action_dtype,
            action_shape=tuple(int(d) for d in msg.action_shape),
            num_actions=int(msg.num_actions),
            action_low=tuple(float(x) for x in msg.action_low),
            action_high=tuple(float(x) for x in msg.action_high),
        )
        for name in ("observation_dtype", "action_dtype"):
            if getattr(spec, name) not in ALLOWED_DTYPES:
                raise WireError(f"env_spec.{name}: {getattr(spec, name)!r} is not allowed")
        for name in ("observation_shape", "action_shape"):
            if len(getattr(spec, name)) > MAX_RANK:
                raise WireError(
                    f"env_spec.{name}: at most {MAX_RANK} dimensions, got "
                    f"{len(getattr(spec, name))}"
                )
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
            raise WireError(
                f"env_spec.action_low/high: expected {size} bounds each (one per "
                f"action element) or none, got {len(low)} and {len(high)}"
            )
        for i, (lo, hi) in enumerate(zip(low, high)):
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise WireError(
                    f"env_spec.action_low/high[{i}]: need finite low <= high, "
                    f"got [{lo}, {hi}] (an unbounded space sends no bounds)"
                )

    @property
    def observation_bytes(self) -> int:
        """Bytes of one observation (exact, however large the shape)."""
        return math.prod(self.observation_shape) * np.dtype(self.observation_dtype).itemsize

    def to_json(self) -> dict:
        """The spec as plain JSON data (``env_spec.json`` beside a run, the learner's
        ``--env-spec``), keyed as in the protobuf message."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in dataclasses.fields(self)
        }

    @classmethod
    def from_json(cls, data: object) -> "EnvSpec":
        """Reads a spec written by :meth:`to_json`, with the checks of :meth:`from_proto`.

        Raises:
          WireError: a missing, unknown or mistyped key, or a spec :meth:`from_proto` refuses.
        """
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        required = {
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        if not isinstance(data, dict) or not required <= set(data) <= names:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise WireError(f"env spec: expected the keys {sorted(names)}, got {got}")
        try:
            msg = seedrl_pb2.EnvSpec(**data)
        except (TypeError, ValueError) as exc:
            raise WireError(f"env spec: {exc}") from None
        return cls.from_proto(msg)

    def to_message(self) -> str:
        """The spec as a container's termination message (what the operator reads from the
        env-spec Job's pod): compact JSON, or when that is longer than
        :data:`TERMINATION_MESSAGE_BYTES` (hundreds of action bounds), zlib-compressed and
        base64-encoded after a ``zlib+base64:`` prefix.

        Raises:
          WireError: even compressed, it does not fit.
        """
        text = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)
        if len(text.encode()) <= TERMINATION_MESSAGE_BYTES:
            return text
        packed = _PACKED + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
        if len(packed) > TERMINATION_MESSAGE_BYTES:
            raise WireError(
                f"env spec: {len(text.encode())} bytes of JSON, {len(packed)} compressed: more "
                f"than the {TERMINATION_MESSAGE_BYTES} a termination message holds"
            )
        return packed

    @classmethod
    def from_message(cls, text: str) -> "EnvSpec":
        """Reads a spec written by :meth:`to_message`, with the checks of :meth:`from_json`.

        Raises:
          WireError: not such a message, or not a valid spec.
        """
        raw = text.strip()
        if raw.startswith(_PACKED):
            try:
                packed = base64.b64decode(raw[len(_PACKED) :], validate=True)
                inflate = zlib.decompressobj()
                raw = inflate.decompress(packed, MAX_SPEC_FILE_BYTES + 1).decode()
            except (binascii.Error, zlib.error, UnicodeDecodeError) as exc:
                raise WireError(f"env spec message: {exc}") from None
            if len(raw) > MAX_SPEC_FILE_BYTES or inflate.unconsumed_tail:
                raise WireError(f"env spec message: over {MAX_SPEC_FILE_BYTES} bytes unpacked")
        try:
            return cls.from_json(json.loads(raw))
        except ValueError as exc:
            raise WireError(f"env spec message: {exc}") from None

    @classmethod
    def read(cls, path: str) -> "EnvSpec":
        """Reads a spec from a JSON file written with :meth:`to_json`, or one holding a
        message of :meth:`to_message`.

        Raises:
          OSError: the file cannot be read.
          WireError: it is not JSON, too large, or not a valid spec.
        """
        with open(path, "rb") as fh:
            data = fh.read(MAX_SPEC_FILE_BYTES + 1)
        if len(data) > MAX_SPEC_FILE_BYTES:
            raise WireError(f"{path}: over {MAX_SPEC_FILE_BYTES} bytes, not an env spec")
        try:
            # Also a message of :meth:`to_message`, as the operator copies it from the
            # env-spec Job's pod into the learner's ConfigMap.
            return cls.from_message(data.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise WireError(f"{path}: {exc}") from None

    def describe(self) -> str:
        """One line for people: ``float32[4] observations, 2 discrete actions``."""
        obs = f"{self.observation_dtype}{list(self.observation_shape)} observations"
        if self.discrete:
            return f"{obs}, {self.num_actions} discrete actions"
        bounds = ""
        if self.action_low:
            low, high = min(self.action_low), max(self.action_high)
            bounds = f" in [{low:g}, {high:g}]"
        return f"{obs}, {self.action_dtype}{list(self.action_shape)} actions{bounds}"

    def differences(
        self, other: "EnvSpec", mine: str = "learner", theirs: str = "actor"
    ) -> list[str]:
        """Human-readable differences from another spec (empty when they match); ``mine``
        and ``theirs`` name the holders of the two specs."""
        out = []
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append(f"{f.name}: {mine} has {a!r}, {theirs} has {b!r}")
        return out
