"""The learner's gRPC service: one bidirectional stream per actor.

Uses ``grpc.aio``: measured here at about twice the message rate of the thread-pool server over
8 streams (shared/NOTES.md), and it holds thousands of idle streams without a thread each.
Decoding and checks run on the event loop; inference runs in the batcher's thread and its
result comes back through an asyncio future (resolved with the rest of its batch in one loop
callback), so one slow batch never blocks reading other streams.

A bad message fails its own stream with INVALID_ARGUMENT and a reason; every other stream goes
on. Every number from the wire is checked before use (see :class:`StepChecker`), and a Hello
is checked against the learner's env spec and capped before anything is allocated for it (see
``LearnerRuntime.open_stream``). Refusals are counted in the learner's status, with the latest
reason. No message is ever unpickled: arrays are raw bytes with dtype and shape.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import re
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc
from seedrl.common.wire import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    EnvSpec,
    WireError,
    decode_array,
    encode_array,
)
from seedrl.learner.actor_indices import ActorIndices, NotYet
from seedrl.learner.batcher import BatcherStopped
from seedrl.learner.runtime import LearnerRuntime
from seedrl.learner.streams import HandshakeError, StepData

log = logging.getLogger(__name__)

#: Longest actor id accepted (ids appear in logs, status and metrics).
MAX_ACTOR_ID = 256
#: An actor's id (a pod name, a host name and an index...): no '/', which separates it from
#: the number of one of its streams in a stream's id (``ACTOR/j``, see actors/main.py).
ACTOR_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
#: Seconds between sweeps for streams that stopped sending (see LearnerRuntime.sweep_idle).
SWEEP_EVERY_S = 0.25
#: Relative tolerance between an episode's reported return and the learner's own sum of the
#: rewards it received: the wire carries float32 rewards (relative rounding <= 2**-24 each),
#: the actor sums the env's own (usually float64) ones.
RETURN_RTOL = 1e-6
#: Up to this many envs a Step's rewards are range-checked in Python: for a few values that
#: costs less than numpy's per-call overhead (most messages of a learner with many streams carry
#: one or a few envs).
SMALL_STEP = 32


class StepChecker:
    """Checks one stream's Steps against its handshake and the Experiment, and tallies each
    env's episode from the rewards received, to check the episodes the actor reports.

    Every check is a handful of vectorised numpy operations per message, whatever K is:
    observations finite (floating dtypes), rewards finite and within ``spec.env.maxAbsReward``.

    Episodes: every reported one must be finite, at least one step long and within
    ``maxAbsReward`` x length, and (but on a stream's first Step, which may repeat episodes
    that ended as a previous connection broke) belong to an env whose episode ended in that
    Step. An episode this stream saw whole (its length is the number of outcomes the stream
    sent since the env's previous episode ended, or since the stream began) must add up to
    the rewards sent, to float32 rounding; only such verified episodes are counted. One that
    began before the stream (a reconnect, a learner restart) cannot be verified: it is
    dropped, not counted (``unverified``), so no actor can make up the mean return.

    Args:
      num_envs: K, from the Hello.
      spec: the learner's env spec.
      max_abs_reward: ``spec.env.maxAbsReward``.
    """

    def __init__(self, num_envs: int, spec: EnvSpec, max_abs_reward: float):
        self.num_envs = num_envs
        self.env_ids = list(range(num_envs))
        self.spec = spec
        self.max_abs_reward = float(max_abs_reward)
        dtype = np.dtype(spec.observation_dtype)
        # float16/32 sum exactly enough in float64 (no finite input overflows it), which
        # costs less than isfinite(); float64 needs isfinite itself.
        self._obs_check = (
            None if dtype.kind != "f" else ("sum" if dtype.itemsize < 8 else "isfinite")
        )
        self._shape = (num_envs,) + spec.observation_shape
        self.steps = 0
        #: Episodes reported but not counted: they began before this stream.
        self.unverified = 0
        self.ep_return = np.zeros(num_envs)
        self.ep_abs = np.zeros(num_envs)
        self.ep_length = np.zeros(num_envs, np.int64)
        #: The stream's latest ``env_restarts``, and how much it grew with the latest step.
        self.env_restarts = 0
        self.new_restarts = 0

    def decode(self, msg: seedrl_pb2.Step) -> tuple[StepData, list[tuple[float, int]]]:
        """Checks a Step; returns its arrays in env-id order and its verified episodes.

        Raises:
          WireError: naming the offending field.
        """
        k = self.num_envs
        ids: Any = msg.env_ids
        # Lengths first: a repeated field is only copied once its size is known to be K.
        if len(ids) != k:
            raise WireError(f"step.env_ids: expected {k} ids (one per env), got {len(ids)}")
        in_order = ids == self.env_ids  # the usual case: one comparison, no copy
        if not in_order:
            ids = list(ids)
            if sorted(ids) != self.env_ids:
                raise WireError(
                    f"step.env_ids: must be a permutation of 0..{k - 1}, got {ids[:16]}"
                )
        obs = decode_array(
            msg.observations, "step.observations", self.spec.observation_dtype, self._shape
        )
        if self._obs_check == "sum":
            finite = math.isfinite(obs.sum(dtype=np.float64))
        else:
            finite = self._obs_check is None or bool(np.isfinite(obs).all())
        if not finite:
            raise WireError("step.observations: must be finite (found NaN or infinity)")
        # Repeated fields now, arrays below (one name each keeps the hot loop's locals few).
        rewards: Any = msg.rewards
        terminated: Any = msg.terminated
        truncated: Any = msg.truncated
        for name, values in (
            ("rewards", rewards),
            ("terminated", terminated),
            ("truncated", truncated),
        ):
            if len(values) != k:
                raise WireError(f"step.{name}: expected {k} values, got {len(values)}")
        limit = self.max_abs_reward
        # Small steps: |r| <= limit in Python (NaN fails the comparison too); numpy decides,
        # and words the reason, only when that fails.
        checked = k <= SMALL_STEP and all(map(limit.__ge__, map(abs, rewards)))
        # fromiter with the count checked above: ~2x faster than asarray on repeated fields.
        rewards = np.fromiter(rewards, np.float32, k)
        magnitudes = np.abs(rewards)
        if not checked:
            largest = float(magnitudes.max())
            if not largest <= limit:  # also catches NaN
                if not np.isfinite(rewards).all():
                    raise WireError("step.rewards: must be finite")
                raise WireError(
                    f"step.rewards: {largest:g} is beyond the largest reward the "
                    f"Experiment allows (spec.env.maxAbsReward = {limit:g})"
                )
        terminated = np.fromiter(terminated, bool, k)
        truncated = np.fromiter(truncated, bool, k)
        if not in_order:
            order = np.argsort(ids)
            obs, rewards, magnitudes = obs[order], rewards[order], magnitudes[order]
            terminated, truncated = terminated[order], truncated[order]
        done = terminated | truncated
        first = self.steps == 0
        if not first:  # the first Step of a stream carries no outcome
            self.ep_return += rewards
            self.ep_abs += magnitudes
            self.ep_length += 1
        episodes = self._episodes(msg.episodes, done, first) if msg.episodes else []
        if not first and done.any():
            self.ep_return[done] = 0.0
            self.ep_abs[done] = 0.0
            self.ep_length[done] = 0
        # A count since the actor made its envs: a stream's first step sets where it starts
        # (restarts before a reconnect were counted on the stream they happened on).
        restarts = msg.env_restarts
        self.new_restarts = 0
        if first:
            self.env_restarts = restarts
        elif restarts != self.env_restarts:
            # An env restarts at most twice a step (its step, then its reset, raised).
            if not self.env_restarts <= restarts <= self.env_restarts + 2 * k:
                raise WireError(
                    f"step.env_restarts: {restarts} after {self.env_restarts}; it counts "
                    f"restarts of {k} envs and grows by at most {2 * k} a step"
                )
            self.new_restarts, self.env_restarts = restarts - self.env_restarts, restarts
        self.steps += 1
        step = StepData(obs, rewards, terminated, truncated)
        if msg.final_env_ids:
            step.final_ids, step.final_observations = self._finals(msg, terminated, truncated)
        return step, episodes

    def _finals(
        self, msg: seedrl_pb2.Step, terminated: np.ndarray, truncated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The final observations of episodes truncated by this step: env ids [M] and
        observations [M, ...], which the learner values to bootstrap from."""
        k = self.num_envs
        if len(msg.final_env_ids) > k:
            raise WireError(f"step.final_env_ids: {len(msg.final_env_ids)} ids from {k} envs")
        ids = np.asarray(msg.final_env_ids, np.int64)
        if ids.max() >= k or len(np.unique(ids)) != len(ids):
            raise WireError(
                f"step.final_env_ids: must be distinct env ids below {k}, got {ids[:16].tolist()}"
            )
        if not (truncated[ids] & ~terminated[ids]).all():
            raise WireError(
                "step.final_env_ids: only envs truncated (not terminated) by this "
                "step have a final observation"
            )
        obs = decode_array(
            msg.final_observations,
            "step.final_observations",
            self.spec.observation_dtype,
            (len(ids),) + self.spec.observation_shape,
        )
        if self._obs_check and not np.isfinite(obs).all():
            raise WireError("step.final_observations: must be finite (found NaN or infinity)")
        return ids, obs

    def _episodes(self, messages, done: np.ndarray, first: bool) -> list[tuple[float, int]]:
        """Checks a Step's episodes; returns the verified ones. A loop: a Step carries a few
        (measured: for 1 to 20 episodes a loop costs half what numpy's fixed overhead does;
        they break even near 100)."""
        k = self.num_envs
        if len(messages) > k:
            raise WireError(f"step.episodes: {len(messages)} episodes from {k} envs in one step")
        seen = set()
        out = []
        for j, ep in enumerate(messages):
            what = f"step.episodes[{j}]"
            i, ret, length = ep.env_id, ep.episode_return, ep.length
            if i >= k:
                raise WireError(f"{what}.env_id: {i} is not an env of this actor")
            if i in seen:
                raise WireError(f"{what}.env_id: env {i} ended two episodes in one step")
            seen.add(i)
            if not math.isfinite(ret):
                raise WireError(f"{what}.episode_return: must be finite, got {ret}")
            if length < 1:
                raise WireError(f"{what}.length: must be >= 1, got {length}")
            if abs(ret) > self.max_abs_reward * length:
                raise WireError(
                    f"{what}.episode_return: {ret:g} over {length} steps is "
                    f"beyond spec.env.maxAbsReward ({self.max_abs_reward:g}) "
                    f"per step"
                )
            if first:  # repeated from a broken connection: nothing to check it against
                self.unverified += 1
                continue
            if not done[i]:
                raise WireError(f"{what}.env_id: env {i} did not end an episode in this step")
            seen_length = int(self.ep_length[i])
            if length < seen_length:
                raise WireError(
                    f"{what}.length: {length}, but this stream alone sent "
                    f"{seen_length} steps of that episode"
                )
            if length > seen_length:  # it began before this stream
                self.unverified += 1
                continue
            tally = float(self.ep_return[i])
            if abs(ret - tally) > RETURN_RTOL * (float(self.ep_abs[i]) + 1.0):
                raise WireError(
                    f"{what}.episode_return: {ret:g}, but the rewards this "
                    f"stream sent for it add up to {tally:g}"
                )
            out.append((float(ret), int(length)))
        return out


def stream_id_problem(stream_id: str, streams_per_actor: int) -> str | None:
    """Why ``stream_id`` is not the id of an actor stream, or None: ``ACTOR`` or ``ACTOR/j``
    with ACTOR matching :data:`ACTOR_ID` and j below ``spec.actors.streamsPerActor`` (the
    learner keys indices by ACTOR: a made-up suffix must not pass for another actor's
    stream)."""
    if not 1 <= len(stream_id) <= MAX_ACTOR_ID:
        return f"must be 1 to {MAX_ACTOR_ID} characters, got {len(stream_id)}"
    actor, slash, number = stream_id.partition("/")
    if not ACTOR_ID.fullmatch(actor):
        return (
            f"{stream_id[:100]!r} is not an actor id (letters, digits, '.', '_', ':' and '-', "
            f"starting with a letter or digit), optionally followed by '/' and a stream number"
        )
    if slash and not (number.isdigit() and len(number) <= 5 and int(number) < streams_per_actor):
        return (
            f"{stream_id[:100]!r}: a stream number after '/' must be below "
            f"spec.actors.streamsPerActor ({streams_per_actor})"
        )
    return None


class LearnerService(seedrl_pb2_grpc.LearnerServicer):
    """Serves the Stream and AssignIndex RPCs on top of a :class:`LearnerRuntime`.

    Streams are bounded in number and time: at most ``spec.learner.maxStreams`` wait for their
    hello at once, each for ``helloTimeoutSeconds``, and a stream whose actor sends no step
    for ``stepTimeoutSeconds`` after an answer is closed (DEADLINE_EXCEEDED); the runtime caps
    the streams and envs it serves.
    """

    def __init__(self, runtime: LearnerRuntime, indices: ActorIndices | None = None):
        self.runtime = runtime
        #: Which actor holds which index (unique among live actors).
        self.indices = indices or ActorIndices()
        # Hellos are registered off the event loop (a first one may build the agent).
        self._hellos = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="hello")
        #: Streams open and waiting for their hello.
        self.awaiting_hello = 0

    async def AssignIndex(self, request, context):  # noqa: N802 - gRPC method name
        name = self.runtime.experiment.metadata.name
        if request.experiment != name:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this learner serves experiment {name!r}, not {request.experiment!r}",
            )
        if not request.actor_id:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "index_request.actor_id: must not be empty"
            )
        if len(request.actor_id) > MAX_ACTOR_ID or not ACTOR_ID.fullmatch(request.actor_id):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"index_request.actor_id: {request.actor_id[:100]!r} is not an actor id "
                f"(letters, digits, '.', '_', ':' and '-', starting with a letter or digit, "
                f"at most {MAX_ACTOR_ID})",
            )
        try:
            index = self.indices.assign(request.actor_id)
        except NotYet as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        log.info("actor %s is index %d", request.actor_id, index)
        return seedrl_pb2.IndexGrant(actor_index=index)

    async def _open_stream(self, actor_id: str, hello: seedrl_pb2.Hello, spec: EnvSpec, index: int):
        """Registers the stream in a worker thread. If this call is cancelled meanwhile (the
        actor went away), the registration still completes there: it is undone as soon as it
        does, or the actor id would stay taken for good."""
        registering = self._hellos.submit(
            self.runtime.open_stream, actor_id, hello.num_envs, spec, index, hello.first_env
        )
        try:
            return await asyncio.wrap_future(registering)
        except asyncio.CancelledError:

            def undo(done: concurrent.futures.Future) -> None:
                if not done.cancelled() and done.exception() is None:
                    self.runtime.close_stream(done.result())

            registering.add_done_callback(undo)
            raise

    async def _refuse(self, context, code: grpc.StatusCode, actor_id: str, reason: str):
        """Fails this stream with ``code`` and ``reason``, recording it in the status."""
        self.runtime.note_refusal(actor_id, reason)
        log.warning("refused actor %s: %s: %s", actor_id or context.peer(), code.name, reason)
        await context.abort(code, reason)

    async def Stream(self, request_iterator, context):  # noqa: N802 - gRPC method name
        runtime = self.runtime
        learner = runtime.experiment.spec.learner
        if self.awaiting_hello >= learner.max_streams:
            await self._refuse(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "",
                f"{self.awaiting_hello} streams are waiting for their hello, the limit "
                f"(spec.learner.maxStreams); retry later",
            )
        self.awaiting_hello += 1
        try:
            async with asyncio.timeout(learner.hello_timeout_seconds):
                first = await _next_message(request_iterator)
        except WireError as exc:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "", str(exc))
        except TimeoutError:
            await self._refuse(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "",
                f"no hello within {learner.hello_timeout_seconds:g} s of opening the stream "
                f"(spec.learner.helloTimeoutSeconds)",
            )
        finally:
            self.awaiting_hello -= 1
        if first is None:
            return
        if first.WhichOneof("kind") != "hello":
            await self._refuse(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "",
                "the first message of a stream must be a hello",
            )
        hello = first.hello
        actor_id = hello.actor_id[:MAX_ACTOR_ID]
        if hello.protocol_version != PROTOCOL_VERSION:
            await self._refuse(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                actor_id,
                f"protocol version {hello.protocol_version} is not supported; "
                f"this learner speaks {PROTOCOL_VERSION}",
            )
        name = runtime.experiment.metadata.name
        if hello.experiment != name:
            await self._refuse(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                actor_id,
                f"this learner serves experiment {name!r}, not {hello.experiment[:100]!r}",
            )
        problem = stream_id_problem(
            hello.actor_id, runtime.experiment.spec.actors.streams_per_actor
        )
        if problem:
            await self._refuse(
                context, grpc.StatusCode.INVALID_ARGUMENT, actor_id, f"hello.actor_id: {problem}"
            )
        index = self.indices.connect(actor_id, hello.actor_index)
        try:
            spec = EnvSpec.from_proto(hello.env_spec)
            stream = await self._open_stream(actor_id, hello, spec, index)
        except WireError as exc:
            self.indices.disconnect(actor_id, index)
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, actor_id, f"hello.{exc}")
        except HandshakeError as exc:
            self.indices.disconnect(actor_id, index)
            await self._refuse(context, getattr(grpc.StatusCode, exc.code), actor_id, str(exc))
        except asyncio.CancelledError:
            self.indices.disconnect(actor_id, index)
            raise
        if index != hello.actor_index:
            log.warning(
                "actor %s said index %d, held by another live actor: it acts as %d",
                actor_id,
                hello.actor_index,
                index,
            )
        checker = StepChecker(
            stream.num_envs, runtime.env_spec, runtime.experiment.spec.env.max_abs_reward
        )
        log.info("actor %s connected with %d envs", stream.actor_id, stream.num_envs)
        loop = asyncio.get_running_loop()
        try:
            yield seedrl_pb2.LearnerMessage(
                welcome=seedrl_pb2.Welcome(
                    protocol_version=PROTOCOL_VERSION, run_id=runtime.run_id, actor_index=index
                )
            )
            # Per message: read, check, decode, queue for inference, answer. Everything else
            # is per batch or per stream (profiled: this loop is what a learner with many
            # streams spends its CPU on).
            step_timeout = learner.step_timeout_seconds
            try:
                while True:
                    # Only the wait for the actor is timed: the learner's own answer may take
                    # long (training holds inference back while the unroll queue is full).
                    try:
                        async with asyncio.timeout(step_timeout):
                            msg = await request_iterator.__anext__()
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        await self._refuse(
                            context,
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            actor_id,
                            f"no step within {step_timeout:g} s of the learner's answer "
                            f"(spec.learner.stepTimeoutSeconds)",
                        )
                    if runtime.finished:
                        if runtime.experiment_finished:
                            yield seedrl_pb2.LearnerMessage(finished=True)
                            return
                        await _stopping_early(context, runtime)
                    if msg.WhichOneof("kind") != "step":
                        await self._refuse(
                            context,
                            grpc.StatusCode.INVALID_ARGUMENT,
                            actor_id,
                            "expected a step after the hello",
                        )
                    unverified = checker.unverified
                    try:
                        step, episodes = checker.decode(msg.step)
                    except WireError as exc:
                        await self._refuse(
                            context, grpc.StatusCode.INVALID_ARGUMENT, actor_id, str(exc)
                        )
                    if checker.unverified != unverified:
                        runtime.unverified_episodes += checker.unverified - unverified
                    if checker.new_restarts:
                        runtime.env_restarts += checker.new_restarts
                    try:
                        actions = await runtime.submit(stream, step, episodes, loop)
                    except BatcherStopped:
                        if runtime.experiment_finished:
                            yield seedrl_pb2.LearnerMessage(finished=True)
                            return
                        await _stopping_early(context, runtime)
                    yield seedrl_pb2.LearnerMessage(
                        actions=seedrl_pb2.Actions(
                            env_ids=checker.env_ids, actions=encode_array(actions)
                        )
                    )
            except DecodeError as exc:  # gRPC decodes each message lazily, as it is read
                await self._refuse(
                    context, grpc.StatusCode.INVALID_ARGUMENT, actor_id, _undecodable(exc)
                )
        finally:
            runtime.close_stream(stream)
            self.indices.disconnect(actor_id, index)
            log.info("actor %s disconnected", stream.actor_id)


