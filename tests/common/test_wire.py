"""Tests of arrays and environment specs on the wire (common/wire.py)."""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib

import numpy as np
import pytest

from seedrl.common import seedrl_pb2
from seedrl.common.wire import (
    ALLOWED_DTYPES,
    TERMINATION_MESSAGE_BYTES,
    EnvSpec,
    WireError,
    decode_array,
    encode_array,
)


# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------

CASES = [
    np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    np.arange(-5, 5, dtype=np.int64),
    np.array([[True, False], [False, True]]),
    np.array(3.5, dtype=np.float64),  # 0-d
    np.array(7, dtype=np.int32),  # 0-d
    np.zeros((0,), dtype=np.float32),  # empty
    np.zeros((2, 0, 3), dtype=np.int16),  # empty, inner zero
    np.random.default_rng(0).integers(0, 256, (4, 84, 84), dtype=np.uint8),  # frames
    np.array([-128, 0, 127], dtype=np.int8),
    np.array([0, 65535], dtype=np.uint16),
    np.array([1.5, -0.0, np.inf], dtype=np.float16),
    np.array([np.nan, 1e300], dtype=np.float64),
]


@pytest.mark.parametrize("array", CASES, ids=[f"{a.dtype}{list(a.shape)}" for a in CASES])
def test_round_trip(array):
    msg = encode_array(array)
    assert msg.dtype == array.dtype.name
    assert list(msg.shape) == list(array.shape)
    assert len(msg.data) == array.size * array.dtype.itemsize
    out = decode_array(msg, "x", dtype=array.dtype.name, shape=array.shape)
    assert out.dtype == array.dtype
    assert out.shape == array.shape
    np.testing.assert_array_equal(out, array)


@pytest.mark.parametrize("array", CASES, ids=[f"{a.dtype}{list(a.shape)}" for a in CASES])
def test_round_trip_through_serialized_message(array):
    wire = encode_array(array).SerializeToString()
    msg = seedrl_pb2.Tensor.FromString(wire)
    np.testing.assert_array_equal(decode_array(msg, "x"), array)


def test_bytes_are_little_endian_c_order():
    msg = encode_array(np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert msg.data == np.array([1, 2, 3, 4], dtype="<i4").tobytes()
    assert msg.data[:4] == b"\x01\x00\x00\x00"


def test_big_endian_input_sent_little_endian():
    big = np.array([1, 256, -2], dtype=">i4")
    msg = encode_array(big)
    assert msg.dtype == "int32"
    assert msg.data == np.array([1, 256, -2], dtype="<i4").tobytes()
    np.testing.assert_array_equal(decode_array(msg, "x", dtype="int32"), [1, 256, -2])


def test_python_lists_and_scalars_encode():
    np.testing.assert_array_equal(decode_array(encode_array([1.0, 2.0]), "x"), [1.0, 2.0])
    assert decode_array(encode_array(np.float32(2.5)), "x").shape == ()


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2],
        lambda a: a.T,
        lambda a: a[::-1, 1:3],
        lambda a: np.asfortranarray(a),
    ],
    ids=["strided", "transposed", "reversed", "fortran"],
)
def test_non_contiguous_round_trip(make):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = make(base)
    out = decode_array(encode_array(view), "x", shape=view.shape)
    np.testing.assert_array_equal(out, view)
    assert out.flags.c_contiguous


def test_decoded_array_is_read_only_view():
    msg = encode_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = decode_array(msg, "obs")
    assert not out.flags.writeable
    assert not out.flags.owndata
    with pytest.raises(ValueError):
        out[0, 0] = 1.0
    # It views the message's own bytes rather than a copy of them.
    base = out
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, bytes)
    assert base == msg.data


def test_decoded_uint8_frames_are_read_only():
    frames = np.full((4, 84, 84), 7, dtype=np.uint8)
    out = decode_array(encode_array(frames), "frames", dtype="uint8", shape=(4, 84, 84))
    with pytest.raises(ValueError):
        out[...] = 0


def test_encode_rejects_disallowed_dtypes():
    for array in (
        np.array([1 + 2j], dtype=np.complex64),
        np.array([object()], dtype=object),
        np.array(["abc"]),
        np.array([1], dtype=np.uint64),
    ):
        with pytest.raises(WireError, match="cannot be sent"):
            encode_array(array)


def _tensor(dtype="float32", shape=(2,), data=None):
    if data is None:
        data = b"\x00" * 8
    return seedrl_pb2.Tensor(dtype=dtype, shape=list(shape), data=data)


def test_decode_wrong_dtype():
    with pytest.raises(WireError) as e:
        decode_array(encode_array(np.zeros(3, np.float64)), "obs", dtype="float32")
    assert str(e.value) == "obs: expected dtype float32, got float64"


