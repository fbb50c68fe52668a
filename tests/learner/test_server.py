"""The learner's gRPC service over a real unix socket: handshake, batched actions, bad input."""

import asyncio
import threading
import time

import grpc
import numpy as np
import pytest

from seedrl.common import seedrl_pb2
from seedrl.common.wire import EnvSpec, WireError, decode_array, encode_array
from seedrl.learner.server import LearnerService, StepChecker

from support.learner_harness import CARTPOLE, Stream, hello, start_learner, step, stop_learner


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
    (stream,) = [
        st
        for st in learner.runtime._streams.values()
        if st is not None and st.actor_id == "seventh"
    ]
    assert stream.actor_index == 7
    s.close()


def test_final_observations_of_truncated_episodes_are_taken_and_first_env_reaches_the_stream(
    learner,
):
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
    # A stream's first step may repeat episodes that ended as an earlier connection broke:
    # they began before this stream, so nothing can verify them, and they are not counted.
    s.send(step(episodes=[(0, 7.0, 70)]))
    actions_of(s.recv())
    for t in range(1, 31):
        ends = [t == 10, t == 30]
        s.send(
            step(
                rewards=[1.0, 1.0],
                terminated=ends,
                episodes=[(i, float(t), t) for i in (0, 1) if ends[i]],
            )
        )
        actions_of(s.recv())
    s.close()
    assert learner.runtime.episodes == 2
    assert learner.runtime.mean_return == 20.0
    assert learner.runtime.status().unverified_episodes == 1


@pytest.mark.parametrize(
    "episode, reason",
    [
        ((0, 11.0, 10), "add up to 10"),
        ((0, 10.0, 9), "but this stream alone sent 10 steps"),
        ((1, 10.0, 10), "env 1 did not end an episode"),
    ],
)
def test_an_episode_the_stream_saw_whole_must_match_its_rewards(learner, episode, reason):
    s = connect(learner)
    s.send(step())
    actions_of(s.recv())
    for t in range(1, 11):
        s.send(
            step(
                rewards=[1.0, 1.0],
                terminated=[t == 10, False],
                episodes=[episode] if t == 10 else (),
            )
        )
        if t < 10:
            actions_of(s.recv())
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in err.value.details()
    s.close()
    assert learner.runtime.episodes == 0


def truncated_step(
    final_ids=(1,), final_obs=None, truncated=(False, True), terminated=(False, False)
):
    """A step of 2 envs where some episodes were cut, with their final observations."""
    msg = step()
    msg.step.truncated[:] = list(truncated)
    msg.step.terminated[:] = list(terminated)
    msg.step.final_env_ids.extend(final_ids)
    final_obs = np.full((len(final_ids), 4), 7, np.float32) if final_obs is None else final_obs
    msg.step.final_observations.CopyFrom(
        final_obs if isinstance(final_obs, seedrl_pb2.Tensor) else encode_array(final_obs)
    )
    return msg


