"""Learner entry point: ``python -m seedrl.learner --config experiment.yaml``.

The command line and the exit code; the process itself is :class:`seedrl.learner.app.LearnerApp`.

Serves the gRPC stream for every actor, trains, watches the budget, writes status, metrics,
checkpoints and a summary, and exits 0 when the budget is reached or on SIGTERM/SIGINT (after a
final checkpoint). Exits with :class:`seedrl.common.exit_codes.ExitCode`: FAILED (1) if training
fails, BAD_CONFIG (2) on a bad Experiment and CHECKPOINT_LOCATION (4) when the checkpoint location
cannot be used (unreadable, or another learner publishes there): restarting would fail the same
way.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from seedrl.common.config import ConfigError, load_experiment
from seedrl.common.exit_codes import ExitCode

log = logging.getLogger("learner")


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
    p.add_argument("--metrics-address",
                   help="host:port of the HTTP endpoint with /metrics (Prometheus), /status "
                        "and /healthz (default 0.0.0.0:spec.learner.metricsPort); 'off' "
                        "serves none")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


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
    # Imported here so that `--help` and config errors answer without loading TensorFlow.
    from seedrl.learner.app import SetupError, build

    try:
        app = build(exp, args)
    except SetupError as exc:
        log.error("%s", exc)
        return exc.code
    try:
        return app.run()
    finally:
        app.close()
