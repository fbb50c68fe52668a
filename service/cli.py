"""The `seedrl` command line.

  seedrl train FILE [--set path=value ...] [--resume] [--runs-dir DIR]
  seedrl validate FILE [--set path=value ...]
  seedrl cost NAME | seedrl cost plan FILE --frames N   (see service/cost_cli.py)
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from common.config import ConfigError, dump_experiment, load_experiment
from service import cost_cli

#: Exit codes of `seedrl train`.
EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_RUN_DIR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="seedrl", description="Scalable deep RL, SEED-style.")
    sub = p.add_subparsers(dest="command", required=True)

    def with_overrides(sp):
        sp.add_argument("file", help="an Experiment YAML file")
        sp.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="PATH=VALUE",
                        help="override a field, e.g. --set spec.budget.maxEnvSteps=20000 "
                             "(repeatable; values are YAML)")

    train = sub.add_parser("train", help="run an Experiment on this machine")
    with_overrides(train)
    train.add_argument("--resume", action="store_true",
                       help="continue runs/<name> from its last checkpoint (also needed to "
                            "continue from a spec.checkpoint.uri that holds checkpoints)")
    train.add_argument("--runs-dir", default="runs", help="where run directories live")
    train.add_argument("--quiet", action="store_true", help="no progress display")

    validate = sub.add_parser("validate", help="check an Experiment and print it resolved")
    with_overrides(validate)
    cost_cli.add_parser(sub)
    return p


def _load(args):
    try:
        return load_experiment(args.file, args.overrides)
    except ConfigError as exc:
        print(f"error: invalid experiment {args.file}:", file=sys.stderr)
        for path, reason in exc.problems:
            print(f"  {path}: {reason}", file=sys.stderr)
        return None


def cmd_validate(args) -> int:
    """Prints the resolved Experiment, or the problems with it."""
    exp = _load(args)
    if exp is None:
        return EXIT_BAD_CONFIG
    sys.stdout.write(dump_experiment(exp))
    return EXIT_OK


def cmd_train(args) -> int:
    """Runs the Experiment locally until its budget, its target return or Ctrl-C."""
    from service.launcher import (LocalRun, RunDirError, check_checkpoint_location,
                                  prepare_run_dir)
    from service.progress import Progress, format_duration

    exp = _load(args)
    if exp is None:
        return EXIT_BAD_CONFIG
    try:
        check_checkpoint_location(exp, args.resume)
        run_dir = prepare_run_dir(exp, args.runs_dir, args.resume)
    except RunDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUN_DIR
    progress = None if args.quiet else Progress(exp.metadata.name, exp.spec.budget)
    run = LocalRun(exp, run_dir, on_status=progress.update if progress else None,
                   cost=cost_cli.train_cost(exp, run_dir))
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        run.request_stop(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"training {exp.metadata.name}: {exp.spec.actors.replicas} actors x "
          f"{exp.spec.actors.envs_per_actor} envs of {exp.spec.env.id}, agent "
          f"{exp.spec.agent.name}; logs in {run_dir}", flush=True)
    summary = run.run()
    if progress:
        progress.close()
    reason = summary.get("stop_reason")
    if reason == "learner_failed":
        print(f"error: the learner failed (exit code {summary.get('learner_exit_code')}); "
              f"see {summary.get('log')}", file=sys.stderr)
        return EXIT_FAILED
    mean = summary.get("mean_return_100")
    mean_text = "n/a" if mean is None else f"{mean:.1f}"
    print(f"stopped ({reason}) after {summary.get('env_steps', 0):,} env steps in "
          f"{format_duration(summary.get('seconds', 0))} "
          f"({summary.get('env_steps_per_s', 0):,.0f} steps/s); mean return of the last "
          f"{summary.get('return_window', 0)} episodes: {mean_text}. Summary: "
          f"{run_dir}/summary.json", flush=True)
    if run.cost_status:
        from service.cost import format_cost_line
        print(format_cost_line(run.cost_status), flush=True)
    if reason == "train_error":
        return EXIT_FAILED
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def main(argv=None) -> int:
    """Entry point of the `seedrl` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s seedrl %(levelname)s %(message)s")
    if args.command == "train":
        return cmd_train(args)
    if args.command == "cost":
        return cost_cli.cmd_cost(args)
    return cmd_validate(args)


if __name__ == "__main__":
    sys.exit(main())