def test_decode_wrong_shape():
    with pytest.raises(WireError) as e:
        decode_array(encode_array(np.zeros((2, 3), np.float32)), "rewards", shape=(3, 2))
    assert str(e.value) == "rewards: expected shape [3, 2], got [2, 3]"


def test_decode_wrong_rank():
    with pytest.raises(WireError, match=r"^rewards: expected shape \[6\], got \[2, 3\]"):
        decode_array(encode_array(np.zeros((2, 3), np.float32)), "rewards", shape=[6])


@pytest.mark.parametrize("data", [b"", b"\x00" * 7, b"\x00" * 9, b"\x00" * 16])
def test_decode_byte_count_mismatch(data):
    with pytest.raises(WireError) as e:
        decode_array(_tensor(data=data), "actions")
    assert str(e.value) == (f"actions: shape [2] of float32 needs 8 bytes, got {len(data)}")


def test_decode_byte_count_mismatch_zero_d_and_empty():
    with pytest.raises(WireError, match=r"^x: .*needs 4 bytes, got 0"):
        decode_array(_tensor(shape=(), data=b""), "x")
    with pytest.raises(WireError, match=r"^x: .*needs 0 bytes, got 4"):
        decode_array(_tensor(shape=(0, 5), data=b"\x00" * 4), "x")


@pytest.mark.parametrize(
    "dtype", ["object", "complex64", "uint64", "float", "int", "", "<f4", "str"]
)
def test_decode_disallowed_dtype(dtype):
    with pytest.raises(WireError) as e:
        decode_array(_tensor(dtype=dtype), "obs")
    assert str(e.value) == f"obs: dtype {dtype!r} is not allowed on the wire"


def test_decode_disallowed_dtype_even_when_expected():
    with pytest.raises(WireError, match="^obs: dtype 'object' is not allowed"):
        decode_array(_tensor(dtype="object"), "obs", dtype="object")


@pytest.mark.parametrize("shape", [(-1,), (2, -4), (-2, -1)])
def test_decode_negative_dims(shape):
    with pytest.raises(WireError) as e:
        decode_array(_tensor(shape=shape, data=b"\x00" * 8), "obs")
    assert str(e.value).startswith("obs: negative dimension in shape")
    assert str(list(shape)) in str(e.value)


def test_decode_accepts_any_allowed_dtype_without_expectation():
    for dtype in sorted(ALLOWED_DTYPES):
        array = np.zeros((2, 3), dtype=dtype)
        out = decode_array(encode_array(array), "x")
        assert out.dtype == np.dtype(dtype)
        assert out.shape == (2, 3)


def test_wire_error_is_value_error():
    assert issubclass(WireError, ValueError)


# --------------------------------------------------------------------------------------------
# EnvSpec
# --------------------------------------------------------------------------------------------

CARTPOLE = EnvSpec(
    env_id="CartPole-v1",
    observation_dtype="float32",
    observation_shape=(4,),
    action_dtype="int32",
    action_shape=(),
    num_actions=2,
)
PENDULUM = EnvSpec(
    env_id="Pendulum-v1",
    observation_dtype="float32",
    observation_shape=(3,),
    action_dtype="float32",
    action_shape=(1,),
    num_actions=0,
)
ATARI = EnvSpec(
    env_id="ALE/Pong-v5",
    observation_dtype="uint8",
    observation_shape=(4, 84, 84),
    action_dtype="int32",
    action_shape=(),
    num_actions=6,
)


@pytest.mark.parametrize("spec", [CARTPOLE, PENDULUM, ATARI], ids=lambda s: s.env_id)
def test_env_spec_round_trip(spec):
    msg = spec.to_proto()
    assert isinstance(msg, seedrl_pb2.EnvSpec)
    back = EnvSpec.from_proto(seedrl_pb2.EnvSpec.FromString(msg.SerializeToString()))
    assert back == spec
    assert isinstance(back.observation_shape, tuple)
    assert isinstance(back.action_shape, tuple)
    assert back.differences(spec) == []


def test_discrete():
    assert CARTPOLE.discrete
    assert not PENDULUM.discrete


def _msg(**changes) -> seedrl_pb2.EnvSpec:
    return dataclasses.replace(CARTPOLE, **changes).to_proto()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"observation_dtype": "object"}, "env_spec.observation_dtype"),
        ({"observation_dtype": "complex64"}, "env_spec.observation_dtype"),
        ({"action_dtype": "int"}, "env_spec.action_dtype"),
        ({"action_dtype": ""}, "env_spec.action_dtype"),
    ],
)
def test_from_proto_rejects_bad_dtypes(changes, field):
    with pytest.raises(WireError) as e:
        EnvSpec.from_proto(_msg(**changes))
    assert str(e.value).startswith(f"{field}: ")
    assert "not allowed" in str(e.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"observation_shape": (0,)},
        {"observation_shape": (4, -1)},
        {"action_shape": (0,), "action_dtype": "float32", "num_actions": 0},
        {"action_shape": (-2,), "action_dtype": "float32", "num_actions": 0},
    ],
)
def test_from_proto_rejects_non_positive_dims(changes):
    with pytest.raises(WireError, match="positive dimensions"):
        EnvSpec.from_proto(_msg(**changes))


