"""Learner entry point: ``python -m seedrl.learner --config experiment.yaml``.

Serves the gRPC stream for every actor, trains, watches the budget, writes status, metrics,
checkpoints and a summary. Exit codes (:class:`seedrl.common.exit_codes.ExitCode`): 0 only when
the Experiment is finished (budget or target return reached); 75 (STOPPED) when SIGTERM or
SIGINT stopped it earlier and the final checkpoint is written, so that it is run again; 1 if
training fails or that final checkpoint could not be written; 2 on a bad Experiment and 4 when
the checkpoint location cannot be used (unreadable, or another learner publishes there):
restarting would fail the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import math
import os
import signal
import sys
import threading
import time

import numpy as np

from seedrl.common.config import ConfigError, load_experiment
from seedrl.common.exit_codes import ExitCode, describe as describe_exit
from seedrl.common.learner_status import LearnerStatus

log = logging.getLogger("learner")

STATUS_EVERY_S = 0.5
#: Why the learner stopped early when a signal stopped it (``runtime.stop_reason``).
SIGNAL_REASONS = ("terminated", "interrupted")
METRICS_EVERY_S = 2.0
#: After resuming, how long no new actor index is granted (see learner/actor_indices.py).
RECLAIM_SECONDS = 15.0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="learner", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the Experiment YAML file")
    p.add_argument("--run-dir", help="where to write status, metrics, summary and (by default) "
                                     "checkpoints")
    p.add_argument("--listen", help="address to serve: host:port or unix:PATH "
                                    "(default [::]:spec.learner.port)")
    p.add_argument("--no-train", action="store_true",
                   help="serve inference only (throughput measurements)")
    p.add_argument("--tls-cert", help="PEM certificate: serve TLS instead of plaintext")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--termination-log",
                   help="write the final status here as JSON on the way out (a pod's "
                        "terminationMessagePath: the operator reads it once the learner is "
                        "gone)")
    p.add_argument("--metrics-address",
                   help="host:port of the HTTP endpoint with /metrics (Prometheus), /status "
                        "and /healthz (default 0.0.0.0:spec.learner.metricsPort); 'off' "
                        "serves none")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _summary(runtime, checkpointer) -> dict:
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
        "first_actions_time": runtime.first_actions_time,
        "stop_time": runtime.stop_time,
        "learner_steps_per_s": runtime.learner_steps / served if served else None,
        **(checkpointer.status() if checkpointer else {"last_checkpoint": None}),
        **({"eval_episodes": runtime.eval_episodes,
            "eval_mean_return_100": float(np.mean(runtime.eval_returns))}
           if runtime.eval_returns else {}),
    }


def _scalars(status: LearnerStatus, metrics) -> dict:
    """What goes into TensorBoard: returns, throughput, learner progress, every loss term."""
    elapsed = status.elapsed
    return {"return/mean": status.mean_return,
            "return/eval_mean": status.eval_mean_return,
            "throughput/env_frames_per_s": metrics.frames_per_second(),
            "throughput/learner_steps_per_s":
                status.learner_steps / elapsed if elapsed else None,
            "learner/steps": status.learner_steps,
            "learner/inference_batch": status.mean_inference_batch,
            **status.metrics}


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


async def serve(exp, args) -> int:
    """Runs the learner until the budget, a signal or a training failure; returns the exit code."""
    # Imported here so that `--help` and config errors answer without loading TensorFlow.
    from seedrl.learner.agents import build_agent
    from seedrl.common.metrics_http import MetricsServer, bind_address
    from seedrl.common.storage import StorageError
    from seedrl.learner.checkpoint import CheckpointError, checkpoint_uri, open_checkpointer
    from seedrl.learner.devices import setup as setup_devices
    from seedrl.learner.metrics import LearnerMetrics
    from seedrl.learner.run_files import RunFiles
    from seedrl.common.storage import tensorboard_uri
    from seedrl.learner.tensorboard import Summaries
    from seedrl.learner.runtime import LearnerRuntime
    from seedrl.learner.actor_indices import ActorIndices
    from seedrl.learner.server import server_credentials, start_server

    try:
        # First: logical CPU devices can only be configured before TensorFlow initialises.
        placement = setup_devices(exp.spec.learner.devices)
    except ConfigError as exc:
        log.error("devices: %s", exc)
        return ExitCode.BAD_CONFIG
    checkpointer = None
    resumed = False

    def on_agent_built(agent):
        if checkpointer is not None:
            checkpointer.attach(agent)  # restores the latest checkpoint, if any
        _freeze_heap()

    serving = threading.Event()
    runtime = LearnerRuntime(exp, lambda e, s: build_agent(e, s, placement),
                             train=not args.no_train, on_agent_built=on_agent_built,
                             inference_lanes=len(placement.inference_devices) or 1)
    runtime.add_train_hook(_freeze_after_first_call())

    def current_status() -> LearnerStatus:
        status = runtime.status()
        if checkpointer:
            status = dataclasses.replace(status, **checkpointer.status())
        return status

    metrics = LearnerMetrics(runtime)
    runtime.observer = metrics
    http = None
    bind = bind_address(args.metrics_address, exp.spec.learner.metrics_port)
    if bind:
        # Ready once the gRPC server is up (the checkpoint is restored before it starts).
        http = MetricsServer(metrics.registry, lambda: current_status().to_json(),
                             host=bind[0], port=bind[1],
                             ready=lambda: serving.is_set() and not runtime.finished)
        try:
            log.info("metrics on http://%s:%d/metrics, status on /status", bind[0],
                     http.start())
        except OSError as exc:  # training matters more than its metrics
            log.error("cannot serve metrics on %s:%d: %s", bind[0], bind[1], exc)
            http = None
    ckpt_cfg = exp.spec.checkpoint
    uri = checkpoint_uri(ckpt_cfg.uri, args.run_dir)
    if uri and not args.no_train:
        checkpointer = open_checkpointer(uri, runtime, ckpt_cfg.keep, ckpt_cfg.interval_steps,
                                         ckpt_cfg.interval_seconds)
        # Before serving: a run that cannot resume fails now, not when the first actor comes.
        try:
            found = checkpointer.open()
        except CheckpointError as exc:
            log.error("cannot use the checkpoints at %s: %s", uri, exc)
            return ExitCode.CHECKPOINT_LOCATION
        except StorageError as exc:
            log.error("checkpoint store %s unavailable: %s", uri, exc)
            return ExitCode.FAILED
        resumed = bool(found)
        if found:
            log.info("will resume from learner step %d (%d env steps) in %s",
                     found["learner_steps"], found["env_steps"], uri)
        runtime.add_train_hook(checkpointer.maybe_save)
        metrics.checkpointer = checkpointer
    elif not args.no_train:
        log.warning("no spec.checkpoint.uri and no run directory: this run keeps no checkpoints")
    files = RunFiles(args.run_dir) if args.run_dir else None
    summaries = None
    tb_uri = tensorboard_uri(ckpt_cfg.uri, args.run_dir)
    if tb_uri and not args.no_train:
        try:
            summaries = Summaries(tb_uri)
            log.info("TensorBoard summaries in %s", tb_uri)
        except (StorageError, OSError, ValueError) as exc:
            log.error("no TensorBoard summaries: %s", exc)

    address = args.listen or f"[::]:{exp.spec.learner.port}"
    # Resumed: the actors that were streaming reclaim their indices before new ones are
    # granted (their reconnect backoff is at most 10 s).
    indices = ActorIndices(limit=exp.spec.actors.replicas,
                           reclaim_seconds=RECLAIM_SECONDS if resumed else 0.0)
    server, port = await start_server(runtime, address,
                                      server_credentials(args.tls_cert, args.tls_key), indices)
    serving.set()
    log.info("serving %s on %s", exp.metadata.name,
             address if address.startswith("unix:") else f"port {port}")

    loop = asyncio.get_running_loop()
    for signum, reason in zip((signal.SIGTERM, signal.SIGINT), SIGNAL_REASONS):
        loop.add_signal_handler(signum, runtime.finish, reason)

    last_metrics = 0.0
    while not runtime.finished:
        reason = runtime.check_budget()
        if reason:
            runtime.finish(reason)
            break
        metrics.tick()
        status = current_status()
        if files:
            files.write_status(status)
        if time.monotonic() - last_metrics >= METRICS_EVERY_S:
            last_metrics = time.monotonic()
            if files:
                files.append_metrics(status)
            if summaries and runtime.learner_steps:
                summaries.write(metrics.env_frames, _scalars(status, metrics))
        await asyncio.sleep(STATUS_EVERY_S if files else 0.1)

    # Let actors see `finished` on their next step before the server goes away.
    deadline = time.monotonic() + 3.0
    while runtime.connected_actors and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await loop.run_in_executor(None, runtime.shutdown)
    final_failed = False
    if checkpointer and runtime.learner_steps and runtime.train_error is None \
            and checkpointer.conflict is None:
        timeout = exp.spec.learner.termination_grace_period_seconds - 5
        try:
            path = await asyncio.wait_for(loop.run_in_executor(None, checkpointer.save),
                                          timeout)
            log.info("final checkpoint %s", path)
        except Exception as exc:  # noqa: BLE001 - the summary still gets written
            final_failed = True
            checkpointer.failures += 1
            if isinstance(exc, asyncio.TimeoutError):
                log.error("final checkpoint not published within %.0f s; the run will resume "
                          "from %s", timeout, checkpointer.last_checkpoint or "the start")
            else:
                log.exception("final checkpoint failed")
    summary = _summary(runtime, checkpointer)
    if files:
        files.write_status(current_status())
        files.append_metrics(runtime.status())
        files.write_summary(summary)
    log.info("finished: %s", summary)
    if summaries:
        summaries.write(metrics.env_frames, _scalars(current_status(), metrics))
        summaries.close()
    if http:
        http.stop()
    await server.stop(grace=1.0)
    code = exit_code(runtime.stop_reason, runtime.train_error is not None, final_failed,
                     checkpointer is not None and checkpointer.conflict is not None)
    log.info("exiting with %s", describe_exit(code))
    if args.termination_log:
        write_termination_log(args.termination_log, dataclasses.replace(
            current_status(), state="finished"))
    if final_failed:
        # os._exit: a hung upload thread would hold up a normal exit.
        logging.shutdown()
        os._exit(code)
    return code


#: The most a kubelet keeps of a termination message.
TERMINATION_LOG_BYTES = 4096
#: The fields of the final status the termination message keeps (what the operator reports).
TERMINATION_FIELDS = ("state", "experiment", "run_id", "env_steps", "learner_steps",
                      "episodes", "mean_return", "return_window", "elapsed", "eval_episodes",
                      "eval_mean_return", "stop_reason", "last_checkpoint")


def write_termination_log(path: str, status: LearnerStatus) -> None:
    """Writes the final status as compact JSON (:meth:`LearnerStatus.to_json`, the fields
    the operator reports), within the kubelet's 4096 bytes: what the operator reads once the
    learner pod has stopped and its /status is gone."""
    data = status.to_json()
    final = {k: data[k] for k in TERMINATION_FIELDS if k in data}
    text = json.dumps(final, separators=(",", ":"), default=str)
    if len(text.encode()) > TERMINATION_LOG_BYTES:
        final.pop("last_checkpoint", None)
        text = json.dumps(final, separators=(",", ":"), default=str)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        log.warning("cannot write the termination log %s: %s", path, exc)


def exit_code(stop_reason: str | None, train_failed: bool, final_checkpoint_failed: bool,
              checkpoint_conflict: bool) -> ExitCode:
    """The learner's exit code once it has stopped.

    0 only when the Experiment is finished (a budget or the target return was reached): a
    learner stopped by a signal exits STOPPED, so that a drained, preempted or suspended pod is
    run again instead of ending the run. A stop whose final checkpoint failed is a crash (the
    run resumes from the previous checkpoint, counted against the restart limit), unless the
    budget was reached anyway.
    """
    if checkpoint_conflict:
        return ExitCode.CHECKPOINT_LOCATION
    if train_failed:
        return ExitCode.FAILED
    if stop_reason in SIGNAL_REASONS or stop_reason is None:
        return ExitCode.FAILED if final_checkpoint_failed else ExitCode.STOPPED
    return ExitCode.OK


def main(argv=None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s learner %(levelname)s %(message)s")
    try:
        exp = load_experiment(args.config)
    except ConfigError as exc:
        print(f"invalid experiment {args.config}:\n{exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return int(asyncio.run(serve(exp, args)))
