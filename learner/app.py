"""The learner process, assembled once: devices, the runtime and its agent, checkpoints, metrics
and their HTTP endpoint, run files and TensorBoard, then the gRPC server until the run ends.

    app = build(exp, args)   # raises SetupError (with its exit code) when it cannot start
    try:
        code = app.run()      # serves until the budget, a signal or a training failure
    finally:
        app.close()

:mod:`seedrl.learner.main` parses the command line and maps a :class:`SetupError` to its exit
code; everything between is here, wired in :class:`LearnerApp`'s constructor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import math
import os
import signal
import threading
import time
from typing import Any, Callable

import numpy as np

from seedrl.common.config import ConfigError, Experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.common.exit_codes import describe as describe_exit
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.metrics_http import MetricsServer, bind_address
from seedrl.common.storage import StorageError, tensorboard_uri
from seedrl.common.wire import EnvSpec, WireError
from seedrl.learner.actor_indices import ActorIndices
from seedrl.learner.agents import build_agent
from seedrl.learner.checkpoint import (
    Checkpointer,
    CheckpointError,
    checkpoint_uri,
    open_checkpointer,
)
from seedrl.learner.devices import AcceleratorMissing
from seedrl.learner.health import HealthWatch, probe_url
from seedrl.learner.devices import choose_precision, with_precision
from seedrl.learner.devices import setup as setup_devices
from seedrl.learner.main import SIGNAL_REASONS, exit_code, write_termination_log
from seedrl.learner.metrics import LearnerMetrics
from seedrl.learner.run_files import RunFiles, WriteFailures
from seedrl.learner.runtime import LearnerRuntime
from seedrl.learner.server import server_credentials, start_server
from seedrl.learner.tensorboard import Summaries

log = logging.getLogger("learner")

#: Seconds between status snapshots (``status.json``) while the run goes on.
STATUS_EVERY_S = 0.5
#: Seconds between lines of ``metrics.jsonl`` and TensorBoard points.
METRICS_EVERY_S = 2.0
#: Seconds the actors get to see ``finished`` before the server goes away.
ACTORS_DRAIN_S = 3.0
#: Seconds the trainer has to end its current step at the stop (less after a signal: see
#: :meth:`App._serve`).
TRAINER_JOIN_S = 30.0
#: Seconds of the grace period kept back from the final checkpoint: the summary, the
#: termination message and the exit after it.
EXIT_RESERVE_S = 5.0


def final_checkpoint_seconds(grace: float, signalled_at: float | None, now: float) -> float:
    """Seconds the final checkpoint may take: the grace period less :data:`EXIT_RESERVE_S`,
    counted from the signal (the kubelet's SIGKILL comes ``grace`` seconds after its SIGTERM,
    whatever the learner did meanwhile), or from ``now`` when no signal stopped the run (a
    budget reached: nothing kills it). Never below zero.

    Shapes: scalars, seconds (``signalled_at`` and ``now`` on one monotonic clock)."""
    start = now if signalled_at is None else signalled_at
    return max(0.0, grace - EXIT_RESERVE_S - (now - start))


#: After resuming, how long no new actor index is granted (see learner/actor_indices.py).
RECLAIM_SECONDS = 15.0


def _wait_for_file(path: str, seconds: float) -> None:
    """Returns once ``path`` exists, or after ``seconds`` (then reading it says why)."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _freeze_heap() -> None:
    """Moves every object alive now out of the garbage collector's reach.

    TensorFlow, Keras and the traced graphs leave ~300k long-lived Python objects; a full
    collection walks them all (measured 0.15-0.4 s here), pausing every thread of the learner
    at once: a latency spike for every actor. Frozen objects are never walked again; garbage
    made from now on is still collected. No collection first: it would cost that same pause on
    the way to the first actions, to reclaim a few MB at most.
    """
    gc.freeze()


def _freeze_after_first_call():
    """A train hook that freezes the heap once, after the first training step traced its
    graph (more long-lived objects)."""
    done = []

    def hook():
        if not done:
            done.append(True)
            _freeze_heap()

    return hook


class SetupError(Exception):
    """The learner cannot start; ``code`` is the :class:`ExitCode` to exit with."""

    def __init__(self, code: ExitCode, message: str):
        super().__init__(message)
        self.code = code


