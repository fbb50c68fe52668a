"""The learner's gRPC service over a real unix socket: handshake, batched actions, bad input."""

import time

import grpc
import numpy as np
import pytest

from seedrl.common import seedrl_pb2
from seedrl.common.wire import EnvSpec, decode_array, encode_array

from support.learner_harness import Stream, hello, step


def connect(learner, **kw):
    s = Stream(learner.address)
    s.send(hello(**kw))
    reply = s.recv()
    assert reply.WhichOneof("kind") == "welcome"
    return s


def actions_of(reply, k=2):
    assert reply.WhichOneof("kind") == "actions"
    return decode_array(reply.actions.actions, "actions", "int32", (k,))


def test_handshake_then_one_action_per_env(learner):
    s = connect(learner, num_envs=3)
    for _ in range(12):
        s.send(step(3, obs=np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)))
        acts = actions_of(s.recv(), 3)
        assert set(acts.tolist()) <= {0, 1}
    s.close()
    assert learner.runtime.env_steps == 36
    # 12 steps with unroll length 5 (6 rows, overlapping by one) complete 2 unrolls per env:
    # 6 unrolls, and so 3 training steps of batch size 2.
    deadline = time.monotonic() + 60
    while learner.runtime.learner_steps < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert learner.runtime.learner_steps == 3
    assert set(learner.runtime.last_metrics) >= {"loss/total", "loss/policy", "loss/value"}


def test_the_hello_carries_the_actor_index_to_the_stream(learner):
    s = connect(learner, actor_id="seventh", actor_index=7)
    s.send(step(2))
    actions_of(s.recv())
    (stream,) = [st for st in learner.runtime._streams.values() if st.actor_id == "seventh"]
    assert stream.actor_index == 7
    s.close()


def test_final_observations_of_truncated_episodes_are_taken_and_first_env_reaches_the_stream(
        learner):
    s = Stream(learner.address)
    msg = hello(actor_id="split")
    msg.hello.first_env = 6
    s.send(msg)
    assert s.recv().WhichOneof("kind") == "welcome"
    s.send(step())
    actions_of(s.recv())
    s.send(truncated_step())
    actions_of(s.recv())
    (stream,) = [st for st in learner.runtime._streams.values() if st.actor_id == "split"]
    assert stream.first_env == 6
    s.close()


def test_episodes_are_counted_toward_the_mean_return(learner):
    s = connect(learner)
    s.send(step(episodes=[(0, 10.0, 10), (1, 30.0, 30)]))
    actions_of(s.recv())
    s.close()
    assert learner.runtime.episodes == 2
    assert learner.runtime.mean_return == 20.0


def truncated_step(final_ids=(1,), final_obs=None, truncated=(False, True),
                   terminated=(False, False)):
    """A step of 2 envs where some episodes were cut, with their final observations."""
    msg = step()
    msg.step.truncated[:] = list(truncated)
    msg.step.terminated[:] = list(terminated)
    msg.step.final_env_ids.extend(final_ids)
    final_obs = np.full((len(final_ids), 4), 7, np.float32) if final_obs is None else final_obs
    msg.step.final_observations.CopyFrom(
        final_obs if isinstance(final_obs, seedrl_pb2.Tensor) else encode_array(final_obs))
    return msg


BAD_STEPS = {
    "final obs of a running env": (truncated_step(truncated=(False, False)),
                                   "only envs truncated"),
    "final obs of a terminated env": (truncated_step(terminated=(False, True)),
                                      "only envs truncated"),
    "final env id out of range": (truncated_step(final_ids=(2,), truncated=(True, True)),
                                  "step.final_env_ids: must be distinct env ids below 2"),
    "final obs of the wrong shape": (truncated_step(final_obs=np.zeros((1, 5), np.float32)),
                                     "step.final_observations: expected shape [1, 4]"),
    "wrong dtype": (step(obs=np.zeros((2, 4), np.float64)), "expected dtype float32"),
    "wrong shape": (step(obs=np.zeros((2, 5), np.float32)), "expected shape [2, 4]"),
    "byte count": (step(obs=seedrl_pb2.Tensor(dtype="float32", shape=[2, 4], data=b"\0" * 7)),
                   "needs 32 bytes, got 7"),
    "pickle dtype": (step(obs=seedrl_pb2.Tensor(dtype="object", shape=[2, 4], data=b"")),
                     "not allowed"),
    "duplicate env ids": (step(env_ids=[0, 0]), "permutation"),
    "env id out of range": (step(env_ids=[0, 2]), "permutation"),
    "too few rewards": (step(rewards=[1.0]), "step.rewards: expected 2 values"),
    "nan reward": (step(rewards=[float("nan"), 0.0]), "must be finite"),
    "episode of another env": (step(episodes=[(5, 1.0, 1)]), "not an env of this actor"),
    "second hello": (hello(), "expected a step"),
}


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_a_malformed_message_fails_only_its_own_stream(learner, case):
    bad_msg, reason = BAD_STEPS[case]
    good = connect(learner, actor_id="good")
    bad = connect(learner, actor_id="bad")
    good.send(step())
    actions_of(good.recv())
    bad.send(step())
    actions_of(bad.recv())
    bad.send(bad_msg)
    with pytest.raises(grpc.RpcError) as err:
        bad.recv()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in err.value.details()
    # The other stream is served as before, and new streams are still welcome.
    for _ in range(3):
        good.send(step())
        actions_of(good.recv())
    again = connect(learner, actor_id="bad")
    again.send(step())
    actions_of(again.recv())
    for s in (good, bad, again):
        s.close()


@pytest.mark.parametrize("kwargs,code,reason", [
    ({"version": 99}, grpc.StatusCode.FAILED_PRECONDITION, "protocol version 99"),
    ({"experiment": "other"}, grpc.StatusCode.FAILED_PRECONDITION, "serves experiment"),
    ({"num_envs": 0}, grpc.StatusCode.INVALID_ARGUMENT, "num_envs"),
    ({"spec": EnvSpec("X", "float32", (4,), "float32", (2, 3), 0)},
     grpc.StatusCode.FAILED_PRECONDITION, "must be a vector"),
])
def test_bad_handshakes_are_refused_with_a_reason(learner, kwargs, code, reason):
    s = Stream(learner.address)
    s.send(hello(**kwargs))
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == code
    assert reason in err.value.details()
    s.close()


def test_an_actor_with_a_different_env_spec_is_refused(learner):
    first = connect(learner, actor_id="first")
    other = EnvSpec("CartPole-v1", "float32", (6,), "int32", (), 2)
    s = Stream(learner.address)
    s.send(hello(actor_id="second", spec=other))
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "observation_shape" in err.value.details()
    first.send(step())
    actions_of(first.recv())
    first.close()
    s.close()


def test_first_message_must_be_a_hello(learner):
    s = Stream(learner.address)
    s.send(step())
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    s.close()


def test_streams_are_told_when_the_run_is_finished(learner):
    s = connect(learner)
    s.send(step())
    actions_of(s.recv())
    learner.runtime.finish("max_env_steps")
    s.send(step())
    assert s.recv().finished
    s.close()