def test_from_proto_rejects_negative_num_actions():
    with pytest.raises(WireError, match=r"^env_spec\.num_actions: must be >= 0"):
        EnvSpec.from_proto(_msg(num_actions=-1))


@pytest.mark.parametrize(
    "changes",
    [
        {"action_dtype": "int64"},
        {"action_dtype": "float32"},
        {"action_shape": (1,)},
    ],
)
def test_from_proto_rejects_bad_discrete_actions(changes):
    with pytest.raises(WireError, match="discrete actions must be int32 scalars"):
        EnvSpec.from_proto(_msg(**changes))


def test_from_proto_accepts_scalar_observations():
    spec = dataclasses.replace(CARTPOLE, observation_shape=())
    assert EnvSpec.from_proto(spec.to_proto()) == spec


def test_differences_lists_each_differing_field():
    other = dataclasses.replace(CARTPOLE, observation_shape=(8,), num_actions=3)
    diffs = CARTPOLE.differences(other)
    assert len(diffs) == 2
    assert diffs[0].startswith("observation_shape: ")
    assert "(4,)" in diffs[0] and "(8,)" in diffs[0]
    assert diffs[1] == "num_actions: learner has 2, actor has 3"


def test_differences_all_fields():
    diffs = CARTPOLE.differences(PENDULUM)
    names = [d.split(":")[0] for d in diffs]
    assert names == ["env_id", "observation_shape", "action_dtype", "action_shape", "num_actions"]


def test_differences_empty_for_equal_specs():
    assert CARTPOLE.differences(dataclasses.replace(CARTPOLE)) == []
    assert ATARI.differences(EnvSpec.from_proto(ATARI.to_proto())) == []


# --------------------------------------------------------------------------------------------
# Action bounds: the policy's [-1, 1] onto the env's range
# --------------------------------------------------------------------------------------------


def _bounded(low, high):
    return EnvSpec("Box-v0", "float32", (3,), "float32", (len(low),), 0, tuple(low), tuple(high))


@pytest.mark.parametrize(
    "low,high",
    [((-0.4,), (0.4,)), ((-2.0,), (2.0,)), ((0.0,), (5.0,))],
    ids=["humanoid-0.4", "pendulum-2", "asymmetric-0-5"],
)
def test_the_normalised_range_maps_onto_the_whole_of_the_bounds(low, high):
    spec = _bounded(low, high)
    assert EnvSpec.from_proto(spec.to_proto()) == spec
    normalised = np.array([[-1.0], [-0.5], [0.0], [0.5], [1.0], [-3.0], [2.5]], np.float32)
    got = spec.to_env_actions(normalised)
    lo, hi = low[0], high[0]
    want = [lo, lo + 0.25 * (hi - lo), (lo + hi) / 2, lo + 0.75 * (hi - lo), hi, lo, hi]
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float32


def test_bounds_apply_per_element_and_travel_in_json():
    spec = _bounded((-1.0, 0.0, -0.4), (3.0, 5.0, 0.4))
    assert EnvSpec.from_proto(spec.to_proto()) == spec
    assert EnvSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    got = spec.to_env_actions(np.array([[0.0, 1.0, -1.0]], np.float32))
    np.testing.assert_allclose(got, [[1.0, 5.0, -0.4]], rtol=1e-6)
    assert spec.describe().endswith("float32[3] actions in [-1, 5]")


def test_discrete_and_unbounded_specs_leave_actions_alone():
    actions = np.array([1, 0, 1], np.int32)
    assert CARTPOLE.to_env_actions(actions) is actions
    raw = np.array([[3.0]], np.float32)
    assert PENDULUM.to_env_actions(raw) is raw  # an actor that sent no bounds


@pytest.mark.parametrize(
    "low,high,reason",
    [
        ((0.0,), (5.0, 6.0), "expected 1 bounds each"),
        ((1.0,), (0.0,), "need finite low <= high"),
        ((float("nan"),), (1.0,), "need finite low <= high"),
        ((-float("inf"),), (1.0,), "need finite low <= high"),
    ],
)
def test_bad_bounds_are_refused(low, high, reason):
    msg = dataclasses.replace(PENDULUM, action_low=low, action_high=high).to_proto()
    with pytest.raises(WireError, match=reason):
        EnvSpec.from_proto(msg)


