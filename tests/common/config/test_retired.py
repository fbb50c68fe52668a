"""An earlier release's documents read with the meaning that release gave them."""

from __future__ import annotations

from seedrl.common.config import parse_experiment, to_document
from seedrl.common.config.retired import fill_absent, upgrade_spec
from seedrl.common.resume import bound_changes


def _r2d2(**fields):
    return {"agent": {"name": "r2d2", "r2d2": dict(fields)}}


def test_sequence_length_counted_the_burn_in():
    spec, notes = upgrade_spec(_r2d2(sequenceLength=30, burnIn=10))
    assert spec["agent"]["r2d2"] == {"burnIn": 10, "trainLength": 20, "sequencePeriod": 20}
    assert len(notes) == 1 and notes[0].startswith("spec.agent.r2d2.sequenceLength")


def test_sequence_length_wins_over_the_crd_defaults_filled_in_on_read():
    # What the API server returns for an object stored before trainLength existed.
    stored = _r2d2(sequenceLength=80, burnIn=40, trainLength=80, sequencePeriod=40)
    spec, _ = upgrade_spec(stored)
    assert spec["agent"]["r2d2"] == {"burnIn": 40, "trainLength": 40, "sequencePeriod": 40}
    assert stored["agent"]["r2d2"]["sequenceLength"] == 80  # the input is left as it was


def test_burn_in_left_out_is_the_old_default():
    spec, _ = upgrade_spec(_r2d2(sequenceLength=80))
    assert spec["agent"]["r2d2"]["trainLength"] == 40


def test_a_spec_without_retired_fields_is_unchanged():
    spec = _r2d2(trainLength=20, burnIn=10, sequencePeriod=20)
    assert upgrade_spec(spec) == (spec, [])


def test_a_bad_sequence_length_is_left_for_the_parser():
    spec, notes = upgrade_spec(_r2d2(sequenceLength="long"))
    assert spec["agent"]["r2d2"] == {"sequenceLength": "long"} and notes == []


def test_fill_absent_keeps_what_is_written():
    written = {"a": 1, "b": {"c": 2}}
    resolved = {"a": 9, "b": {"c": 9, "d": 3}, "e": 4}
    assert fill_absent(written, resolved) == {"a": 1, "b": {"c": 2, "d": 3}, "e": 4}


def _resolved(spec):
    return to_document(parse_experiment({"metadata": {"name": "x"}, "spec": spec}).spec)


def test_a_renamed_field_is_no_change_of_the_bound_sections():
    old = {"env": {"id": "CartPole-v1"}, **_r2d2(sequenceLength=30, burnIn=10)}
    same = _resolved(
        {"env": {"id": "CartPole-v1"}, **_r2d2(trainLength=20, burnIn=10, sequencePeriod=20)}
    )
    other = _resolved(
        {"env": {"id": "CartPole-v1"}, **_r2d2(trainLength=30, burnIn=10, sequencePeriod=20)}
    )
    assert bound_changes(old, same) == []
    assert "spec.agent.r2d2.trainLength" in bound_changes(old, other)
