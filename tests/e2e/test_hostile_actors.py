"""One broken or hostile actor cannot hurt a run (issue 19's findings 1 to 5).

Each test runs a real learner (runtime and gRPC server on a unix socket) with two real actors
streaming CartPole beside a hostile stream, and checks three things: the hostile stream is
refused on its own with a clear status, the real actors' training goes on (learner steps keep
rising, their streams stay connected), and the mean return is theirs alone (every return the
learner counts is one a real actor reported).
"""

import math
import resource

import grpc
import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seedrl.common import seedrl_pb2
from seedrl.common.wire import EnvSpec, decode_array, encode_array
from seedrl.learner.checkpoint import non_finite_variables
from seedrl.learner.metrics import LearnerMetrics
from support.learner_harness import (
    CARTPOLE,
    RealActors,
    Stream,
    hello,
    learner,  # noqa: F401 - a fixture
    only_real_returns,
    small_experiment,
    start_learner,
    step,
    stop_learner,
    wait_for,
)

#: CartPole-v1 episodes last at most 500 steps, paying 1 per step.
CARTPOLE_MAX_RETURN = 500.0


@pytest.fixture
def actors(learner):  # noqa: F811 - the fixture above
    """Two real actors of 4 envs each, streaming to ``learner`` until the test ends."""
    running = RealActors(learner.address)
    yield running
    running.stop()


def training_goes_on(learner, actors, steps=10, timeout=180):  # noqa: F811
    """Waits for ``steps`` more learner steps while the real actors stream, then checks that
    only their returns are counted and both of them are still connected."""
    runtime = learner.runtime
    start = runtime.learner_steps
    wait_for(lambda: runtime.learner_steps >= start + steps, timeout,
             f"{steps} learner steps after step {start}", actors.check)
    wait_for(lambda: runtime.episodes >= 1, timeout, "an episode", actors.check)
    assert only_real_returns(runtime.returns, actors.returns)
    assert all(0 < r <= CARTPOLE_MAX_RETURN for r in runtime.returns)
    assert math.isfinite(runtime.mean_return)
    assert {c.actor_id for c in actors.clients if c.connected} == {"real-0", "real-1"}


def refused(stream, code):
    """The status that ended a hostile stream (it must be ``code``)."""
    with pytest.raises(grpc.RpcError) as err:
        stream.recv()
    assert err.value.code() == code, err.value.details()
    stream.close()
    return err.value.details()


def connect(learner, **kw):  # noqa: F811
    s = Stream(learner.address)
    s.send(hello(**kw))
    assert s.recv().WhichOneof("kind") == "welcome"
    return s


# -- finding 1: NaN or inf observations -------------------------------------------------------