def test_discrete_actions_have_no_bounds():
    msg = dataclasses.replace(CARTPOLE, action_low=(0.0,), action_high=(1.0,)).to_proto()
    with pytest.raises(WireError, match="discrete actions have no bounds"):
        EnvSpec.from_proto(msg)


def test_an_env_spec_round_trips_through_json_and_a_file(tmp_path):
    spec = EnvSpec("ALE/Pong-v5", "uint8", (84, 84, 4), "int32", (), 6)
    assert spec.to_json()["observation_shape"] == [84, 84, 4]
    path = tmp_path / "env_spec.json"
    path.write_text(json.dumps(spec.to_json()))
    assert EnvSpec.read(str(path)) == spec
    assert spec.observation_bytes == 84 * 84 * 4
    assert spec.describe() == "uint8[84, 84, 4] observations, 6 discrete actions"


@pytest.mark.parametrize(
    "data, reason",
    [
        ([], "expected the keys"),
        ({"env_id": "x"}, "expected the keys"),
        (
            {**EnvSpec("x", "float32", (4,), "int32", (), 2).to_json(), "extra": 1},
            "expected the keys",
        ),
        (
            {**EnvSpec("x", "float32", (4,), "int32", (), 2).to_json(), "num_actions": "two"},
            "env spec",
        ),
        (
            {
                **EnvSpec("x", "float32", (4,), "int32", (), 2).to_json(),
                "observation_dtype": "object",
            },
            "not allowed",
        ),
        (
            {
                **EnvSpec("x", "float32", (4,), "int32", (), 2).to_json(),
                "observation_shape": [1] * 9,
            },
            "at most 8 dimensions",
        ),
    ],
)
def test_a_bad_env_spec_file_is_refused(tmp_path, data, reason):
    with pytest.raises(WireError, match=reason):
        EnvSpec.from_json(data)
    path = tmp_path / "env_spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises(WireError, match=reason):
        EnvSpec.read(str(path))
    path.write_text("{not json")
    with pytest.raises(WireError, match="env_spec.json"):
        EnvSpec.read(str(path))


def test_an_env_spec_fits_a_termination_message_compressed_when_it_must():
    """The env-spec Job reports the spec in its termination message (4096 bytes): plain JSON
    when it fits, compressed when its action bounds make it longer, refused past that."""
    small = EnvSpec("ALE/Pong-v5", "uint8", (84, 84, 4), "int32", (), 6)
    assert json.loads(small.to_message())["num_actions"] == 6
    assert EnvSpec.from_message(small.to_message()) == small
    wide = EnvSpec("Arm-v0", "float32", (40,), "float32", (600,), 0, (-2.0,) * 600, (2.0,) * 600)
    assert len(json.dumps(wide.to_json()).encode()) > TERMINATION_MESSAGE_BYTES
    packed = wide.to_message()
    assert packed.startswith("zlib+base64:") and len(packed) <= TERMINATION_MESSAGE_BYTES
    assert EnvSpec.from_message(packed) == wide
    rng = np.random.default_rng(0)
    bounds = tuple(float(x) for x in rng.uniform(1, 2, 2000))
    noisy = EnvSpec(
        "Noisy-v0", "float32", (4,), "float32", (2000,), 0, tuple(-b for b in bounds), bounds
    )
    with pytest.raises(WireError, match="more than the 4096"):
        noisy.to_message()


@pytest.mark.parametrize(
    "message, reason",
    [
        ("", "env spec message"),
        ("not json", "env spec message"),
        ('{"env_id": "x"}', "expected the keys"),
        ("zlib+base64:!!!", "env spec message"),
        ("zlib+base64:" + base64.b64encode(b"not zlib").decode(), "env spec message"),
        # A bomb: a small message that inflates past any real spec.
        ("zlib+base64:" + base64.b64encode(zlib.compress(b" " * 10**6)).decode(), "unpacked"),
    ],
)
def test_a_bad_env_spec_message_is_refused(message, reason):
    with pytest.raises(WireError, match=reason):
        EnvSpec.from_message(message)


def test_a_file_may_hold_the_message_as_the_operator_copies_it(tmp_path):
    """The learner's --env-spec file is the env-spec pod's message copied as it is (a
    ConfigMap): plain JSON or compressed; anything else is refused with the reason."""
    wide = EnvSpec("Arm-v0", "float32", (4,), "float32", (600,), 0, (-1.0,) * 600, (1.0,) * 600)
    path = tmp_path / "env_spec.json"
    path.write_text(wide.to_message() + "\n")
    assert EnvSpec.read(str(path)) == wide
    path.write_text('{"env_id": "x"}')
    with pytest.raises(WireError, match="expected the keys"):
        EnvSpec.read(str(path))
