"""A Hello is checked against the Experiment and the learner's env spec before any allocation."""

import pytest

from seedrl.common.config import parse_experiment
from seedrl.common.wire import MAX_MESSAGE_BYTES, EnvSpec
from seedrl.learner.streams import HandshakeError, check_hello

SPEC = EnvSpec("Counting-v0", "float32", (1,), "int32", (), 2)


def _spec(**actors):
    return parse_experiment(
        {"metadata": {"name": "t"}, "spec": {"env": {"id": SPEC.env_id}, "actors": actors}}
    ).spec


def _refusal(*args) -> HandshakeError:
    with pytest.raises(HandshakeError) as info:
        check_hello(*args)
    return info.value


def test_a_hello_within_the_experiment_passes_before_and_after_the_build():
    spec = _spec(envsPerActor=8, streamsPerActor=2)
    check_hello(spec, 4, SPEC, None)
    check_hello(spec, 4, SPEC, SPEC)


def test_more_envs_than_one_stream_of_the_experiment_steps_are_refused():
    spec = _spec(envsPerActor=8, streamsPerActor=2)
    error = _refusal(spec, 5, SPEC, SPEC)
    assert error.code == "INVALID_ARGUMENT"
    assert "hello.num_envs: must be in [1, 4]" in str(error)
    assert _refusal(spec, 0, SPEC, SPEC).code == "INVALID_ARGUMENT"


def test_before_the_build_the_hello_must_name_the_experiments_env():
    other = EnvSpec("Other-v0", "float32", (1,), "int32", (), 2)
    error = _refusal(_spec(), 1, other, None)
    assert error.code == "FAILED_PRECONDITION"
    assert "'Counting-v0'" in str(error) and "'Other-v0'" in str(error)


def test_after_the_build_the_hello_must_match_the_learners_spec():
    wider = EnvSpec("Counting-v0", "float32", (2,), "int32", (), 2)
    error = _refusal(_spec(), 1, wider, SPEC)
    assert error.code == "FAILED_PRECONDITION"
    assert "observation_shape" in str(error)


def test_steps_that_would_not_fit_a_message_are_refused():
    # Each observation fits alone; the stream's envs together do not.
    width = MAX_MESSAGE_BYTES // 4 // 2 + 1
    big = EnvSpec("Counting-v0", "float32", (width,), "int32", (), 2)
    error = _refusal(_spec(envsPerActor=2), 2, big, big)
    assert error.code == "INVALID_ARGUMENT"
    assert "message limit" in str(error)
    huge = EnvSpec("Counting-v0", "float32", (MAX_MESSAGE_BYTES,), "int32", (), 2)
    assert "hello.env_spec.observation_shape" in str(_refusal(_spec(), 1, huge, None))
