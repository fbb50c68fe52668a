"""Test support: a real learner (runtime + grpc.aio server on a unix socket) in a background loop,
and a synchronous client stream to talk to it."""

import asyncio
import queue
import threading

import grpc
import numpy as np
import pytest

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc
from seedrl.common.config import parse_experiment
from seedrl.common.wire import PROTOCOL_VERSION, EnvSpec, encode_array
from seedrl.learner.agents import build_agent
from seedrl.learner.runtime import LearnerRuntime
from seedrl.learner.server import start_server

CARTPOLE = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2)


def small_experiment(**learner):
    return parse_experiment({
        "metadata": {"name": "test-exp"},
        "spec": {"learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1,
                             **learner},
                 "agent": {"network": {"hiddenSizes": [8]}}},
    })


class RunningLearner:
    def __init__(self, runtime, address, loop, server):
        self.runtime = runtime
        self.address = address
        self.loop = loop
        self.server = server


def start_learner(address: str, credentials=None) -> RunningLearner:
    """Starts a learner for a small V-trace experiment (training on) on ``address``."""
    runtime = LearnerRuntime(small_experiment(), build_agent, train=True)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server, _ = asyncio.run_coroutine_threadsafe(
        start_server(runtime, address, credentials), loop).result(30)
    running = RunningLearner(runtime, address, loop, server)
    running.thread = thread
    return running


def stop_learner(running: RunningLearner) -> None:
    """Stops the server at once (like a crash, streams are cut) and the runtime's threads."""
    asyncio.run_coroutine_threadsafe(running.server.stop(0), running.loop).result(30)
    running.runtime.shutdown()
    running.loop.call_soon_threadsafe(running.loop.stop)
    running.thread.join(10)


@pytest.fixture
def learner(tmp_path):
    """Yields a RunningLearner serving a small V-trace experiment over a unix socket."""
    running = start_learner(f"unix:{tmp_path}/learner.sock")
    yield running
    stop_learner(running)


class Stream:
    """A synchronous client stream: send messages, read replies one by one."""

    def __init__(self, address):
        self.channel = grpc.insecure_channel(address)
        self._out = queue.Queue()
        self._replies = seedrl_pb2_grpc.LearnerStub(self.channel).Stream(
            iter(self._out.get, None), timeout=60)

    def send(self, msg):
        self._out.put(msg)

    def recv(self):
        return next(self._replies)

    def close(self):
        self._out.put(None)
        self.channel.close()


def hello(actor_id="a0", num_envs=2, spec=CARTPOLE, experiment="test-exp",
          version=PROTOCOL_VERSION, actor_index=0):
    return seedrl_pb2.ActorMessage(hello=seedrl_pb2.Hello(
        protocol_version=version, experiment=experiment, actor_id=actor_id, num_envs=num_envs,
        env_spec=spec.to_proto(), actor_index=actor_index))


def step(num_envs=2, obs=None, env_ids=None, rewards=None, episodes=()):
    obs = np.zeros((num_envs, 4), np.float32) if obs is None else obs
    return seedrl_pb2.ActorMessage(step=seedrl_pb2.Step(
        env_ids=list(range(num_envs)) if env_ids is None else env_ids,
        observations=obs if isinstance(obs, seedrl_pb2.Tensor) else encode_array(obs),
        rewards=[0.0] * num_envs if rewards is None else rewards,
        terminated=[False] * num_envs, truncated=[False] * num_envs,
        episodes=[seedrl_pb2.Episode(env_id=e, episode_return=r, length=n)
                  for e, r, n in episodes]))
