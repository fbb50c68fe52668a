"""The learner's streams are bounded in number, envs and time (issue 27, findings 3, 4 and 8):
a real learner on a unix socket, streams opened by hand."""

import grpc
import pytest

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc
from seedrl.common.config import parse_experiment
from support.learner_harness import Stream, hello, start_learner, step, stop_learner, wait_for


def experiment(actors=None, **learner):
    """A small V-trace Experiment with these spec.actors and spec.learner fields."""
    return parse_experiment(
        {
            "metadata": {"name": "test-exp"},
            "spec": {
                "learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1, **learner},
                "agent": {"network": {"hiddenSizes": [8]}},
                "actors": actors or {},
            },
        }
    )


@pytest.fixture
def serve(tmp_path):
    """Starts learners for given Experiments; stops them all at the end."""
    running = []

    def start(exp):
        learner = start_learner(f"unix:{tmp_path}/l{len(running)}.sock", experiment=exp)
        running.append(learner)
        return learner

    yield start
    for learner in running:
        stop_learner(learner)


def refusal(stream, code):
    """The details of the status that ended ``stream`` (it must be ``code``)."""
    with pytest.raises(grpc.RpcError) as err:
        stream.recv()
    assert err.value.code() == code, err.value.details()
    return err.value.details()


def welcomed(learner, actor_id, num_envs):
    """A stream past its hello and its first step (its actions received)."""
    s = Stream(learner.address)
    s.send(hello(actor_id=actor_id, num_envs=num_envs))
    assert s.recv().WhichOneof("kind") == "welcome"
    s.send(step(num_envs))
    assert s.recv().WhichOneof("kind") == "actions"
    return s


def test_a_stream_may_declare_no_more_envs_than_the_experiments_actors_step(serve):
    learner = serve(experiment(actors={"envsPerActor": 9, "streamsPerActor": 2}))
    s = Stream(learner.address)
    s.send(hello(actor_id="wide", num_envs=6))
    reason = refusal(s, grpc.StatusCode.INVALID_ARGUMENT)
    assert "hello.num_envs: must be in [1, 5]" in reason and "envsPerActor" in reason
    welcomed(learner, "narrow", 5).close()
    assert learner.runtime.refused_streams == 1


def test_maxenvsperactor_says_more_when_set(serve):
    learner = serve(experiment(actors={"envsPerActor": 4}, maxEnvsPerActor=100))
    welcomed(learner, "wide", 100).close()


def test_streams_past_max_streams_are_refused_and_retry_later(serve):
    learner = serve(experiment(actors={"replicas": 1}, maxStreams=2))
    first, second = welcomed(learner, "a", 2), welcomed(learner, "b", 2)
    third = Stream(learner.address)
    third.send(hello(actor_id="c", num_envs=2))
    assert "spec.learner.maxStreams" in refusal(third, grpc.StatusCode.RESOURCE_EXHAUSTED)
    first.close()
    wait_for(lambda: learner.runtime.connected_actors == 1, 30, "the first stream to close")
    welcomed(learner, "c", 2).close()
    second.close()


def test_envs_past_max_total_envs_are_refused(serve):
    learner = serve(experiment(actors={"replicas": 1, "envsPerActor": 8}, maxTotalEnvs=10))
    big = welcomed(learner, "a", 8)
    s = Stream(learner.address)
    s.send(hello(actor_id="b", num_envs=3))
    assert "spec.learner.maxTotalEnvs" in refusal(s, grpc.StatusCode.RESOURCE_EXHAUSTED)
    welcomed(learner, "b", 2).close()
    big.close()
    wait_for(lambda: learner.runtime.open_envs == 0, 30, "every env released")


