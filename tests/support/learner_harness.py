"""Test support: a real learner (runtime + grpc.aio server on a unix socket) in a background loop,
and a synchronous client stream to talk to it."""

import asyncio
import collections
import queue
import threading
import time

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


def small_experiment(env=None, budget=None, network=None, **learner):
    """A small V-trace Experiment; ``env`` and ``budget`` are spec sections to set,
    ``network`` fields of spec.agent.network, the keyword arguments spec.learner fields."""
    return parse_experiment(
        {
            "metadata": {"name": "test-exp"},
            "spec": {
                "learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1, **learner},
                "agent": {"network": {"hiddenSizes": [8], **(network or {})}},
                **({"env": env} if env else {}),
                **({"budget": budget} if budget else {}),
            },
        }
    )


class RunningLearner:
    def __init__(self, runtime, address, loop, server):
        self.runtime = runtime
        self.address = address
        self.loop = loop
        self.server = server


def start_learner(
    address: str, credentials=None, env_spec: EnvSpec | None = CARTPOLE, experiment=None
) -> RunningLearner:
    """Starts a learner for a small V-trace experiment (training on) on ``address``, with its
    agent built for ``env_spec`` before serving (None: the first hello decides)."""
    runtime = LearnerRuntime(
        experiment or small_experiment(), build_agent, train=True, env_spec=env_spec
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server, _ = asyncio.run_coroutine_threadsafe(
        start_server(runtime, address, credentials), loop
    ).result(30)
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
    """A synchronous client stream: send messages, read replies one by one.

    Args:
      own_connection: open a connection of its own (channels to one address share one by
        default, and a connection carries at most the learner's max_concurrent_streams).
    """

    def __init__(self, address, own_connection=False):
        options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
        self.channel = grpc.insecure_channel(address, options=options)
        self._out = queue.Queue()
        self._replies = seedrl_pb2_grpc.LearnerStub(self.channel).Stream(
            iter(self._out.get, None), timeout=60
        )

    def send(self, msg):
        self._out.put(msg)

    def recv(self):
        return next(self._replies)

    def close(self):
        self._out.put(None)
        self.channel.close()


def hello(
    actor_id="a0",
    num_envs=2,
    spec=CARTPOLE,
    experiment="test-exp",
    version=PROTOCOL_VERSION,
    actor_index=0,
):
    return seedrl_pb2.ActorMessage(
        hello=seedrl_pb2.Hello(
            protocol_version=version,
            experiment=experiment,
            actor_id=actor_id,
            num_envs=num_envs,
            env_spec=spec.to_proto(),
            actor_index=actor_index,
        )
    )


def step(
    num_envs=2, obs=None, env_ids=None, rewards=None, episodes=(), terminated=None, truncated=None
):
    obs = np.zeros((num_envs, 4), np.float32) if obs is None else obs
    return seedrl_pb2.ActorMessage(
        step=seedrl_pb2.Step(
            env_ids=list(range(num_envs)) if env_ids is None else env_ids,
            observations=obs if isinstance(obs, seedrl_pb2.Tensor) else encode_array(obs),
            rewards=[0.0] * num_envs if rewards is None else rewards,
            terminated=[False] * num_envs if terminated is None else terminated,
            truncated=[False] * num_envs if truncated is None else truncated,
            episodes=[
                seedrl_pb2.Episode(env_id=e, episode_return=r, length=n) for e, r, n in episodes
            ],
        )
    )


class RealActors:
    """Real actors beside a test's hostile one: :class:`ActorClient` over CartPole
    :class:`EnvBatch` es, streaming from a background event loop, recording every episode
    return they report (the returns the learner may count, and no others)."""

    def __init__(
        self,
        address: str,
        count: int = 2,
        num_envs: int = 4,
        experiment: str = "test-exp",
        prefix: str = "real",
    ):
        from seedrl.actors.client import ActorClient, Backoff
        from seedrl.actors.envs import EnvBatch
        from seedrl.common.config import EnvConfig

        self.returns: list[float] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.batches = []
        self.clients = []
        for i in range(count):
            envs = EnvBatch(
                EnvConfig(id="CartPole-v1"), num_envs, list(range(i * num_envs, (i + 1) * num_envs))
            )
            envs.step = self._recording(envs.step)
            self.batches.append(envs)
            self.clients.append(
                ActorClient(
                    envs,
                    experiment,
                    f"{prefix}-{i}",
                    address,
                    backoff=Backoff(0.05, 0.5),
                    actor_index=i,
                )
            )
        self.futures = [asyncio.run_coroutine_threadsafe(c.run(), self.loop) for c in self.clients]

    def _recording(self, step):
        def recorded(actions):
            out = step(actions)
            self.returns.extend(ret for _, ret, _ in out[4])
            return out

        return recorded

    @property
    def env_steps(self) -> int:
        """Env steps the real actors have taken."""
        return sum(c.env_steps for c in self.clients)

    def check(self) -> None:
        """Raises what ended a real actor early (a refusal, a crash)."""
        for f in self.futures:
            if f.done():
                f.result()

    def stop(self) -> None:
        """Cancels the actors' streams, closes their envs and stops the loop."""
        for f in self.futures:
            f.cancel()
        for f in self.futures:
            try:
                f.result(10)
            except BaseException:  # noqa: BLE001 - cancelled, or already reported by check()
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        for envs in self.batches:
            envs.close()


def wait_for(predicate, timeout: float, what: str, check=None):
    """Waits for ``predicate()`` to be true (polling), calling ``check()`` on the way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check is not None:
            check()
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def only_real_returns(counted, real) -> bool:
    """Whether every return the learner counted is one a real actor reported (as many times
    at most): a hostile episode would show as an extra value."""
    have = collections.Counter(real)
    have.subtract(collections.Counter(counted))
    return all(n >= 0 for n in have.values())