def test_non_finite_observations_fail_only_their_stream(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    for value in (np.nan, np.inf, -np.inf):
        hostile = connect(learner, actor_id=f"hostile-{value}")
        obs = np.zeros((2, 4), np.float32)
        obs[1, 2] = value
        hostile.send(step(obs=obs))
        assert "step.observations: must be finite" in refused(
            hostile, grpc.StatusCode.INVALID_ARGUMENT)
    training_goes_on(learner, actors)
    status = learner.runtime.status()
    assert status["refused_streams"] == 3
    assert status["invalid_actions"] == 0  # no action outside the space was ever sent


def test_observations_that_overflow_the_network_cost_updates_not_the_run(tmp_path):
    """Finite observations as large as float32 goes pass the wire checks, and overflow a ReLU
    network into NaN: every update they reach is skipped and counted (in the status and as
    seedrl_learner_skipped_updates_total), the actions sent back stay in the action space,
    no variable turns NaN, and the real actors' training goes on."""
    running = start_learner(f"unix:{tmp_path}/l.sock",
                            experiment=small_experiment(network={"activation": "relu"}))
    metrics = LearnerMetrics(running.runtime)
    actors = RealActors(running.address)
    try:
        _overflowing_stream(running, actors)
        samples = {(s.name, s.labels.get("experiment")): s.value
                   for family in text_string_to_metric_families(
                       generate_latest(metrics.registry).decode())
                   for s in family.samples}
        assert samples[("seedrl_learner_skipped_updates_total", "test-exp")] == \
            running.runtime.skipped_updates >= 1
        assert samples[("seedrl_learner_invalid_actions_total", "test-exp")] >= 1
    finally:
        actors.stop()
        stop_learner(running)


def _overflowing_stream(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    runtime = learner.runtime
    hostile = connect(learner, actor_id="huge")
    big = np.float32(np.finfo(np.float32).max)
    obs = np.array([[big, -big, big, -big], [-big, big, -big, big]], np.float32)
    # unrollLength 5, batchSize 2: each 5 steps make 2 unrolls, a batch of their own.
    for _ in range(40):
        hostile.send(step(obs=obs))
        reply = hostile.recv()
        actions = decode_array(reply.actions.actions, "actions", "int32", (2,))
        assert set(actions.tolist()) <= {0, 1}
    wait_for(lambda: runtime.skipped_updates >= 1, 120, "a skipped update", actors.check)
    hostile.close()
    training_goes_on(learner, actors)
    assert np.isfinite(runtime.last_metrics["grad_norm"])
    assert non_finite_variables(runtime.agent.checkpointables()) == []


# -- finding 2: the Experiment decides the env spec, not the first hello -----------------------

def test_a_first_hello_with_another_spec_is_refused_and_real_actors_are_welcome(tmp_path):
    running = start_learner(f"unix:{tmp_path}/l.sock")
    real = None
    try:
        for spec, what in ((EnvSpec("CartPole-v1", "float32", (6,), "int32", (), 2),
                            "observation_shape: learner has (4,), actor has (6,)"),
                           (EnvSpec("Pong", "float32", (4,), "int32", (), 2), "env_id"),
                           (EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 3),
                            "num_actions")):
            s = Stream(running.address)
            s.send(hello(actor_id="first", spec=spec))
            assert what in refused(s, grpc.StatusCode.FAILED_PRECONDITION)
        assert running.runtime.env_spec == CARTPOLE
        real = RealActors(running.address)
        training_goes_on(running, real)
    finally:
        if real:
            real.stop()
        stop_learner(running)


# -- finding 3: a hello reusing a live actor id ------------------------------------------------

def test_a_second_stream_with_a_live_actor_id_is_refused(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    for _ in range(3):
        twin = Stream(learner.address)
        twin.send(hello(actor_id="real-0"))
        assert "already has an open stream" in refused(twin, grpc.StatusCode.ALREADY_EXISTS)
    training_goes_on(learner, actors)
    assert learner.runtime.status()["actors"] == 2


# -- finding 4: episode returns ----------------------------------------------------------------

def test_implausible_episodes_are_refused_and_never_counted(tmp_path):
    exp = small_experiment(budget={"maxEnvSteps": 0, "targetReturn": 450.0,
                                   "returnWindow": 5})
    running = start_learner(f"unix:{tmp_path}/l.sock", experiment=exp)
    real = RealActors(running.address)
    try:
        training_goes_on(running, real, steps=3)
        cases = [
            ([(0, math.inf, 10)], "episode_return: must be finite"),
            ([(0, math.nan, 10)], "episode_return: must be finite"),
            ([(0, 1e12, 1)], "beyond spec.env.maxAbsReward"),
            ([(0, 5.0, 0)], "length: must be >= 1"),
            ([(0, 5.0, 3), (0, 5.0, 3)], "ended two episodes"),
        ]
        for episodes, what in cases:
            hostile = connect(running, actor_id="liar")
            hostile.send(step(episodes=episodes))
            assert what in refused(hostile, grpc.StatusCode.INVALID_ARGUMENT)
        # An episode the stream saw whole must add up to the rewards it sent.
        hostile = connect(running, actor_id="liar")
        hostile.send(step())
        hostile.recv()
        for _ in range(3):
            hostile.send(step(rewards=[1.0, 1.0]))
            hostile.recv()
        hostile.send(step(rewards=[1.0, 1.0], terminated=[True, False]))
        hostile.recv()  # a fresh episode begins on env 0
        for _ in range(4):
            hostile.send(step(rewards=[1.0, 1.0]))
            hostile.recv()
        hostile.send(step(rewards=[1.0, 1.0], terminated=[True, False],
                          episodes=[(0, 499.0, 5)]))
        assert "add up to 5" in refused(hostile, grpc.StatusCode.INVALID_ARGUMENT)
        training_goes_on(running, real)
        assert running.runtime.check_budget() is None  # no forged return reached the target
    finally:
        real.stop()
        stop_learner(running)


# -- finding 5: memory follows num_envs --------------------------------------------------------

def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_hellos_are_capped_before_any_allocation(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    before = _rss_mb()
    cases = [
        (hello(actor_id="big", num_envs=10 ** 7), grpc.StatusCode.INVALID_ARGUMENT,
         "spec.learner.maxEnvsPerActor"),
        (hello(actor_id="big", num_envs=10 ** 9), grpc.StatusCode.INVALID_ARGUMENT,
         "spec.learner.maxEnvsPerActor"),
        (hello(actor_id="big", spec=EnvSpec("CartPole-v1", "float32", (2 ** 40,), "int32", (),
                                            2)),
         grpc.StatusCode.FAILED_PRECONDITION, "observation_shape"),
        (hello(actor_id="big", spec=EnvSpec("CartPole-v1", "float32", (2 ** 20,) * 8, "int32",
                                            (), 2)),
         grpc.StatusCode.FAILED_PRECONDITION, "observation_shape"),
    ]
    for message, code, what in cases:
        s = Stream(learner.address)
        s.send(message)
        assert what in refused(s, code)
    # A few kilobytes at most were allocated (10**7 envs cost ~380 MB before the cap).
    assert _rss_mb() - before < 50
    training_goes_on(learner, actors)


def test_a_hello_whose_steps_could_not_fit_a_message_is_refused(tmp_path):
    wide = EnvSpec("Wide-v0", "float32", (16384,), "int32", (), 2)  # 64 KiB observations
    exp = small_experiment(env={"id": "Wide-v0"}, maxEnvsPerActor=65536)
    running = start_learner(f"unix:{tmp_path}/l.sock", env_spec=wide, experiment=exp)
    try:
        s = Stream(running.address)
        s.send(hello(actor_id="wide", num_envs=1025, spec=wide))
        assert "over the 67108864-byte message limit" in refused(
            s, grpc.StatusCode.INVALID_ARGUMENT)
        ok = connect(running, actor_id="narrow", num_envs=2, spec=wide)
        ok.send(seedrl_pb2.ActorMessage(step=seedrl_pb2.Step(
            env_ids=[0, 1], observations=encode_array(np.zeros((2, 16384), np.float32)),
            rewards=[0.0, 0.0], terminated=[False, False], truncated=[False, False])))
        assert ok.recv().WhichOneof("kind") == "actions"
        ok.close()
    finally:
        stop_learner(running)
