"""Unrolls are assembled per stream with a one-step overlap, then split and stacked."""

import numpy as np
import pytest

from seedrl.learner.trajectories import UnrollBuilder, split_unroll, stack_unrolls

FIELDS = {"observation": ((3,), np.dtype(np.float32)), "action": ((), np.dtype(np.int32))}


def row(t, k=2):
    return {
        "observation": np.full((k, 3), t, np.float32),
        "action": np.arange(k, dtype=np.int32) + 10 * t,
    }


def test_unrolls_have_t_plus_one_rows_and_overlap_by_one():
    builder = UnrollBuilder(unroll_length=3, num_envs=2, fields=FIELDS)
    out = [builder.append(row(t), [np.full((2, 1), t, np.float32)]) for t in range(7)]
    assert [u is None for u in out] == [True, True, True, False, True, True, False]
    first, second = out[3], out[6]
    assert first["observation"].shape == (4, 2, 3)
    assert first["observation"][:, 0, 0].tolist() == [0, 1, 2, 3]
    assert second["observation"][:, 0, 0].tolist() == [3, 4, 5, 6]
    assert second["action"][:, 1].tolist() == [31, 41, 51, 61]
    # The recurrent state recorded is the one before each unroll's first row.
    assert first["initial_state"][0][:, 0].tolist() == [0, 0]
    assert second["initial_state"][0][:, 0].tolist() == [3, 3]


def test_emitted_unrolls_are_not_changed_by_later_steps():
    builder = UnrollBuilder(unroll_length=2, num_envs=2, fields=FIELDS)
    unroll = [builder.append(row(t)) for t in range(3)][-1]
    snapshot = unroll["observation"].copy()
    for t in range(3, 6):
        builder.append(row(t))
    np.testing.assert_array_equal(unroll["observation"], snapshot)


def test_reset_drops_the_partial_unroll():
    builder = UnrollBuilder(unroll_length=2, num_envs=2, fields=FIELDS)
    builder.append(row(0))
    builder.append(row(1))
    builder.reset()
    out = [builder.append(row(t)) for t in (5, 6, 7)]
    assert out[-1]["observation"][:, 0, 0].tolist() == [5, 6, 7]


def test_split_then_stack_gives_a_time_major_batch():
    builder = UnrollBuilder(unroll_length=2, num_envs=3, fields=FIELDS)
    state = [np.arange(6, dtype=np.float32).reshape(3, 2)]
    unroll = [builder.append(row(t, k=3), state) for t in range(3)][-1]
    singles = split_unroll(unroll)
    assert len(singles) == 3 and singles[1]["action"].tolist() == [1, 11, 21]
    batch = stack_unrolls([singles[2], singles[0]])
    assert batch["action"].shape == (3, 2)
    assert batch["action"][:, 0].tolist() == [2, 12, 22]
    assert batch["initial_state"][0].tolist() == [[4, 5], [0, 1]]


def test_sequences_overlap_by_length_minus_period_with_their_states():
    builder = UnrollBuilder(0, 1, {"x": ((), np.dtype(np.int64))}, length=6, period=3)
    out = []
    for t in range(15):
        unroll = builder.append({"x": np.array([t])}, [np.array([[float(t)]])])
        if unroll is not None:
            out.append(unroll)
    assert [u["x"][:, 0].tolist() for u in out] == [
        [0, 1, 2, 3, 4, 5],
        [3, 4, 5, 6, 7, 8],
        [6, 7, 8, 9, 10, 11],
        [9, 10, 11, 12, 13, 14],
    ]
    assert [u["initial_state"][0][0, 0] for u in out] == [0.0, 3.0, 6.0, 9.0]


def test_sequences_may_overlap_more_than_half_as_r2d2s_do():
    # R2D2's layout with burn-in 5 and 4 trained steps: 10 rows every 4, so a row can belong
    # to three sequences; each keeps the state of its own first row.
    builder = UnrollBuilder(0, 1, {"x": ((), np.dtype(np.int64))}, length=10, period=4)
    out = []
    for t in range(30):
        unroll = builder.append({"x": np.array([t])}, [np.array([[float(t)]])])
        if unroll is not None:
            out.append(unroll)
    assert [u["x"][0, 0] for u in out] == [0, 4, 8, 12, 16, 20]
    assert all(u["x"][:, 0].tolist() == list(range(u["x"][0, 0], u["x"][0, 0] + 10)) for u in out)
    assert [u["initial_state"][0][0, 0] for u in out] == [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]