BAD_STEPS = {
    "final obs of a running env": (truncated_step(truncated=(False, False)), "only envs truncated"),
    "final obs of a terminated env": (
        truncated_step(terminated=(False, True)),
        "only envs truncated",
    ),
    "final env id out of range": (
        truncated_step(final_ids=(2,), truncated=(True, True)),
        "step.final_env_ids: must be distinct env ids below 2",
    ),
    "final obs of the wrong shape": (
        truncated_step(final_obs=np.zeros((1, 5), np.float32)),
        "step.final_observations: expected shape [1, 4]",
    ),
    "wrong dtype": (step(obs=np.zeros((2, 4), np.float64)), "expected dtype float32"),
    "wrong shape": (step(obs=np.zeros((2, 5), np.float32)), "expected shape [2, 4]"),
    "byte count": (
        step(obs=seedrl_pb2.Tensor(dtype="float32", shape=[2, 4], data=b"\0" * 7)),
        "needs 32 bytes, got 7",
    ),
    "pickle dtype": (
        step(obs=seedrl_pb2.Tensor(dtype="object", shape=[2, 4], data=b"")),
        "not allowed",
    ),
    "duplicate env ids": (step(env_ids=[0, 0]), "permutation"),
    "env id out of range": (step(env_ids=[0, 2]), "permutation"),
    "too few rewards": (step(rewards=[1.0]), "step.rewards: expected 2 values"),
    "nan reward": (step(rewards=[float("nan"), 0.0]), "must be finite"),
    "infinite reward": (step(rewards=[0.0, float("-inf")]), "step.rewards: must be finite"),
    "reward beyond maxAbsReward": (step(rewards=[2e6, 0.0]), "spec.env.maxAbsReward = 1e+06"),
    "nan observation": (
        step(obs=np.array([[0, 0, 0, 0], [0, np.nan, 0, 0]], np.float32)),
        "step.observations: must be finite",
    ),
    "more episodes than envs": (
        step(episodes=[(0, 1.0, 1), (1, 1.0, 1), (0, 1.0, 1)]),
        "3 episodes from 2 envs",
    ),
    "episode of an env that did not end": (
        step(episodes=[(1, 0.0, 1)]),
        "env 1 did not end an episode",
    ),
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


@pytest.mark.parametrize(
    "kwargs,code,reason",
    [
        ({"version": 99}, grpc.StatusCode.FAILED_PRECONDITION, "protocol version 99"),
        ({"experiment": "other"}, grpc.StatusCode.FAILED_PRECONDITION, "serves experiment"),
        ({"num_envs": 0}, grpc.StatusCode.INVALID_ARGUMENT, "num_envs"),
        ({"num_envs": 4097}, grpc.StatusCode.INVALID_ARGUMENT, "spec.learner.maxEnvsPerActor"),
        ({"num_envs": 2**32 - 1}, grpc.StatusCode.INVALID_ARGUMENT, "got 4294967295"),
        (
            {"spec": EnvSpec("X", "float32", (4,), "float32", (2, 3), 0)},
            grpc.StatusCode.FAILED_PRECONDITION,
            "env_id: learner has 'CartPole-v1', actor has 'X'",
        ),
        (
            {"spec": EnvSpec("CartPole-v1", "float32", (2**40,), "int32", (), 2)},
            grpc.StatusCode.FAILED_PRECONDITION,
            "observation_shape",
        ),
        (
            {"spec": EnvSpec("CartPole-v1", "float32", (1,) * 9, "int32", (), 2)},
            grpc.StatusCode.INVALID_ARGUMENT,
            "at most 8 dimensions",
        ),
        ({"actor_id": ""}, grpc.StatusCode.INVALID_ARGUMENT, "hello.actor_id"),
        ({"actor_id": "x" * 257}, grpc.StatusCode.INVALID_ARGUMENT, "hello.actor_id"),
    ],
)
def test_bad_handshakes_are_refused_with_a_reason(learner, kwargs, code, reason):
    s = Stream(learner.address)
    s.send(hello(**kwargs))
    with pytest.raises(grpc.RpcError) as err:
        s.recv()
    assert err.value.code() == code
    assert reason in err.value.details()
    s.close()
    # Counted in the status with the reason, and nothing was kept for the refused stream.
    status = learner.runtime.status()
    assert status.refused_streams == 1
    assert reason in status.last_refusal
    assert status.actors == 0


def test_the_agent_is_built_before_any_actor_says_hello(learner):
    assert learner.runtime.agent is not None
    assert learner.runtime.env_spec == CARTPOLE
    assert learner.runtime.status().state == "waiting_for_actors"


def test_without_a_spec_the_first_hello_naming_the_experiments_env_decides(tmp_path):
    running = start_learner(f"unix:{tmp_path}/fallback.sock", env_spec=None)
    try:
        for spec, reason in [
            (EnvSpec("Pong", "float32", (4,), "int32", (), 2), "env_id: learner has"),
            (EnvSpec("CartPole-v1", "float32", (4,), "float32", (2, 3), 0), "must be a vector"),
            (
                EnvSpec("CartPole-v1", "float32", (2**40,), "int32", (), 2),
                "exceeds the 67108864-byte message limit",
            ),
        ]:
            s = Stream(running.address)
            s.send(hello(spec=spec))
            with pytest.raises(grpc.RpcError) as err:
                s.recv()
            assert reason in err.value.details()
            s.close()
        assert running.runtime.agent is None
        s = Stream(running.address)
        s.send(hello())
        assert s.recv().WhichOneof("kind") == "welcome"
        assert running.runtime.env_spec == CARTPOLE
        s.close()
    finally:
        stop_learner(running)


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
    grants = [
        stub.AssignIndex(
            seedrl_pb2.IndexRequest(experiment=name, actor_id=f"pod-{i}"), timeout=10
        ).actor_index
        for i in range(3)
    ]
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


def test_a_hello_cancelled_while_registering_leaves_nothing_behind(learner):
    """An actor that goes away while its hello is being registered (in a worker thread):
    the registration is undone once it completes, so its actor id is free again."""
    runtime = learner.runtime
    gate, registered = threading.Event(), threading.Event()
    original = runtime.open_stream

    def slow_open_stream(*args, **kwargs):
        gate.wait(30)
        try:
            return original(*args, **kwargs)
        finally:
            registered.set()

    runtime.open_stream = slow_open_stream
    service = LearnerService(runtime)

    async def hello_then_leave():
        task = asyncio.ensure_future(service._open_stream("leaver", hello().hello, CARTPOLE, 0))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(hello_then_leave())
    gate.set()
    assert registered.wait(30)
    deadline = time.monotonic() + 30
    while "leaver" in runtime._streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "leaver" not in runtime._streams and runtime.connected_actors == 0


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "uint8"])
def test_the_step_checker_finds_non_finite_observations_of_any_floating_dtype(dtype):
    spec = EnvSpec("X", dtype, (3,), "int32", (), 2)
    checker = StepChecker(2, spec, 1e6)
    obs = np.zeros((2, 3), dtype)
    good = seedrl_pb2.Step(
        env_ids=[0, 1],
        observations=encode_array(obs),
        rewards=[0, 0],
        terminated=[False, False],
        truncated=[False, False],
    )
    checker.decode(good)
    if dtype == "uint8":
        return
    big = np.finfo(dtype).max
    obs[1] = [big, big, big]  # finite, however large: accepted (their sum overflows dtype)
    checker.decode(
        seedrl_pb2.Step(
            env_ids=[0, 1],
            observations=encode_array(obs),
            rewards=[0, 0],
            terminated=[False, False],
            truncated=[False, False],
        )
    )
    for value in (np.inf, -np.inf, np.nan):
        obs[0, 2] = value
        with pytest.raises(WireError, match="must be finite"):
            checker.decode(
                seedrl_pb2.Step(
                    env_ids=[0, 1],
                    observations=encode_array(obs),
                    rewards=[0, 0],
                    terminated=[False, False],
                    truncated=[False, False],
                )
            )


