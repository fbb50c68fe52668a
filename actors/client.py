"""The actor's side of the stream: hello, then step envs with the actions the learner sends.

Connection problems (learner not up yet, restarted, preempted) are retried with exponential
backoff and jitter; the envs keep their state and the actor resumes streaming on the new
connection. A refusal (bad message, wrong experiment or env spec) is not retried: it would fail
the same way again.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time

import grpc
import numpy as np

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc
from seedrl.common.wire import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    WireError,
    decode_array,
    encode_array,
)

log = logging.getLogger(__name__)

#: Status codes that mean "this actor is wrong", not "try again later".
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


#: First retry delay (seconds) while the learner has never answered; doubles up to 4x this
#: (0.1 s: the first env step waits at most that long after the learner is up).
STARTUP_RETRY_S = 0.025

#: Longest wait (seconds) between asks for an index (``--index auto``). Actors usually start
#: before the learner (a TPU node takes minutes); at the default 10 s cap an actor that asked
#: for a while got its index 5-10 s after the learner was up. Asks are cheap: a refused
#: connection, or the learner's quick UNAVAILABLE while resumed actors reclaim their indices.
INDEX_RETRY_CAP_S = 1.0


class ActorRefused(RuntimeError):
    """The learner refused this actor; retrying would not help."""


class Backoff:
    """Exponential backoff with full jitter: 0.1 s doubling up to ``cap`` seconds."""

    def __init__(self, initial: float = 0.1, cap: float = 10.0, rng: random.Random | None = None):
        self.initial = initial
        self.cap = cap
        self._next = initial
        self._rng = rng or random.Random()

    def delay(self) -> float:
        """The next wait, and doubles the one after."""
        value = self._rng.uniform(self._next / 2, self._next)
        self._next = min(self.cap, self._next * 2)
        return value

    def reset(self) -> None:
        """Back to the initial wait after a good connection."""
        self._next = self.initial


class ActorClient:
    """Streams one actor's batch of envs to the learner until the learner says finished.

    Args:
      envs: the actor's EnvBatch (``reset``/``step``/``spec``/``num_envs``).
      experiment: ``metadata.name``, checked by the learner.
      actor_id: stable id of this actor across reconnects.
      address: the learner, ``host:port`` or ``unix:PATH``.
      credentials: ``grpc.ssl_channel_credentials`` for TLS, or None for plaintext.
      actor_index: this actor's index among the replicas (agents may explore per index).
      first_env: index of ``envs``' first env among all of the actor's envs.
      tls_server_name: the name the learner's certificate must carry when it differs from the
        host of ``address`` (connecting by IP or through a tunnel); None: that host.
    """

    def __init__(
        self,
        envs,
        experiment: str,
        actor_id: str,
        address: str,
        credentials=None,
        backoff: Backoff | None = None,
        actor_index: int = 0,
        first_env: int = 0,
        startup_backoff: Backoff | None = None,
        tls_server_name: str | None = None,
    ):
        self.envs = envs
        self.actor_index = actor_index
        #: Index of these envs' first among the actor's (it may split them over streams).
        self.first_env = first_env
        self.experiment = experiment
        self.actor_id = actor_id
        self.address = address
        self.credentials = credentials
        self.tls_server_name = tls_server_name
        self.backoff = backoff or Backoff()
        #: Retries before the first connection: a learner that has not answered yet is
        #: usually starting beside its actors (TensorFlow's import takes seconds), and every
        #: moment the actor sleeps past its start delays the first env step.
        self.startup_backoff = startup_backoff or Backoff(STARTUP_RETRY_S, STARTUP_RETRY_S * 4)
        self._waited_for_start = False
        self.env_steps = 0
        self.connections = 0
        #: Whether a stream to the learner is open now.
        self.connected = False
        #: Receives step and round-trip times (``seedrl.actors.metrics``); None for none.
        self.observer = None
        #: Recent step round trips in seconds (send to actions received), for latency figures.
        self.latencies: collections.deque[float] = collections.deque(maxlen=100_000)
        k = envs.num_envs
        self._obs = None
        self._rewards = np.zeros(k, np.float32)
        self._terminated = np.zeros(k, bool)
        self._truncated = np.zeros(k, bool)
        self._episodes: list[tuple[int, float, int]] = []
        self._finals: tuple[np.ndarray, np.ndarray] | None = None
        self._env_ids = list(range(k))

    def _channel(self):
        return open_channel(
            self.address,
            self.credentials,
            self.tls_server_name,
            [
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ],
        )

    def _hello(self) -> seedrl_pb2.ActorMessage:
        return seedrl_pb2.ActorMessage(
            hello=seedrl_pb2.Hello(
                protocol_version=PROTOCOL_VERSION,
                experiment=self.experiment,
                actor_id=self.actor_id,
                num_envs=self.envs.num_envs,
                env_spec=self.envs.spec.to_proto(),
                actor_index=self.actor_index,
                first_env=self.first_env,
            )
        )

    def _step_message(self) -> seedrl_pb2.ActorMessage:
        episodes = [
            seedrl_pb2.Episode(env_id=i, episode_return=ret, length=n)
            for i, ret, n in self._episodes
        ]
        # .tolist() first: protobuf fills repeated fields from Python lists ~20x faster than
        # from numpy arrays (measured: 12 us against 270 us for 128 envs).
        step = seedrl_pb2.Step(
            env_ids=self._env_ids,
            observations=encode_array(self._obs),
            rewards=self._rewards.tolist(),
            terminated=self._terminated.tolist(),
            truncated=self._truncated.tolist(),
            episodes=episodes,
            env_restarts=getattr(self.envs, "restarts", 0),
        )
        if self._finals is not None and len(self._finals[0]):
            step.final_env_ids.extend(self._finals[0].tolist())
            step.final_observations.CopyFrom(encode_array(self._finals[1]))
        return seedrl_pb2.ActorMessage(step=step)

    async def run(self) -> None:
        """Streams until the learner reports finished.

        Raises:
          ActorRefused: if the learner refused this actor.
        """
        self._obs = self.envs.reset()
        while True:
            try:
                if await self._session():
                    return
            except grpc.aio.AioRpcError as exc:
                if exc.code() in FATAL_CODES:
                    raise ActorRefused(f"{exc.code().name}: {exc.details()}") from None
                if self.connections:
                    wait = self.backoff.delay()
                    log.warning(
                        "learner at %s unavailable (%s: %s); retrying in %.1fs",
                        self.address,
                        exc.code().name,
                        exc.details(),
                        wait,
                    )
                else:
                    # Polling a learner that is still starting: one line, not one per try.
                    wait = self.startup_backoff.delay()
                    level = logging.DEBUG if self._waited_for_start else logging.INFO
                    self._waited_for_start = True
                    log.log(
                        level,
                        "waiting for the learner at %s (%s: %s)",
                        self.address,
                        exc.code().name,
                        exc.details(),
                    )
                await asyncio.sleep(wait)

    async def _session(self) -> bool:
        """One connection; returns True when the learner said finished."""
        spec = self.envs.spec
        action_shape = (self.envs.num_envs,) + spec.action_shape
        async with self._channel() as channel:
            call = seedrl_pb2_grpc.LearnerStub(channel).Stream(wait_for_ready=False)
            await call.write(self._hello())
            reply = await call.read()
            if reply is grpc.aio.EOF:
                raise _eof()
            if reply.finished:
                return True
            self.connections += 1
            self.backoff.reset()
            log.info("connected to %s (learner run %s)", self.address, reply.welcome.run_id)
            if reply.welcome.actor_index != self.actor_index:
                # Another live actor holds the index this one asked for (after a learner
                # restart): act as the one the learner gives, and say it from now on.
                log.warning(
                    "the learner has this actor act as index %d, not %d",
                    reply.welcome.actor_index,
                    self.actor_index,
                )
                self.actor_index = reply.welcome.actor_index
            self.connected = True
            try:
                return await self._stream(call, spec, action_shape)
            finally:
                self.connected = False

    async def _stream(self, call, spec, action_shape) -> bool:
        """Steps and streams over one open call; returns True when the learner said finished."""
        # The first step of a stream carries no outcome of a previous action.
        self._rewards[:] = 0
        self._terminated[:] = False
        self._truncated[:] = False
        self._finals = None
        while True:
            sent = time.perf_counter()
            await call.write(self._step_message())
            reply = await call.read()
            round_trip = time.perf_counter() - sent
            self.latencies.append(round_trip)
            if reply is grpc.aio.EOF:
                raise _eof()
            if reply.finished:
                await call.done_writing()
                return True
            self._episodes = []
            try:
                actions = decode_array(
                    reply.actions.actions, "actions.actions", spec.action_dtype, action_shape
                )
            except WireError as exc:
                raise ActorRefused(f"learner sent bad actions: {exc}") from None
            started = time.perf_counter()
            (
                self._obs,
                self._rewards,
                self._terminated,
                self._truncated,
                episodes,
                self._finals,
            ) = self.envs.step(actions)
            if self.observer is not None:
                self.observer.round_trip(round_trip)
                self.observer.env_step(time.perf_counter() - started)
            self._episodes = episodes
            self.env_steps += self.envs.num_envs


def open_channel(
    address: str, credentials=None, tls_server_name: str | None = None, options=()
) -> grpc.aio.Channel:
    """A channel to the learner: TLS with ``credentials`` (verifying ``tls_server_name`` when
    given, else the host of ``address``), plaintext without; kept alive with pings.

    Every RPC an actor makes goes through here, so that the index request and the streams
    verify the learner's certificate alike.
    """
    options = [("grpc.keepalive_time_ms", 20_000), *options]
    if credentials is not None:
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        return grpc.aio.secure_channel(address, credentials, options=options)
    return grpc.aio.insecure_channel(address, options=options)


async def request_index(
    address: str,
    experiment: str,
    actor_id: str,
    credentials=None,
    backoff: Backoff | None = None,
    tls_server_name: str | None = None,
) -> int:
    """Asks the learner for this actor's index (``AssignIndex``), retrying with backoff while
    the learner is not up (or has just resumed and lets its actors reclaim theirs first).
    ``credentials`` and ``tls_server_name`` as for :func:`open_channel`.

    Raises:
      ActorRefused: if the learner refuses (another experiment, an empty id).
    """
    backoff = backoff or Backoff(cap=INDEX_RETRY_CAP_S)
    while True:
        async with open_channel(address, credentials, tls_server_name) as channel:
            try:
                grant = await seedrl_pb2_grpc.LearnerStub(channel).AssignIndex(
                    seedrl_pb2.IndexRequest(experiment=experiment, actor_id=actor_id), timeout=10.0
                )
                return grant.actor_index
            except grpc.aio.AioRpcError as exc:
                if exc.code() in FATAL_CODES:
                    raise ActorRefused(f"{exc.code().name}: {exc.details()}") from None
                wait = backoff.delay()
                log.info(
                    "no index from the learner at %s yet (%s: %s); asking again in %.1fs",
                    address,
                    exc.code().name,
                    exc.details(),
                    wait,
                )
                await asyncio.sleep(wait)


def _eof() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="stream closed by the learner",
    )