async def _stopping_early(context, runtime: LearnerRuntime) -> None:
    """Ends a stream while the learner stops before the Experiment is finished (a signal, a
    training failure): UNAVAILABLE, which actors retry, so that they stream to the learner that
    resumes, instead of exiting as if the run were over."""
    await context.abort(
        grpc.StatusCode.UNAVAILABLE,
        f"the learner is stopping ({runtime.stop_reason}) before the experiment "
        f"is finished; reconnect",
    )


async def _next_message(request_iterator):
    """The next message, or None at the end of the stream.

    Raises:
      WireError: the bytes are not an ActorMessage (gRPC decodes lazily, here).
    """
    try:
        return await request_iterator.__anext__()
    except StopAsyncIteration:
        return None
    except DecodeError as exc:
        raise WireError(_undecodable(exc)) from None


def _undecodable(exc: DecodeError) -> str:
    """The refusal of bytes that are not an ActorMessage."""
    return f"the message is not a valid ActorMessage ({exc})"


def server_credentials(cert_file: str | None, key_file: str | None):
    """TLS credentials from PEM files, or None for an insecure port."""
    if not cert_file:
        return None
    if not key_file:
        raise ValueError("--tls-key is required with --tls-cert")
    with open(cert_file, "rb") as fh:
        cert = fh.read()
    with open(key_file, "rb") as fh:
        key = fh.read()
    return grpc.ssl_server_credentials([(key, cert)])


