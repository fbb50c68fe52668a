"""Learner entry point: ``python -m seedrl.learner --config experiment.yaml``.

Serves the gRPC stream for every actor, trains, watches the budget, writes status, metrics,
checkpoints and a summary. Exit codes (:class:`seedrl.common.exit_codes.ExitCode`): 0 only when
the Experiment is finished (budget or target return reached); 75 (STOPPED) when SIGTERM or
SIGINT stopped it earlier and the final checkpoint is written, so that it is run again; 1 if
training fails (after a final checkpoint too, when the variables are sound) or that final
checkpoint could not be written; 2 on a bad Experiment or env spec, 4 when the checkpoint
location cannot be used (unreadable, another learner publishes there, or its checkpoints were
trained on another env spec) and 5 (NO_ACCELERATOR) when it was started with ``--accelerator
gpu|tpu`` and finds no such device: restarting would fail the same way.

The env spec comes from ``--env-spec`` (the launcher derives it from the Experiment by making
the env once), else from the checkpoint being resumed; the agent is built and restored before
the first actor is served, and every actor's Hello is checked against it.

The command line, the exit code and the termination message; the process itself is
:class:`seedrl.learner.app.LearnerApp`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any

from seedrl.common.config import ConfigError, load_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.wire import TERMINATION_MESSAGE_BYTES

log = logging.getLogger("learner")

#: Why the learner stopped early when a signal stopped it (``runtime.stop_reason``).
SIGNAL_REASONS = ("terminated", "interrupted")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="learner", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the Experiment YAML file")
    p.add_argument(
        "--run-dir", help="where to write status, metrics, summary and (by default) checkpoints"
    )
    p.add_argument(
        "--listen", help="address to serve: host:port or unix:PATH (default [::]:spec.learner.port)"
    )
    p.add_argument(
        "--env-spec",
        help="JSON env spec derived from the Experiment (python -m seedrl.actors "
        "--env-spec-out FILE): the agent is built for it before serving and "
        "every actor's hello must match it; without it, the checkpoint's, "
        "else the first actor naming spec.env.id decides",
    )
    p.add_argument(
        "--env-spec-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for the --env-spec file to appear (the local launcher "
        "writes it while the learner starts); default: it must exist at once",
    )
    p.add_argument(
        "--no-train", action="store_true", help="serve inference only (throughput measurements)"
    )
    p.add_argument(
        "--accelerator",
        choices=("cpu", "gpu", "tpu"),
        help="the accelerator this learner was scheduled for (the operator passes "
        "spec.learner.accelerator.kind): with gpu or tpu, exit "
        f"NO_ACCELERATOR ({int(ExitCode.NO_ACCELERATOR)}) at once when none is found instead "
        "of training on the host's CPU; default: use whatever the machine has",
    )
    p.add_argument(
        "--grace-seconds",
        type=int,
        help="seconds this process gets between SIGTERM and SIGKILL (the pod's "
        "terminationGracePeriodSeconds; the operator passes at most 15 on Spot VMs): the "
        "final checkpoint must be published 5 s before; default: "
        "spec.learner.terminationGracePeriodSeconds",
    )
    p.add_argument("--tls-cert", help="PEM certificate: serve TLS instead of plaintext")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument(
        "--termination-log",
        help="write the final status here as JSON on the way out (a pod's "
        "terminationMessagePath: the operator reads it once the learner is "
        "gone)",
    )
    p.add_argument(
        "--metrics-address",
        help="host:port of the HTTP endpoint with /metrics (Prometheus), /status "
        "and /healthz (default 0.0.0.0:spec.learner.metricsPort); 'off' "
        "serves none",
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


#: The most a kubelet keeps of a termination message.
TERMINATION_LOG_BYTES = TERMINATION_MESSAGE_BYTES
#: The fields of the final status the termination message keeps (what the operator reports).
TERMINATION_FIELDS = (
    "state",
    "experiment",
    "run_id",
    "env_steps",
    "env_frames",
    "learner_steps",
    "episodes",
    "mean_return",
    "return_window",
    "elapsed",
    "eval_episodes",
    "eval_mean_return",
    "stop_reason",
    "last_checkpoint",
)


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


def exit_code(
    stop_reason: str | None,
    train_failed: bool,
    final_checkpoint_failed: bool,
    checkpoint_conflict: bool,
    unhealthy: bool = False,
) -> ExitCode:
    """The learner's exit code once it has stopped.

    0 only when the Experiment is finished (a budget or the target return was reached): a
    learner stopped by a signal exits STOPPED, so that a drained, preempted or suspended pod is
    run again instead of ending the run. A stop whose final checkpoint failed is a crash (the
    run resumes from the previous checkpoint, counted against the restart limit), unless the
    budget was reached anyway; so is a stop while its own /healthz was not answering
    (``unhealthy``, :mod:`seedrl.learner.health`): what a liveness probe kills, which would
    otherwise be replaced for ever without counting.
    """
    if checkpoint_conflict:
        return ExitCode.CHECKPOINT_LOCATION
    if train_failed:
        return ExitCode.FAILED
    if stop_reason in SIGNAL_REASONS or stop_reason is None:
        return ExitCode.FAILED if final_checkpoint_failed or unhealthy else ExitCode.STOPPED
    return ExitCode.OK


class EarlySignals:
    """SIGTERM and SIGINT until the learner installs its own handlers (it imports TensorFlow,
    builds its agent and restores a checkpoint first: seconds to minutes). Python's default
    would end the process by the signal (exit 143), which a Job counts as a crash; recorded
    here instead, the learner exits STOPPED with nothing lost (it has trained nothing yet)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> "EarlySignals":
        """Takes over SIGTERM and SIGINT (in the main thread only, where signals arrive)."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def _record(self, signum, _frame) -> None:
        self.received = signum

    def restore(self) -> None:
        """Gives the signals back to the handlers they had before."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def main(argv=None) -> int:
    """Entry point; returns the process exit code."""
    early = EarlySignals().install()
    try:
        return _main(argv, early)
    finally:
        early.restore()


def _main(argv, early: EarlySignals) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s learner %(levelname)s %(message)s"
    )
    try:
        exp = load_experiment(args.config)
    except ConfigError as exc:
        print(f"invalid experiment {args.config}:\n{exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Imported here so that `--help` and config errors answer without loading TensorFlow.
    from seedrl.learner.app import SetupError, build

    try:
        app = build(exp, args)
    except SetupError as exc:
        log.error("%s", exc)
        return int(exc.code)
    try:
        if early.received is not None:
            log.info("stopped by signal %d before serving; nothing to checkpoint", early.received)
            return int(ExitCode.STOPPED)
        # The app's event loop takes the signals over; one that arrives before it does is
        # still seen (its loop asks once its handlers are in place).
        app.stop_requested = lambda: early.received is not None
        return int(app.run())
    finally:
        app.close()