def test_a_stream_that_sends_no_hello_is_closed_after_the_hello_timeout(serve):
    learner = serve(experiment(helloTimeoutSeconds=0.5))
    silent = Stream(learner.address)
    assert "helloTimeoutSeconds" in refusal(silent, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert learner.runtime.refused_streams == 1
    welcomed(learner, "a", 2).close()


def test_streams_waiting_for_their_hello_are_capped(serve):
    learner = serve(experiment(actors={"replicas": 1}, maxStreams=2, helloTimeoutSeconds=3600))
    silent = [Stream(learner.address) for _ in range(2)]
    service = learner.server.seedrl_service
    wait_for(lambda: service.awaiting_hello == 2, 30, "two streams waiting for their hellos")
    extra = Stream(learner.address)
    assert "spec.learner.maxStreams" in refusal(extra, grpc.StatusCode.RESOURCE_EXHAUSTED)
    for s in silent:
        s.close()


def test_a_stream_that_goes_silent_after_an_answer_is_closed_after_the_step_timeout(serve):
    learner = serve(experiment(stepTimeoutSeconds=0.5))
    s = welcomed(learner, "a", 2)
    assert "stepTimeoutSeconds" in refusal(s, grpc.StatusCode.DEADLINE_EXCEEDED)
    wait_for(lambda: learner.runtime.connected_actors == 0, 30, "the silent stream to close")


def test_a_silent_stream_stops_holding_inference_batches_open(serve):
    # A batch waits up to 10 s for every counted env: were the silent stream's envs still
    # counted, each of the live stream's steps below would take 10 s.
    learner = serve(experiment(inferenceMaxWaitMs=10_000, stepTimeoutSeconds=3600))
    batcher = learner.runtime.batcher
    hello_only = Stream(learner.address)
    hello_only.send(hello(actor_id="hello-only", num_envs=4))
    assert hello_only.recv().WhichOneof("kind") == "welcome"
    assert batcher.open_envs == 0  # a stream counts from its first step
    silent = Stream(learner.address)
    silent.send(hello(actor_id="silent", num_envs=3))
    assert silent.recv().WhichOneof("kind") == "welcome"
    silent.send(step(3))  # answered at once: its 3 envs are all the open ones
    assert silent.recv().WhichOneof("kind") == "actions"
    live = Stream(learner.address)
    live.send(hello(actor_id="live", num_envs=2))
    assert live.recv().WhichOneof("kind") == "welcome"
    wait_for(lambda: batcher.open_envs == 0, 30, "the silent stream to be swept")
    batches = batcher.batches
    for _ in range(5):
        live.send(step(2))
        assert live.recv().WhichOneof("kind") == "actions"
    assert batcher.batches == batches + 5 and batcher.open_envs == 2
    for s in (hello_only, silent, live):
        s.close()


@pytest.mark.parametrize(
    "actor_id, reason",
    [
        ("real-0/x", "a stream number after '/' must be below spec.actors.streamsPerActor (1)"),
        ("real-0/1", "a stream number after '/' must be below spec.actors.streamsPerActor (1)"),
        ("a/b/0", "a stream number after '/'"),
        ("/0", "is not an actor id"),
        ("bad id", "is not an actor id"),
        ("x" * 257, "must be 1 to 256 characters"),
    ],
)
def test_actor_ids_that_could_pass_for_another_actors_stream_are_refused(serve, actor_id, reason):
    learner = serve(experiment())
    real = welcomed(learner, "real-0", 2)
    s = Stream(learner.address)
    s.send(hello(actor_id=actor_id, num_envs=2, actor_index=0))
    assert reason in refusal(s, grpc.StatusCode.INVALID_ARGUMENT)
    assert learner.runtime.connected_actors == 1
    real.close()


def test_streams_of_one_actor_are_numbered_below_streams_per_actor(serve):
    learner = serve(experiment(actors={"envsPerActor": 4, "streamsPerActor": 2}))
    streams = [welcomed(learner, f"real-0/{j}", 2) for j in range(2)]
    assert learner.runtime.connected_actors == 2
    for s in streams:
        s.close()


def test_an_index_request_for_an_id_with_a_slash_is_refused(serve):
    learner = serve(experiment())
    with grpc.insecure_channel(learner.address) as channel:
        stub = seedrl_pb2_grpc.LearnerStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.AssignIndex(seedrl_pb2.IndexRequest(experiment="test-exp", actor_id="real-0/x"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "is not an actor id" in err.value.details()
        grant = stub.AssignIndex(seedrl_pb2.IndexRequest(experiment="test-exp", actor_id="real-0"))
        assert grant.actor_index == 0