async def start_server(
    runtime: LearnerRuntime, address: str, credentials=None, indices: ActorIndices | None = None
) -> tuple[grpc.aio.Server, int]:
    """Starts the service on ``address`` (``host:port`` or ``unix:PATH``).

    Args:
      indices: the actor index table (a fresh one by default; a resumed learner passes one
        with a reclaim window, see :class:`ActorIndices`).

    Returns:
      The running server and the bound TCP port (0 for unix sockets).
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # Notice dead actors (a killed pod leaves no FIN) within a minute.
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            # Connections that open no stream, or only finished ones, do not stay for ever:
            # a TLS or HTTP/2 handshake must end within 10 s, an idle connection goes after
            # a minute (an actor's open streams keep its own busy).
            ("grpc.server_handshake_timeout_ms", 10_000),
            ("grpc.max_connection_idle_ms", 60_000),
            # An actor opens streamsPerActor (<= 64) streams and an index request at once.
            ("grpc.max_concurrent_streams", 128),
        ]
    )
    service = LearnerService(runtime, indices)
    seedrl_pb2_grpc.add_LearnerServicer_to_server(service, server)
    if credentials is not None:
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    await server.start()
    # Held by the server object: a task only the loop references may be collected.
    server.seedrl_service = service
    server.seedrl_sweeper = asyncio.ensure_future(_sweep_idle_streams(runtime))
    return server, port


async def _sweep_idle_streams(runtime: LearnerRuntime) -> None:
    """Uncounts silent streams from the batchers' open envs until the runtime stops."""
    while not runtime.finished:
        runtime.sweep_idle()
        await asyncio.sleep(SWEEP_EVERY_S)
