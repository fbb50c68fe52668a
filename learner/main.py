"""Learner entry point: ``python -m learner --config experiment.yaml``.

Serves the gRPC stream for every actor, trains, watches the budget, writes status, metrics,
checkpoints and a summary, and exits 0 when the budget is reached or on SIGTERM/SIGINT (after a
final checkpoint). Exits 1 if training fails and 2 on a bad Experiment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import sys
import time

import numpy as np

from common.config import ConfigError, load_experiment

log = logging.getLogger("learner")

STATUS_EVERY_S = 0.5
METRICS_EVERY_S = 2.0


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
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _summary(runtime, checkpointer) -> dict:
    mean = runtime.mean_return
    elapsed = runtime.elapsed
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
        "last_checkpoint": checkpointer.last_checkpoint if checkpointer else None,
        **({"eval_episodes": runtime.eval_episodes,
            "eval_mean_return_100": float(np.mean(runtime.eval_returns))}
           if runtime.eval_returns else {}),
    }


async def serve(exp, args) -> int:
    """Runs the learner until the budget, a signal or a training failure; returns the exit code."""
    # Imported here so that `--help` and config errors answer without loading TensorFlow.
    from learner.agents import build_agent
    from learner.checkpoint import Checkpointer, checkpoint_directory
    from learner.devices import setup as setup_devices
    from learner.run_files import RunFiles
    from learner.runtime import LearnerRuntime
    from learner.server import server_credentials, start_server

    try:
        # First: logical CPU devices can only be configured before TensorFlow initialises.
        placement = setup_devices(exp.spec.learner.devices)
    except ConfigError as exc:
        log.error("devices: %s", exc)
        return 2
    checkpointer = None

    def on_agent_built(agent):
        if checkpointer is not None:
            checkpointer.attach(agent)  # restores the latest checkpoint, if any

    runtime = LearnerRuntime(exp, lambda e, s: build_agent(e, s, placement),
                             train=not args.no_train, on_agent_built=on_agent_built,
                             inference_lanes=len(placement.inference_devices) or 1)
    ckpt_cfg = exp.spec.checkpoint
    ckpt_dir = checkpoint_directory(ckpt_cfg.uri, args.run_dir)
    if ckpt_dir and not args.no_train:
        checkpointer = Checkpointer(ckpt_dir, runtime, ckpt_cfg.keep, ckpt_cfg.interval_steps,
                                    ckpt_cfg.interval_seconds)
        runtime.add_train_hook(checkpointer.maybe_save)
    files = RunFiles(args.run_dir) if args.run_dir else None

    address = args.listen or f"[::]:{exp.spec.learner.port}"
    server, port = await start_server(runtime, address,
                                      server_credentials(args.tls_cert, args.tls_key))
    log.info("serving %s on %s", exp.metadata.name,
             address if address.startswith("unix:") else f"port {port}")

    loop = asyncio.get_running_loop()
    for signum, reason in ((signal.SIGTERM, "terminated"), (signal.SIGINT, "interrupted")):
        loop.add_signal_handler(signum, runtime.finish, reason)

    last_metrics = 0.0
    while not runtime.finished:
        reason = runtime.check_budget()
        if reason:
            runtime.finish(reason)
            break
        status = runtime.status()
        if checkpointer:
            status["last_checkpoint"] = checkpointer.last_checkpoint
        if files:
            files.write_status(status)
            if time.monotonic() - last_metrics >= METRICS_EVERY_S:
                files.append_metrics(status)
                last_metrics = time.monotonic()
        await asyncio.sleep(STATUS_EVERY_S if files else 0.1)

    # Let actors see `finished` on their next step before the server goes away.
    deadline = time.monotonic() + 3.0
    while runtime.connected_actors and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await loop.run_in_executor(None, runtime.shutdown)
    if checkpointer and runtime.learner_steps and runtime.train_error is None:
        try:
            path = await loop.run_in_executor(None, checkpointer.save)
            log.info("final checkpoint %s", path)
        except Exception:  # noqa: BLE001 - the summary still gets written
            log.exception("final checkpoint failed")
    summary = _summary(runtime, checkpointer)
    if files:
        files.write_status({**runtime.status(), "last_checkpoint": summary["last_checkpoint"]})
        files.append_metrics(runtime.status())
        files.write_summary(summary)
    log.info("finished: %s", summary)
    await server.stop(grace=1.0)
    return 1 if runtime.train_error is not None else 0


def main(argv=None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s learner %(levelname)s %(message)s")
    try:
        exp = load_experiment(args.config)
    except ConfigError as exc:
        print(f"invalid experiment {args.config}:\n{exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return asyncio.run(serve(exp, args))