class LearnerApp:
    """One learner process: what it is made of, and how it runs.

    Args:
      exp: the validated Experiment.
      args: the command line (:func:`seedrl.learner.main.parse_args`): ``run_dir``, ``listen``,
        ``no_train``, ``accelerator``, ``tls_cert``, ``tls_key``, ``metrics_address``,
        ``grace_seconds``.

    Raises:
      SetupError: the devices (or the accelerator it was scheduled for), the TLS files, the
        checkpoint location or its store cannot be used; whatever was started before is stopped
        again.
    """

    def __init__(self, exp: Experiment, args: Any):
        self.exp = exp
        self.args = args
        self.checkpointer: Checkpointer | None = None
        self.http: MetricsServer | None = None
        #: Probes the learner's own /healthz as its liveness probe does.
        self.health: HealthWatch | None = None
        self.summaries: Summaries | None = None
        #: Failed writes of the run files and TensorBoard (a full disk must not crash it).
        self.write_failures = WriteFailures()
        #: The final checkpoint could not be published.
        self.final_checkpoint_failed = False
        #: Set once the gRPC server listens (for whoever runs the app in a thread).
        self.serving = threading.Event()
        #: Whether a checkpoint was found to resume from.
        self.resumed = False
        #: Whether a stop was asked for before the event loop took the signals over (the
        #: entry point's :class:`seedrl.learner.main.EarlySignals`).
        self.stop_requested: Callable[[], bool] = lambda: False
        #: time.monotonic() of the first SIGTERM or SIGINT, if one stopped the run.
        self.signalled_at: float | None = None
        # The process must end at once (see run()).
        self._exit_now = False
        try:
            # First: logical CPU devices can only be configured before TensorFlow initialises.
            # With --accelerator gpu|tpu, a learner that finds none fails here, in seconds.
            self.placement = setup_devices(exp.spec.learner.devices, args.accelerator)
        except AcceleratorMissing as exc:
            raise SetupError(ExitCode.NO_ACCELERATOR, f"devices: {exc}") from None
        except ConfigError as exc:
            raise SetupError(ExitCode.BAD_CONFIG, f"devices: {exc}") from None
        # The torso's arithmetic for the devices found (precision auto: bfloat16 only where
        # they compute it natively); the agent is built from the resolved value.
        plan = self.placement.plan
        self.precision = choose_precision(exp.spec.agent.network, plan.kind if plan else None)
        self.exp = exp = with_precision(exp, self.precision.precision)
        # Read now, not when the server starts: a certificate that cannot be read is a
        # configuration error to report before the agent is built, not a crash to retry.
        try:
            self.credentials = server_credentials(args.tls_cert, args.tls_key)
        except (OSError, ValueError) as exc:
            raise SetupError(ExitCode.BAD_CONFIG, f"tls: {exc}") from None
        self.runtime = LearnerRuntime(
            exp,
            lambda e, s: build_agent(e, s, self.placement),
            train=not args.no_train,
            on_agent_built=self._restore,
            inference_lanes=len(self.placement.inference_devices) or 1,
        )
        self.runtime.add_train_hook(_freeze_after_first_call())
        self.metrics = LearnerMetrics(self.runtime)
        self.metrics.write_failures = self.write_failures
        self.runtime.observer = self.metrics
        try:
            self.http = self._serve_metrics()
            self.checkpointer = self._open_checkpoints()
            self._build_agent()
        except SetupError:
            self.close()
            raise
        self.files = RunFiles(args.run_dir, self.write_failures) if args.run_dir else None
        self.summaries = self._open_summaries()

    # -- wiring ---------------------------------------------------------------------------------

    def _restore(self, agent) -> None:
        """Binds a freshly built agent to the checkpoints (restores the latest, if any), then
        freezes the heap its build left (see :func:`_freeze_heap`)."""
        if self.checkpointer is not None:
            self.checkpointer.attach(agent)
        _freeze_heap()

    def _serve_metrics(self) -> MetricsServer | None:
        bind = bind_address(self.args.metrics_address, self.exp.spec.learner.metrics_port)
        if not bind:
            return None
        # Ready once the gRPC server is up (the checkpoint is restored before it starts).
        http = MetricsServer(
            self.metrics.registry,
            lambda: self.status().to_json(),
            host=bind[0],
            port=bind[1],
            ready=lambda: self.serving.is_set() and not self.runtime.finished,
        )
        try:
            port = http.start()
            log.info("metrics on http://%s:%d/metrics, status on /status", bind[0], port)
        except OSError as exc:  # training matters more than its metrics
            log.error("cannot serve metrics on %s:%d: %s", bind[0], bind[1], exc)
            return None
        self.health = HealthWatch(probe_url(*http.address)).start()
        return http

    def _open_checkpoints(self) -> Checkpointer | None:
        """The checkpointer, opened before serving: a run that cannot resume fails now, not
        when the first actor comes."""
        ckpt = self.exp.spec.checkpoint
        uri = checkpoint_uri(ckpt.uri, self.args.run_dir)
        if self.args.no_train:
            return None
        if not uri:
            log.warning(
                "no spec.checkpoint.uri and no run directory: this run keeps no checkpoints"
            )
            return None
        checkpointer = open_checkpointer(
            uri, self.runtime, ckpt.keep, ckpt.interval_steps, ckpt.interval_seconds
        )
        try:
            found = checkpointer.open()
        except CheckpointError as exc:
            raise SetupError(
                ExitCode.CHECKPOINT_LOCATION, f"cannot use the checkpoints at {uri}: {exc}"
            ) from None
        except StorageError as exc:
            raise SetupError(
                ExitCode.FAILED, f"checkpoint store {uri} unavailable: {exc}"
            ) from None
        self.resumed = bool(found)
        if found:
            log.info(
                "will resume from learner step %d (%d env steps) in %s",
                found["learner_steps"],
                found["env_steps"],
                uri,
            )
        self.runtime.add_train_hook(checkpointer.maybe_save)
        self.metrics.checkpointer = checkpointer
        return checkpointer

    def _build_agent(self) -> None:
        """Builds (and restores) the agent before serving, for the env spec of ``--env-spec``
        (derived from the Experiment by the launcher) or else the checkpoint's; with neither,
        the first actor naming ``spec.env.id`` decides."""
        args, exp = self.args, self.exp
        if args.env_spec:
            try:
                _wait_for_file(args.env_spec, args.env_spec_wait)
                spec = EnvSpec.read(args.env_spec)
            except (OSError, WireError) as exc:
                raise SetupError(
                    ExitCode.BAD_CONFIG, f"--env-spec {args.env_spec}: {exc}"
                ) from None
            if spec.env_id != exp.spec.env.id:
                raise SetupError(
                    ExitCode.BAD_CONFIG,
                    f"--env-spec {args.env_spec} describes {spec.env_id!r}, but "
                    f"spec.env.id is {exp.spec.env.id!r}",
                )
        elif self.checkpointer is not None and self.checkpointer.env_spec is not None:
            spec = self.checkpointer.env_spec
            log.info("env spec from the checkpoint: %s", spec.describe())
        else:
            log.warning(
                "no --env-spec and no checkpoint to resume: the first actor naming %s "
                "decides the env spec",
                exp.spec.env.id,
            )
            return
        try:
            self.runtime.build(spec)
        except CheckpointError as exc:
            raise SetupError(ExitCode.CHECKPOINT_LOCATION, f"cannot resume: {exc}") from None
        except ValueError as exc:
            raise SetupError(
                ExitCode.BAD_CONFIG, f"cannot build the agent for {spec.describe()}: {exc}"
            ) from None

    def _open_summaries(self) -> Summaries | None:
        uri = tensorboard_uri(self.exp.spec.checkpoint.uri, self.args.run_dir)
        if not uri or self.args.no_train:
            return None
        try:
            summaries = Summaries(uri, failures=self.write_failures)
        except (StorageError, OSError, ValueError) as exc:
            log.error("no TensorBoard summaries: %s", exc)
            return None
        log.info("TensorBoard summaries in %s", uri)
        return summaries

    # -- what it reports ------------------------------------------------------------------------

    def status(self) -> LearnerStatus:
        """The run's progress, with the checkpointer's fields when it keeps checkpoints, and
        the failed writes of its files."""
        status = dataclasses.replace(
            self.runtime.status(), write_failures=self.write_failures.total
        )
        if self.checkpointer is not None:
            status = dataclasses.replace(status, **self.checkpointer.status())
        return status

    def summary(self) -> dict:
        """What ``summary.json`` holds at the end of the run."""
        runtime = self.runtime
        mean = runtime.mean_return
        elapsed = runtime.elapsed
        # Updates/s while actors were served: from the first actions sent to the stop.
        served = None
        if runtime.first_actions_time is not None:
            served = (runtime.stop_time or time.time()) - runtime.first_actions_time
        return {
            "experiment": runtime.experiment.metadata.name,
            "env_steps": runtime.env_steps,
            "learner_steps": runtime.learner_steps,
            "episodes": runtime.episodes,
            "seconds": round(elapsed, 3),
            "env_steps_per_s": runtime.env_steps / elapsed if elapsed > 0 else 0.0,
            "mean_return_100": None if math.isnan(mean) else mean,
            "return_window": len(runtime.returns),
            "stop_reason": runtime.stop_reason,
            "skipped_updates": runtime.skipped_updates,
            "refused_streams": runtime.refused_streams,
            "env_restarts": runtime.env_restarts,
            "first_actions_time": runtime.first_actions_time,
            "stop_time": runtime.stop_time,
            "learner_steps_per_s": runtime.learner_steps / served if served else None,
            "write_failures": self.write_failures.total,
            "precision": self.precision.to_json(),
            **(self.checkpointer.status() if self.checkpointer else {"last_checkpoint": None}),
            **(
                {
                    "eval_episodes": runtime.eval_episodes,
                    "eval_mean_return": float(np.mean(list(runtime.eval_returns))),
                }
                if runtime.eval_returns
                else {}
            ),
        }

    def scalars(self, status: LearnerStatus) -> dict:
        """What goes into TensorBoard: returns, throughput, learner progress, every loss term."""
        elapsed = status.elapsed
        return {
            "return/mean": status.mean_return,
            "return/eval_mean": status.eval_mean_return,
            "throughput/env_frames_per_s": self.metrics.frames_per_second(),
            "throughput/learner_steps_per_s": status.learner_steps / elapsed if elapsed else None,
            "learner/steps": status.learner_steps,
            "learner/inference_batch": status.mean_inference_batch,
            **status.metrics,
        }

    # -- running --------------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Ends the run as a signal would (from any thread): final checkpoint, summary, exit."""
        self.runtime.finish(reason)

    def run(self) -> int:
        """Serves until the budget, a signal or a training failure; returns the exit code
        (:func:`seedrl.learner.main.exit_code`: OK only when the Experiment is finished, STOPPED
        when a signal stopped it after its final checkpoint).

        When that final checkpoint could not be published the process ends at once
        (``os._exit``) with the code: a hung upload thread would hold up a normal exit.
        """
        code = asyncio.run(self._serve())
        if self._exit_now:
            self.close()
            logging.shutdown()
            os._exit(code)
        return code

    async def _serve(self) -> int:
        exp, args, runtime = self.exp, self.args, self.runtime
        address = args.listen or f"[::]:{exp.spec.learner.port}"
        # Resumed: the actors that were streaming reclaim their indices before new ones are
        # granted (their reconnect backoff is at most 10 s).
        indices = ActorIndices(
            limit=exp.spec.actors.replicas,
            reclaim_seconds=RECLAIM_SECONDS if self.resumed else 0.0,
        )
        server, port = await start_server(runtime, address, self.credentials, indices)
        self.serving.set()
        log.info(
            "serving %s on %s",
            exp.metadata.name,
            address if address.startswith("unix:") else f"port {port}",
        )
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():  # signals reach only it
            for signum, why in zip((signal.SIGTERM, signal.SIGINT), SIGNAL_REASONS):
                loop.add_signal_handler(signum, self._stop_on_signal, why)
        if self.stop_requested():
            self._stop_on_signal(SIGNAL_REASONS[0])
        await self._until_finished()
        if runtime.experiment_finished:
            # Let actors see `finished` on their next step before the server goes away. (Not
            # after a signal: they are not told, they reconnect to the next learner; and the
            # grace period is the final checkpoint's.)
            deadline = time.monotonic() + ACTORS_DRAIN_S
            while runtime.connected_actors and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        # The trainer ends its step before the variables are saved; after a signal it has
        # what the final checkpoint can spare of the grace period.
        join = TRAINER_JOIN_S
        if self.signalled_at is not None:
            join = max(1.0, min(join, self._checkpoint_seconds_left() / 2))
        await loop.run_in_executor(None, runtime.shutdown, join)
        await self._final_checkpoint(loop)
        self._write_final_files()
        await server.stop(grace=1.0)
        unhealthy = self.health is not None and self.health.unhealthy()
        if unhealthy:
            log.error(
                "stopped while /healthz had not answered for %.0f s (what a liveness probe "
                "kills): exiting as a failure, so that the restarts are counted",
                self.health.unanswered_seconds(),
            )
        code = exit_code(
            runtime.stop_reason,
            runtime.train_error is not None,
            self.final_checkpoint_failed,
            self.checkpointer is not None and self.checkpointer.conflict is not None,
            unhealthy,
        )
        log.info("exiting with %s", describe_exit(code))
        if args.termination_log:
            write_termination_log(
                args.termination_log, dataclasses.replace(self.status(), state="finished")
            )
        # A hung upload thread would hold up a normal exit (see run()).
        self._exit_now = self.final_checkpoint_failed
        return code

    async def _until_finished(self) -> None:
        """Checks the budget, refreshes status, metrics and TensorBoard until the run ends."""
        runtime = self.runtime
        last_metrics = 0.0
        while not runtime.finished:
            reason = runtime.check_budget()
            if reason:
                runtime.finish(reason)
                break
            self.metrics.tick()
            status = self.status()
            if self.files:
                self.files.write_status(status)
            if time.monotonic() - last_metrics >= METRICS_EVERY_S:
                last_metrics = time.monotonic()
                if self.files:
                    self.files.append_metrics(status)
                if self.summaries and runtime.learner_steps:
                    self.summaries.write(self.metrics.env_frames, self.scalars(status))
            await asyncio.sleep(STATUS_EVERY_S if self.files else 0.1)

    def _stop_on_signal(self, why: str) -> None:
        """Ends the run for a signal, noting when the first one came: the grace period the
        kubelet gives (SIGKILL after it) counts from there."""
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        self.runtime.finish(why)

    def _checkpoint_seconds_left(self, now: float | None = None) -> float:
        """Seconds the final checkpoint may take: :func:`final_checkpoint_seconds` of the grace
        period and the time since the signal."""
        grace = getattr(self.args, "grace_seconds", None)
        return final_checkpoint_seconds(
            grace or self.exp.spec.learner.termination_grace_period_seconds,
            self.signalled_at,
            time.monotonic() if now is None else now,
        )

    async def _final_checkpoint(self, loop: asyncio.AbstractEventLoop) -> None:
        runtime, checkpointer = self.runtime, self.checkpointer
        # After a training failure too: the variables are those of the last good step (a
        # checkpoint of non-finite ones is refused, and the previous one stays the newest).
        if not (checkpointer and runtime.learner_steps and checkpointer.conflict is None):
            return
        timeout = self._checkpoint_seconds_left()
        try:
            path = await asyncio.wait_for(loop.run_in_executor(None, checkpointer.save), timeout)
            log.info("final checkpoint %s", path)
        except Exception as exc:  # the summary still gets written
            self.final_checkpoint_failed = True
            checkpointer.failures += 1
            if isinstance(exc, asyncio.TimeoutError):
                log.error(
                    "final checkpoint not published within %.0f s; the run will resume from %s",
                    timeout,
                    checkpointer.last_checkpoint or "the start",
                )
            else:
                log.exception("final checkpoint failed")

    def _write_final_files(self) -> None:
        summary = self.summary()
        if self.files:
            self.files.write_status(self.status())
            self.files.append_metrics(self.runtime.status())
            self.files.write_summary(summary)
        log.info("finished: %s", summary)
        if self.summaries:
            self.summaries.write(self.metrics.env_frames, self.scalars(self.status()))

    def close(self) -> None:
        """Stops what the constructor started (the HTTP endpoint, TensorBoard's writer);
        calling it again does nothing."""
        if self.summaries is not None:
            self.summaries.close()
            self.summaries = None
        if self.health is not None:
            self.health.stop()
            self.health = None
        if self.http is not None:
            self.http.stop()
            self.http = None


def build(exp: Experiment, args: Any) -> LearnerApp:
    """The learner for ``exp``, wired and ready to :meth:`~LearnerApp.run`.

    Raises:
      SetupError: it cannot start (its ``code`` is the exit code).
    """
    return LearnerApp(exp, args)
