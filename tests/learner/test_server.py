"""The learner's gRPC service over a real unix socket: handshake, batched actions, bad input."""

import time

import grpc
import numpy as np
import pytest

from seedrl.common import seedrl_pb2
from seedrl.common.wire import EnvSpec, decode_array

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


def test_episodes_are_counted_toward_the_mean_return(learner):
    s = connect(learner)
    s.send(step(episodes=[(0, 10.0, 10), (1, 30.0, 30)]))
    actions_of(s.recv())
    s.close()
    assert learner.runtime.episodes == 2
    assert learner.runtime.mean_return == 20.0


BAD_STEPS = {
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


def test_a_learner_stopping_early_sends_its_actors_to_reconnect_not_home(learner):
    s = connect(learner)
    s.send(step())
    actions_of(s.recv())
    # A signal (drain, preemption, suspend): the run is not finished, so the actors must not
    # exit as if it were; UNAVAILABLE is what they retry until the next learner serves.
    learner.runtime.finish("terminated")
    s.send(step())
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "before the experiment is finished" in err.value.details()
    s.close()


def test_assign_index_grants_unique_indices_and_the_welcome_confirms_them(learner):
    stub_channel = grpc.insecure_channel(learner.address)
    from seedrl.common import seedrl_pb2_grpc

    stub = seedrl_pb2_grpc.LearnerStub(stub_channel)
    name = learner.runtime.experiment.metadata.name
    grants = [stub.AssignIndex(seedrl_pb2.IndexRequest(experiment=name, actor_id=f"pod-{i}"),
                               timeout=10).actor_index for i in range(3)]
    assert sorted(grants) == grants and len(set(grants)) == 3
    with pytest.raises(grpc.RpcError) as refused:
        stub.AssignIndex(seedrl_pb2.IndexRequest(experiment="other", actor_id="x"), timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # Each streams with its grant; one that claims an index another live actor holds acts as
    # another one, and the Welcome says which.
    a = Stream(learner.address)
    a.send(hello(actor_id="pod-0", actor_index=grants[0]))
    assert a.recv().welcome.actor_index == grants[0]
    b = Stream(learner.address)
    b.send(hello(actor_id="pod-9", actor_index=grants[0]))
    other = b.recv().welcome.actor_index
    assert other not in grants
    b.send(step(2))
    actions_of(b.recv())
    (stream,) = [st for st in learner.runtime._streams.values() if st.actor_id == "pod-9"]
    assert stream.actor_index == other
    a.close()
    b.close()
    stub_channel.close()
