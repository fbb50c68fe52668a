"""The learner's moving parts around one agent: streams, batched inference, training, budget.

Threads:
  - the gRPC event loop (server.py) decodes messages and calls :meth:`LearnerRuntime.submit`;
  - the batcher thread runs the agent's inference on batches across streams and appends each
    step to its stream's unroll builder (one batcher thread per inference device when the
    learner has several, each serving its share of the streams);
  - the trainer thread stacks unrolls into batches and runs the agent's training step.

The Experiment is the authority on the environment: the agent is built, before any actor is
served, for the env spec derived from it (:meth:`LearnerRuntime.build`; the launcher makes the
env once and passes the spec, so the learner needs no environment packages of its own), and
every Hello is checked against that spec. Without one (a learner started with no
``--env-spec`` and no checkpoint to resume), the first Hello naming the Experiment's env id
decides, as a fallback.

Nothing an actor sends can stop training: a Hello is checked and capped before anything is
allocated for it, an actor id has one live stream at a time, actions sent back are always in
the action space, and an update whose gradients are not finite is skipped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seedrl.common.config import Experiment
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent
from seedrl.learner.batcher import InferenceBatcher
from seedrl.learner.progress import ReturnWindow, StepLedger
from seedrl.learner.streams import IDLE_STREAM_S, HandshakeError, StepData, Stream, check_hello
from seedrl.learner.trajectories import UnrollBuilder, split_unroll, stack_unrolls

log = logging.getLogger(__name__)

#: The reasons :meth:`LearnerRuntime.check_budget` stops for: the Experiment is finished.
BUDGET_REASONS = ("max_env_steps", "max_seconds", "target_return")


#: Longest the trainer holds back its first (tracing) step for the first actions to go out.
FIRST_ACTIONS_WAIT_S = 10.0


class LearnerRuntime:
    """Serves inference for all actor streams and trains the agent on what they produce.

    Args:
      experiment: the validated Experiment.
      build_agent: makes the agent from the Experiment and the actors' env spec.
      train: whether to train (off for inference-only throughput measurements).
      on_agent_built: called once with the agent, e.g. to restore a checkpoint.
      inference_lanes: batcher threads, each serving its share of the streams, so that
        inference runs on several inference devices at once (one lane per device).
      env_spec: the env spec derived from the Experiment; the agent is built for it at once.
        None leaves the first Hello naming ``spec.env.id`` to decide (see :meth:`build`).
    """

    def __init__(
        self,
        experiment: Experiment,
        build_agent: Callable[[Experiment, EnvSpec], Agent],
        train: bool = True,
        on_agent_built: Callable[[Agent], None] | None = None,
        inference_lanes: int = 1,
        env_spec: EnvSpec | None = None,
    ):
        self.experiment = experiment
        spec = experiment.spec
        self.run_id = uuid.uuid4().hex[:12]
        self._build_agent = build_agent
        self._on_agent_built = on_agent_built
        self._train_enabled = train
        self.agent: Agent | None = None
        self.env_spec: EnvSpec | None = None
        self.agent_ready = threading.Event()
        self._agent_lock = threading.Lock()
        # Guards the stream registry: hellos are handled in executor threads concurrently.
        self._streams_lock = threading.Lock()
        # None: reserved by a hello being registered (see open_stream).
        self._streams: dict[str, Stream | None] = {}
        self._unrolls: queue.Queue = queue.Queue(maxsize=spec.learner.queue_capacity)
        self.stop_event = threading.Event()
        self.stop_reason: str | None = None
        self.train_error: BaseException | None = None
        # Counters (restored from a checkpoint by the caller when resuming).
        #: Env steps per actor index, and the share of them the budget counts.
        self.ledger = StepLedger()
        self.learner_steps = 0
        self.episodes = 0
        self.elapsed_before = 0.0
        self.returns = ReturnWindow(spec.budget.return_window)
        self.eval_episodes = 0
        self.eval_returns = ReturnWindow(spec.budget.return_window)
        #: Envs of the open streams (``spec.learner.maxTotalEnvs`` bounds it).
        self.open_envs = 0
        self.last_metrics: dict[str, float] = {}
        #: Unix times of the first actions sent to an actor (its first env step follows) and
        #: of the stop; start-up and learner updates/s are measured between them.
        self.first_actions_time: float | None = None
        self._first_actions = threading.Event()
        self.stop_time: float | None = None
        #: Step messages received from actors (a learner's load is messages, not env steps).
        self.messages = 0
        #: Updates skipped because their gradients were not finite.
        self.skipped_updates = 0
        #: Actions the agent produced outside the action space, replaced before sending.
        self.invalid_actions = 0
        #: Episodes reported that began before their stream: not counted (see the server).
        self.unverified_episodes = 0
        #: Envs the actors recreated after they raised, as their steps report it.
        self.env_restarts = 0
        #: Streams refused or failed for what they sent, and the latest ("actor id: reason").
        self.refused_streams = 0
        self.last_refusal: str | None = None
        self._last_env_step = time.monotonic()
        self._stepped = False  # an env step arrived in this process's lifetime
        #: Receives episodes and inference batches as they happen (``seedrl.learner.metrics``).
        self.observer: Any = None
        self.started = time.monotonic()
        self.batchers = [
            InferenceBatcher(
                self._infer,
                spec.learner.inference_batch_size,
                spec.learner.inference_max_wait_ms / 1000.0,
                name="inference-batcher" + (f"-{i}" if i else ""),
                on_batch=self._on_inference_batch,
            )
            for i in range(max(1, inference_lanes))
        ]
        self.batcher = self.batchers[0]
        self._streams_opened = 0
        self._after_train_step: list[Callable[[], None]] = []
        self._trainer = threading.Thread(target=self._train_loop, name="trainer", daemon=True)
        self._trainer.start()
        if env_spec is not None:
            self.build(env_spec)

    def build(self, env_spec: EnvSpec) -> Agent:
        """Builds the agent for ``env_spec`` (once; later calls must name the same spec) and
        restores it through ``on_agent_built``.

        Raises:
          ValueError: the agent cannot be built for this spec, or one was built for another.
        """
        with self._agent_lock:
            if self.agent is not None:
                if env_spec != self.env_spec:
                    raise ValueError(
                        "env spec differs from the learner's: "
                        + "; ".join(self.env_spec.differences(env_spec))
                    )
                return self.agent
            agent = self._build_agent(self.experiment, env_spec)
            self.env_spec = env_spec  # what on_agent_built sees (a checkpoint checks it)
            try:
                if self._on_agent_built is not None:
                    self._on_agent_built(agent)
            except BaseException:
                self.env_spec = None
                raise
            self.agent = agent
            self.agent_ready.set()
            log.info(
                "agent %s built for %s: %s",
                self.experiment.spec.agent.name,
                env_spec.env_id,
                env_spec.describe(),
            )
            learner = self.experiment.spec.learner
            per_env = self.bytes_per_env()
            log.info(
                "actor streams: at most %d, %d envs, %.1f MiB of per-env buffers "
                "(spec.learner.maxStreams, maxTotalEnvs x %d bytes)",
                learner.max_streams,
                learner.max_total_envs,
                learner.max_total_envs * per_env / 2**20,
                per_env,
            )
            return agent

    # -- streams ------------------------------------------------------------------------

    def open_stream(
        self,
        actor_id: str,
        num_envs: int,
        env_spec: EnvSpec,
        actor_index: int = 0,
        first_env: int = 0,
    ) -> Stream:
        """Registers an actor after its handshake; nothing is allocated before every check.

        Raises:
          HandshakeError: INVALID_ARGUMENT for a number of envs out of bounds (its steps
            would not fit a message); FAILED_PRECONDITION if the env spec differs from the
            learner's (or, with none yet, names another env id or cannot be built for);
            ALREADY_EXISTS if ``actor_id`` has a live stream (its reconnect must wait for
            that stream to end, or it would silently take the old stream's envs).
        """
        learner = self.experiment.spec.learner
        check_hello(self.experiment.spec, num_envs, env_spec, self.env_spec)
        if self.agent is None:
            try:
                self.build(env_spec)
            except ValueError as exc:
                raise HandshakeError("FAILED_PRECONDITION", str(exc)) from None
        with self._streams_lock:
            if actor_id in self._streams:
                raise HandshakeError(
                    "ALREADY_EXISTS",
                    f"actor id {actor_id!r} already has an open stream; a "
                    f"reconnect is welcome once that one has ended",
                )
            if len(self._streams) >= learner.max_streams:
                raise HandshakeError(
                    "RESOURCE_EXHAUSTED",
                    f"the learner serves {len(self._streams)} streams, its limit "
                    f"(spec.learner.maxStreams); retry later",
                )
            if self.open_envs + num_envs > learner.max_total_envs:
                raise HandshakeError(
                    "RESOURCE_EXHAUSTED",
                    f"hello.num_envs: {num_envs} more envs would pass the "
                    f"{learner.max_total_envs} the learner serves at most "
                    f"(spec.learner.maxTotalEnvs; {self.open_envs} open); retry later",
                )
            # Reserved now, filled below: a concurrent hello with this id is refused, and
            # concurrent hellos cannot pass the caps together.
            self._streams[actor_id] = None
            self.open_envs += num_envs
        try:
            stream = self._new_stream(actor_id, num_envs, env_spec, actor_index, first_env)
        except BaseException:
            with self._streams_lock:
                del self._streams[actor_id]
                self.open_envs -= num_envs
            raise
        with self._streams_lock:
            self._streams[actor_id] = stream
        return stream

    def _step_fields(self, env_spec: EnvSpec) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every per-step field a stream's unroll builder stores: name -> (shape, dtype)."""
        return {
            "observation": (env_spec.observation_shape, np.dtype(env_spec.observation_dtype)),
            "reward": ((), np.dtype(np.float32)),
            "terminated": ((), np.dtype(bool)),
            "truncated": ((), np.dtype(bool)),
            "action": (env_spec.action_shape, np.dtype(env_spec.action_dtype)),
            "final_value": ((), np.dtype(np.float32)),
            **self.agent.step_fields(),
        }

    def bytes_per_env(self) -> int:
        """What one env of an open stream holds on the learner: its rows in the stream's unroll
        builder, its recurrent state and the server's per-env episode tallies (3 float64s).
        ``spec.learner.maxTotalEnvs`` times this bounds the streams' buffers."""
        assert self.env_spec is not None and self.agent is not None, "built first"
        fields = self._step_fields(self.env_spec)
        length, _ = self.agent.unroll_layout(self.experiment.spec.learner.unroll_length)
        row = sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in fields.values())
        state = sum(int(s.nbytes) for s in self.agent.initial_state(1))
        return length * row + state + 3 * 8

    def _new_stream(
        self, actor_id: str, num_envs: int, env_spec: EnvSpec, actor_index: int, first_env: int = 0
    ) -> Stream:
        agent = self.agent
        fields = self._step_fields(env_spec)
        length, period = agent.unroll_layout(self.experiment.spec.learner.unroll_length)
        builder = UnrollBuilder(
            self.experiment.spec.learner.unroll_length,
            num_envs,
            fields,
            length=length,
            period=period,
            prefix=agent.unroll_prefix(),
        )
        stream = Stream(
            actor_id,
            num_envs,
            builder,
            agent.initial_state(num_envs, actor_index, first_env),
            actor_index,
            bool(agent.is_evaluation_actor(actor_index)),
            first_env,
        )
        # Streams take the lanes in turn; a stream keeps its lane, so its steps stay in order.
        # It counts in the lane's open envs from its first step (see submit).
        with self._streams_lock:
            stream.lane = self._streams_opened % len(self.batchers)
            self._streams_opened += 1
        return stream

    def sweep_idle(self, now: float | None = None) -> int:
        """Stops counting, in their batchers' open envs, the streams that sent no step for
        :data:`IDLE_STREAM_S`: a batch then stops waiting for their envs (a silent stream
        held every batch to the full ``inferenceMaxWaitMs``). Returns how many it uncounted.
        Called about every 0.1-0.25 s by the server."""
        now = time.monotonic() if now is None else now
        idle = 0
        with self._streams_lock:
            for stream in self._streams.values():
                if stream is not None and stream.counted and now - stream.last_step > IDLE_STREAM_S:
                    stream.counted = False
                    self.batchers[stream.lane].open_envs -= stream.num_envs
                    idle += 1
        return idle

    def close_stream(self, stream: Stream) -> None:
        """Forgets a stream that ended (its partial unrolls are dropped)."""
        stream.closed = True
        with self._streams_lock:
            if stream.counted:
                stream.counted = False
                self.batchers[stream.lane].open_envs -= stream.num_envs
            if self._streams.get(stream.actor_id) is stream:
                del self._streams[stream.actor_id]
                self.open_envs -= stream.num_envs

    def note_refusal(self, actor_id: str, reason: str) -> None:
        """Records a stream refused at its hello or failed for a bad message (status)."""
        self.refused_streams += 1
        self.last_refusal = f"{actor_id or 'an actor with no id'}: {reason}"[:500]

    @property
    def connected_actors(self) -> int:
        """Actor streams open now (one per actor id)."""
        with self._streams_lock:
            return sum(1 for s in self._streams.values() if s is not None)

    @property
    def seconds_without_env_steps(self) -> float:
        """Seconds since the last env step arrived (since the start before the first)."""
        return time.monotonic() - self._last_env_step

    @property
    def env_frames(self) -> int:
        """Environment frames so far: agent steps times the env's frame skip (Atari's 4)."""
        return self.env_steps * self.experiment.spec.env.frames_per_step

    @property
    def queued_unrolls(self) -> int:
        """Unrolls waiting for the trainer."""
        return self._unrolls.qsize()

    @property
    def replay_size(self) -> int | None:
        """Sequences in the agent's replay (None for agents without one)."""
        replay = getattr(self.agent, "replay", None)
        return None if replay is None else len(replay)

    def _on_inference_batch(self, size: int, seconds: float) -> None:
        if self.observer is not None:
            self.observer.inference_batch(size, seconds)

    def submit(
        self,
        stream: Stream,
        step: StepData,
        episodes: list[tuple[float, int]],
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        """Queues one step of a stream for batched inference; the future resolves to its
        actions [K]: an asyncio future of ``loop`` (the caller's running loop) when given, else
        a ``concurrent.futures.Future``."""
        now = self._last_env_step = stream.last_step = time.monotonic()
        self.ledger.add(stream.actor_index, stream.num_envs, stream.evaluation, now)
        self.messages += 1
        self._stepped = True
        if not stream.counted and not stream.closed:
            # The lane's batcher closes a batch early once every env it serves is waiting.
            with self._streams_lock:
                if not stream.closed:
                    stream.counted = True
                    self.batchers[stream.lane].open_envs += stream.num_envs
        for episode_return, length in episodes:
            if self.observer is not None:
                self.observer.episode(episode_return, length, stream.evaluation)
            if stream.evaluation:
                self.eval_episodes += 1
                self.eval_returns.append(float(episode_return), stream.actor_index)
            else:
                self.episodes += 1
                self.returns.append(float(episode_return), stream.actor_index)
        return self.batchers[stream.lane].submit((stream, step), stream.num_envs, loop)

    # -- inference (batcher thread) -----------------------------------------------------

    def _infer(self, items: list[tuple[Stream, StepData]]) -> list[np.ndarray]:
        """One inference call for the steps of several streams.

        The final observations of truncated episodes ride in the same call as extra rows, each
        with its env's state from before the reset, so that their values cost no call of their
        own; only those values are kept from them.
        """
        agent = self.agent
        observations, rewards, states_before = [], [], []
        # Per item: (final env ids, their observations, states, rewards), or None.
        finals: list[tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray] | None] = []
        for stream, step in items:
            done = step.terminated | step.truncated
            if len(step.final_ids) and step.final_observations is not None:
                ids = step.final_ids
                finals.append(
                    (
                        ids,
                        step.final_observations,
                        [s[ids] for s in stream.state],
                        step.rewards[ids],
                    )
                )
            else:
                finals.append(None)
            if stream.state and done.any():
                fresh = agent.initial_state(stream.num_envs, stream.actor_index, stream.first_env)
                stream.state = [
                    np.where(done.reshape((-1,) + (1,) * (s.ndim - 1)), f, s)
                    for s, f in zip(stream.state, fresh)
                ]
            states_before.append(stream.state)
            observations.append(step.observations)
            # A first step's input reward belongs to the episode before it.
            rewards.append(np.where(done, np.float32(0), step.rewards))
        n = sum(len(o) for o in observations)
        for _ids, obs, state, reward in (f for f in finals if f is not None):
            observations.append(obs)
            states_before.append(state)
            rewards.append(reward)
        state = [np.concatenate(parts) for parts in zip(*states_before)] if states_before[0] else []
        outputs, new_state = agent.inference(
            np.concatenate(observations), state, np.concatenate(rewards).astype(np.float32)
        )
        # An agent without value estimates bootstraps truncations from zero.
        values = (
            np.asarray(outputs["value"], np.float32)
            if "value" in outputs
            else np.zeros(len(outputs["action"]), np.float32)
        )
        if any(stream.evaluation for stream, _ in items):
            self._act_greedily(items, outputs)
        # Before the unrolls store them: a stored action outside the space would fail the
        # training step that reads it, as surely as a sent one would fail the actor's env.
        outputs["action"] = self._legal_actions(outputs["action"])
        env_actions = self.env_spec.to_env_actions(outputs["action"][:n])
        results, offset, final_offset = [], 0, n
        for i, (stream, step) in enumerate(items):
            k = stream.num_envs
            part = {name: value[offset : offset + k] for name, value in outputs.items()}
            if new_state:
                stream.state = [s[offset : offset + k] for s in new_state]
            final = finals[i]
            final_value = self._final_values(stream, step, final, values, final_offset)
            if final is not None:
                final_offset += len(final[0])
            stream.last_value = values[offset : offset + k]
            offset += k
            row = {
                "observation": step.observations,
                "reward": step.rewards,
                "terminated": step.terminated,
                "truncated": step.truncated,
                "final_value": final_value,
                **part,
            }
            if not stream.closed and self._train_enabled and not stream.evaluation:
                unroll = stream.builder.append(row, states_before[i])
                if unroll is not None:
                    self._enqueue(unroll, stream.actor_id)
            results.append(env_actions[offset - k : offset])
        if self.first_actions_time is None:
            self.first_actions_time = time.time()
            self._first_actions.set()
        return results

    def _act_greedily(self, items: list[tuple[Stream, StepData]], outputs: dict) -> None:
        """Gives the evaluation streams' rows of a batch the agent's greedy actions (the
        policy's mode), where the agent does not act greedily for them already."""
        greedy = self.agent.greedy_actions(outputs)
        if greedy is None:
            return
        rows = np.zeros(len(outputs["action"]), bool)
        offset = 0
        for stream, _ in items:
            rows[offset : offset + stream.num_envs] = stream.evaluation
            offset += stream.num_envs
        shape = (-1,) + (1,) * (greedy.ndim - 1)
        outputs["action"] = np.where(rows.reshape(shape), greedy, outputs["action"])

    @staticmethod
    def _final_values(
        stream: Stream, step: StepData, final, values: np.ndarray, offset: int
    ) -> np.ndarray:
        """Each env's value to bootstrap a truncation from: its final observation's where the
        actor sent one, else (an env restarted after an error) that of the last observation
        seen before it; zero where nothing was truncated."""
        cut = step.truncated & ~step.terminated
        if not cut.any():
            return np.zeros(stream.num_envs, np.float32)
        out = np.where(cut, stream.last_value, np.float32(0)).astype(np.float32)
        if final is not None:
            ids = final[0]
            out[ids] = values[offset : offset + len(ids)]
        return out

    def _legal_actions(self, actions: np.ndarray) -> np.ndarray:
        """The batch's actions with any outside the action space replaced, so that an actor
        is never sent one its env would refuse, nor an unroll one its training step would
        (a network gone non-finite samples out of range)."""
        spec = self.env_spec
        if spec.discrete:
            bad = (actions < 0) | (actions >= spec.num_actions)
        elif np.issubdtype(actions.dtype, np.floating):
            bad = ~np.isfinite(actions)
        else:
            return actions
        if not bad.any():  # the usual case: one vectorised test per batch
            return actions
        count = int(bad.sum())
        self.invalid_actions += count
        log.error(
            "inference produced %d action(s) outside the action space (%s); using %s instead",
            count,
            spec.describe(),
            "action 0" if spec.discrete else "0.0",
        )
        return np.where(bad, np.zeros((), actions.dtype), actions)

    def _enqueue(self, unroll: dict, actor_id: str) -> None:
        for single in split_unroll(unroll):
            # A full queue blocks inference: backpressure on the actors bounds policy lag.
            while not self.stop_event.is_set():
                try:
                    self._unrolls.put((actor_id, single), timeout=0.1)
                    break
                except queue.Full:
                    continue

    # -- training (trainer thread) ------------------------------------------------------

    def add_train_hook(self, hook: Callable[[], None]) -> None:
        """Runs ``hook`` in the trainer thread after every training step (checkpoints)."""
        self._after_train_step.append(hook)

    def _train_loop(self) -> None:
        try:
            while not self.agent_ready.wait(0.1):
                if self.stop_event.is_set():
                    return
            # The first training step traces its graph: ~0.7 s of GIL-bound Python that, begun
            # at once, held back the first inference (tracing too) and so the actors' first
            # env steps. Unrolls cannot be ready before the first actions anyway.
            deadline = time.monotonic() + FIRST_ACTIONS_WAIT_S
            while not self._first_actions.wait(0.1):
                if self.stop_event.is_set():
                    return
                if time.monotonic() > deadline:
                    break
            if self.agent.uses_replay:
                self._train_from_replay()
            else:
                self._train_on_fresh_unrolls()
        except BaseException as exc:  # reported and ends the run
            log.exception("training failed")
            self.train_error = exc
            self.finish("train_error")

    def _decay_learning_rate(self) -> None:
        opt = self.experiment.spec.learner.optimizer
        max_steps = self.experiment.spec.budget.max_env_steps
        if opt.linear_decay and max_steps:
            frac = max(0.0, 1.0 - self.env_steps / max_steps)
            self.agent.set_learning_rate(opt.learning_rate * frac)

    def _after_step(self, metrics: dict[str, float], actors: set[str]) -> None:
        """Counts a finished update, or a skipped one: an update whose gradients were not
        finite is not applied (see ``seedrl.learner.optimizers``), and says so here."""
        grad_norm = metrics.get("grad_norm", 0.0)
        if not math.isfinite(grad_norm):
            self.skipped_updates += 1
            log.warning(
                "training step skipped (%d so far): non-finite gradients (global norm "
                "%s) on a batch with unrolls from actor(s) %s",
                self.skipped_updates,
                grad_norm,
                ", ".join(sorted(actors)) or "unknown",
            )
            return
        # A step that trained on nothing (PPO drops a batch whose unrolls all lag too far)
        # reports only its lag; the loss, KL and the rest keep the last update's values.
        self.last_metrics = {**self.last_metrics, **metrics}
        self.learner_steps += 1
        for hook in self._after_train_step:
            hook()

    def _train_on_fresh_unrolls(self) -> None:
        """On-policy: every batch is the next ``batchSize`` unrolls, each used once."""
        batch_size = self.experiment.spec.learner.batch_size
        while not self.stop_event.is_set():
            unrolls: list[Mapping[str, object]] = []
            actors: set[str] = set()

            while len(unrolls) < batch_size and not self.stop_event.is_set():
                try:
                    actor_id, unroll = self._unrolls.get(timeout=0.1)
                except queue.Empty:
                    continue
                unrolls.append(unroll)
                actors.add(actor_id)
            if len(unrolls) < batch_size:
                break
            self._decay_learning_rate()
            self._after_step(self.agent.train(stack_unrolls(unrolls)), actors)

    def _train_from_replay(self) -> None:
        """Replay: unrolls go into the agent's replay as they arrive, as many as its replay
        ratio lets it take; a step runs whenever the agent says its replay is full enough and
        the ratio allows one. An agent that takes no more leaves the queue to fill, and a full
        queue holds inference: the actors wait for training, as in SEED. A skipped step names
        the actors whose unrolls entered the replay since the last good step (the sampled
        batch itself may hold older ones)."""
        recent: set[str] = set()
        # Agents written before the replay ratio held both ways take whatever arrives.
        insert_limit = getattr(self.agent, "insert_limit", lambda: None)
        while not self.stop_event.is_set():
            limit = insert_limit()
            fresh = []
            if limit != 0:
                if not self.agent.can_train():
                    # Nothing to do until more data arrives.
                    try:
                        fresh.append(self._unrolls.get(timeout=0.1))
                    except queue.Empty:
                        pass
                while limit is None or len(fresh) < limit:
                    try:
                        fresh.append(self._unrolls.get_nowait())
                    except queue.Empty:
                        break
            if fresh:
                recent.update(actor_id for actor_id, _ in fresh)
                self.agent.add_unrolls([unroll for _, unroll in fresh])
            if self.agent.can_train():
                self._decay_learning_rate()
                steps = self.learner_steps
                self._after_step(self.agent.train_from_replay(), recent)
                if self.learner_steps != steps:
                    recent = set()

    # -- budget and status --------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        """Seconds of training, including those before a resume."""
        return self.elapsed_before + time.monotonic() - self.started

    @property
    def env_steps(self) -> int:
        """Env steps that count toward ``spec.budget.maxEnvSteps``: those of earlier
        learners of the run, and every step this one accepted from any stream
        (see :mod:`seedrl.learner.progress`)."""
        return self.ledger.counted

    @env_steps.setter
    def env_steps(self, steps: int) -> None:
        # A resumed run's count so far (from its checkpoint).
        self.ledger.before = steps - self.ledger.counted + self.ledger.before

    @property
    def mean_return(self) -> float:
        """Mean return of the last ``returnWindow`` episodes (NaN before the first one)."""
        return float(np.mean(list(self.returns))) if self.returns else math.nan

    def check_budget(self) -> str | None:
        """The reason to stop now, or None."""
        budget = self.experiment.spec.budget
        if budget.max_env_steps and self.env_steps >= budget.max_env_steps:
            return "max_env_steps"
        if budget.max_seconds and self.elapsed >= budget.max_seconds:
            return "max_seconds"
        # With evaluation actors (greedy, e.g. R2D2's) the target is judged on their returns:
        # exploring actors' returns understate what the policy can do. No one actor index
        # decides it (see seedrl.learner.progress).
        evaluation = bool(self.eval_episodes)
        window = self.eval_returns if evaluation else self.returns
        if budget.target_return is not None and window.reaches(
            budget.target_return,
            lambda index, since: self.ledger.streamed_since(index, since, evaluation),
        ):
            return "target_return"
        return None

    def finish(self, reason: str) -> None:
        """Stops training and tells actors to stop; the first reason given is kept."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_time = time.time()
            log.info("stopping: %s", reason)
        self.stop_event.set()

    @property
    def finished(self) -> bool:
        """Whether the run has stopped or is stopping."""
        return self.stop_event.is_set()

    @property
    def experiment_finished(self) -> bool:
        """Whether the Experiment itself is done (a budget or the target return was reached),
        as opposed to this learner stopping early (a signal, a training failure): only then
        are the actors told the run is finished; otherwise they reconnect to the next one."""
        return self.stop_event.is_set() and self.stop_reason in BUDGET_REASONS

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stops the batcher and waits for the trainer to end its current step."""
        self.stop_event.set()
        for batcher in self.batchers:
            batcher.stop()
        self._trainer.join(timeout)

    def status(self) -> LearnerStatus:
        """A snapshot of progress (without the checkpointer's fields)."""
        mean = self.mean_return
        return LearnerStatus(
            experiment=self.experiment.metadata.name,
            run_id=self.run_id,
            state="finished"
            if self.finished
            else ("running" if self._stepped else "waiting_for_actors"),
            env_steps=self.env_steps,
            env_frames=self.env_frames,
            learner_steps=self.learner_steps,
            episodes=self.episodes,
            mean_return=None if math.isnan(mean) else mean,
            return_window=len(self.returns),
            elapsed=self.elapsed,
            actors=self.connected_actors,
            seconds_without_env_steps=round(self.seconds_without_env_steps, 1),
            refused_streams=self.refused_streams,
            last_refusal=self.last_refusal,
            skipped_updates=self.skipped_updates,
            invalid_actions=self.invalid_actions,
            unverified_episodes=self.unverified_episodes,
            env_restarts=self.env_restarts,
            mean_inference_batch=(
                sum(b.items for b in self.batchers) / max(1, sum(b.batches for b in self.batchers))
            ),
            inference_batches=sum(b.batches for b in self.batchers),
            inference_steps=sum(b.items for b in self.batchers),
            queued_unrolls=self.queued_unrolls,
            messages=self.messages,
            first_actions_time=self.first_actions_time,
            metrics=dict(self.last_metrics),
            eval_episodes=self.eval_episodes or None,
            eval_mean_return=float(np.mean(list(self.eval_returns))) if self.eval_returns else None,
            stop_reason=self.stop_reason,
        )