def test_disjoint_sequences_and_bad_periods():
    builder = UnrollBuilder(0, 1, {"x": ((), np.dtype(np.int64))}, length=3, period=3)
    out = [u for t in range(9) if (u := builder.append({"x": np.array([t])}, [])) is not None]
    assert [u["x"][:, 0].tolist() for u in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    for period in (0, 7):
        with pytest.raises(ValueError, match="period"):
            UnrollBuilder(0, 1, {"x": ((), np.dtype(np.int64))}, length=6, period=period)


def _padded_stream(steps, length, period, prefix, k=1):
    """Unrolls of a stream whose step t holds x = t + 1 (0 is the padding's) and state t."""
    builder = UnrollBuilder(0, k, {"x": ((), np.dtype(np.int64))}, length, period, prefix)
    out = []
    for t in range(steps):
        state = [np.full((k, 1), float(t), np.float32)]
        unroll = builder.append({"x": np.full(k, t + 1)}, state)
        if unroll is not None:
            out.append(unroll)
    return builder, out


def test_a_prefix_of_zero_rows_opens_a_stream_as_seeds_r2d2_pads_its_burn_in():
    # Burn-in 4, 3 trained steps and the bootstrap row: 8 rows every 3, after 4 zero rows.
    # The first sequences begin before the stream's first step, so that its first steps are
    # trained as every other: each sequence's trained rows (4..6) follow on from the last's.
    _, out = _padded_stream(16, length=8, period=3, prefix=4)
    assert [u["x"][:, 0].tolist() for u in out] == [
        [0, 0, 0, 0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4, 5, 6, 7],
        [3, 4, 5, 6, 7, 8, 9, 10],
        [6, 7, 8, 9, 10, 11, 12, 13],
        [9, 10, 11, 12, 13, 14, 15, 16],
    ]
    trained = [x for u in out for x in u["x"][4:7, 0].tolist()]
    assert trained == list(range(1, 16))
    assert [u["padding"][:, 0].tolist().count(True) for u in out] == [4, 1, 0, 0, 0]
    assert all(u["padding"][:, 0].tolist() == [x == 0 for x in u["x"][:, 0]] for u in out)
    # A sequence that begins in the padding starts from the state of the stream's first step.
    assert [u["initial_state"][0][0, 0] for u in out] == [0.0, 0.0, 2.0, 5.0, 8.0]


def test_a_prefix_longer_than_the_period_pads_several_sequences():
    _, out = _padded_stream(9, length=8, period=2, prefix=5, k=2)
    assert [u["x"][:, 1].tolist() for u in out] == [
        [0, 0, 0, 0, 0, 1, 2, 3],
        [0, 0, 0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 5, 6, 7],
        [2, 3, 4, 5, 6, 7, 8, 9],
    ]
    assert [u["padding"].sum(axis=0).tolist() for u in out] == [[5, 5], [3, 3], [1, 1], [0, 0]]
    assert [u["initial_state"][0][:, 0].tolist() for u in out] == [[0, 0], [0, 0], [0, 0], [1, 1]]


def test_a_reset_pads_the_restarted_stream_again():
    builder, _ = _padded_stream(6, length=4, period=2, prefix=2)
    builder.reset()
    out = [builder.append({"x": np.array([t])}, [np.array([[t]], np.float32)]) for t in (7, 8)]
    assert out[-1]["x"][:, 0].tolist() == [0, 0, 7, 8]
    assert out[-1]["padding"][:, 0].tolist() == [True, True, False, False]
    assert out[-1]["initial_state"][0][0, 0] == 7.0


def test_bad_prefixes():
    fields = {"x": ((), np.dtype(np.int64))}
    for prefix in (-1, 6):
        with pytest.raises(ValueError, match="prefix"):
            UnrollBuilder(0, 1, fields, length=6, period=2, prefix=prefix)
    with pytest.raises(ValueError, match="padding"):
        UnrollBuilder(0, 1, {"padding": ((), np.dtype(bool))}, length=6, period=2, prefix=1)
    # Without a prefix, unrolls carry no padding field.
    _, out = _padded_stream(4, length=4, period=2, prefix=0)
    assert "padding" not in out[0] and out[0]["x"][:, 0].tolist() == [1, 2, 3, 4]