def test_the_tally_follows_env_ids_when_a_step_lists_them_permuted():
    checker = StepChecker(3, CARTPOLE, 1e6)

    def send(ids, rewards, terminated=(False,) * 3, episodes=()):
        return checker.decode(
            seedrl_pb2.Step(
                env_ids=ids,
                observations=encode_array(np.zeros((3, 4), np.float32)),
                rewards=rewards,
                terminated=terminated,
                truncated=[False] * 3,
                episodes=[
                    seedrl_pb2.Episode(env_id=e, episode_return=r, length=n) for e, r, n in episodes
                ],
            )
        )

    send([0, 1, 2], [0, 0, 0])
    send([2, 0, 1], [3.0, 1.0, 2.0])  # env 2 got 3, env 0 got 1, env 1 got 2
    step_data, episodes = send(
        [1, 2, 0], [2.0, 3.0, 1.0], terminated=(False, True, False), episodes=[(2, 6.0, 2)]
    )
    assert episodes == [(6.0, 2)]
    assert step_data.terminated.tolist() == [False, False, True]  # back in env-id order
    np.testing.assert_array_equal(checker.ep_return, [2.0, 4.0, 0.0])


def test_env_restarts_are_counted_from_each_streams_first_step(learner):
    s = connect(learner, actor_id="a", num_envs=2)

    def send(restarts):
        msg = step(2)
        msg.step.env_restarts = restarts
        s.send(msg)
        return s.recv()

    send(7)  # restarts before this stream (a reconnect): counted on their own stream
    assert learner.runtime.env_restarts == 0
    send(8)
    send(11)  # both envs raised in their step and their reset
    assert learner.runtime.env_restarts == 4
    assert learner.runtime.status().env_restarts == 4
    with pytest.raises(grpc.RpcError) as err:
        send(10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "step.env_restarts: 10 after 11" in err.value.details()
    s = connect(learner, actor_id="b", num_envs=2)
    send(0)
    with pytest.raises(grpc.RpcError) as err:
        send(5)
    assert "grows by at most 4 a step" in err.value.details()
