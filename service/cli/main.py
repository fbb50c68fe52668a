"""The `seedrl` command line.

seedrl train FILE [--set path=value ...] [--resume] [--runs-dir DIR]
seedrl validate FILE [--set path=value ...]
seedrl cost NAME | seedrl cost plan FILE --frames N   (see service/cli/cost.py)
seedrl submit FILE [--set path=value ...] [-n NAMESPACE] [--dry-run]
seedrl status [-n NAMESPACE | -A]
seedrl runs [--runs-dir DIR] | seedrl plot RUN [RUN ...] [-o curves.png]
seedrl eval LOCATION | --experiment NAME [-n NAMESPACE] [--episodes N] [--video out.mp4] ...
seedrl export LOCATION | --experiment NAME [-n NAMESPACE]  OUT
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import signal
import sys

from seedrl.common.config import GROUP, SINGULAR, ConfigError, dump_experiment, load_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.common.storage import tensorboard_uri
from seedrl.service.cli import cost as cost_cli
from seedrl.service.cli import runs as runs_cli
from seedrl.service.cli import volumes as volumes_cli


def parser() -> argparse.ArgumentParser:
    """The ``seedrl`` command line: every command and option (also what docs/reference/cli.md is
    generated from)."""
    p = argparse.ArgumentParser(prog="seedrl", description="Scalable deep RL, SEED-style.")
    sub = p.add_subparsers(dest="command", required=True)

    def with_overrides(sp):
        sp.add_argument("file", help="an Experiment YAML file")
        sp.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="PATH=VALUE",
            help="override a field, e.g. --set spec.budget.maxEnvSteps=20000 "
            "(repeatable; values are YAML)",
        )

    train = sub.add_parser("train", help="run an Experiment on this machine")
    with_overrides(train)
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue runs/<name> from its last checkpoint (also needed to "
        "continue from a spec.checkpoint.uri that holds checkpoints)",
    )
    train.add_argument("--runs-dir", default="runs", help="where run directories live")
    train.add_argument("--quiet", action="store_true", help="no progress display")

    validate = sub.add_parser("validate", help="check an Experiment and print it resolved")
    with_overrides(validate)
    validate.add_argument(
        "--no-env-check",
        action="store_true",
        help="skip making one env of spec.env (to check that its id is "
        "registered, after spec.env.imports): for a machine without "
        "the env's packages",
    )
    cost_cli.add_parser(sub)
    runs_cli.add_parsers(sub)

    def with_cluster(sp):
        sp.add_argument(
            "--kubeconfig",
            help="kubeconfig file (default: in a pod, its service "
            "account; else $KUBECONFIG or ~/.kube/config)",
        )
        sp.add_argument("--context", help="kubeconfig context (default: the current one)")
        sp.add_argument("-n", "--namespace", help="namespace (default: the context's)")

    submit = sub.add_parser(
        "submit", help="validate an Experiment here, then apply it to the cluster"
    )
    with_overrides(submit)
    with_cluster(submit)
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and print what would be applied; touch nothing",
    )
    submit.add_argument(
        "--force-conflicts",
        action="store_true",
        help="take over fields that another manager (kubectl, an autoscaler) set",
    )

    status = sub.add_parser(
        "status", help="the Experiments in a namespace: phase, steps, return, cost"
    )
    with_cluster(status)
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    volumes_cli.add_parser(sub, with_cluster)

    def with_location(sp):
        sp.add_argument(
            "location",
            nargs="?",
            help="a run directory (runs/<name>), a checkpoint directory, a file:// or gs:// URI "
            "of either, or of one checkpoint (.../ckpt-...): the newest verified one by default",
        )
        sp.add_argument(
            "--experiment",
            metavar="NAME",
            help="instead of LOCATION: the checkpoint an Experiment in the cluster reports",
        )
        with_cluster(sp)

    evaluate = sub.add_parser(
        "eval", help="play episodes with a trained policy: return, length, a video"
    )
    with_location(evaluate)
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes (default 10)")
    evaluate.add_argument("--env", help="another env id with the same spaces")
    mode = evaluate.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        action="store_true",
        help="the most likely (R2D2: greedy) action (the default)",
    )
    mode.add_argument("--stochastic", action="store_true", help="sample actions as in training")
    evaluate.add_argument("--seed", type=int, default=0, help="episode j resets with seed + j")
    evaluate.add_argument("--envs", type=int, default=8, help="envs stepped together (default 8)")
    evaluate.add_argument("--output", default="eval.json", help="results file (default eval.json)")
    evaluate.add_argument("--video", help="record the first episode(s) to this .mp4 or .gif")
    evaluate.add_argument("--video-episodes", type=int, default=1, help="episodes recorded")
    evaluate.add_argument("--quiet", action="store_true", help="no progress display")

    export = sub.add_parser(
        "export", help="write a trained policy as a TensorFlow SavedModel for serving"
    )
    with_location(export)
    export.add_argument("out", nargs="?", help="model directory: written as OUT/<version>/")
    export.add_argument(
        "--version", type=int, help="version subdirectory (default: the checkpoint's step)"
    )
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
    """Prints the resolved Experiment, or the problems with it; then checks that spec.env can
    be made here (its id registered after spec.env.imports) and says so."""
    exp = _load(args)
    if exp is None:
        return ExitCode.BAD_CONFIG
    sys.stdout.write(dump_experiment(exp))
    for line in precision_lines(exp):
        print(line, file=sys.stderr)
    if args.no_env_check:
        return ExitCode.OK
    problem, spec = check_env(exp)
    if problem:
        print(f"error: invalid experiment {args.file}:\n  {problem}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    print(f"spec.env.id: {exp.spec.env.id} is registered: {spec.describe()}", file=sys.stderr)
    return ExitCode.OK


def precision_lines(exp, machine=None) -> list[str]:
    """What ``spec.agent.network.precision`` resolves to on this machine (``machine``: the
    device found here unless given), and on the cluster learner's GPU or TPU where
    ``spec.learner.accelerator`` asks for one; a warning where an explicit bfloat16 is
    emulated. See :mod:`seedrl.common.precision`."""
    from seedrl.common import precision

    network = exp.spec.agent.network
    requested = network.precision
    field = "spec.agent.network.precision"
    choice = precision.resolve(requested, machine or precision.this_machine(), network.name)
    lines = [f"{field} on this machine: {choice.summary()}"]
    if choice.warning:
        lines.append(f"warning: {choice.warning}")
    accelerator = exp.spec.learner.accelerator
    device = precision.accelerator_device(
        accelerator.kind, accelerator.gpu.type, accelerator.tpu.type
    )
    if device is not None:
        cluster = precision.resolve(requested, device, network.name)
        lines.append(
            f"{field} on the cluster learner's {accelerator.kind.upper()} "
            f"(spec.learner.accelerator): {cluster.summary()}"
        )
        if cluster.warning:
            lines.append(f"warning: {cluster.warning}")
    return lines


def check_env(exp):
    """Makes one env of ``spec.env`` with the actors' own code, in a child process (the CLI
    does not import the actors); returns (None, its EnvSpec) or (the reason, None)."""
    import os
    import tempfile

    from seedrl.common.wire import EnvSpec
    from seedrl.service.local.launcher import derive_env_spec
    from seedrl.service.local.processes import child_env

    with tempfile.TemporaryDirectory(prefix="seedrl-validate-") as tmp:
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w", encoding="utf-8") as fh:
            fh.write(dump_experiment(exp))
        out = os.path.join(tmp, "env_spec.json")
        problem = derive_env_spec(config, out, child_env())
        return (problem, None) if problem else (None, EnvSpec.read(out))


def cmd_train(args) -> int:
    """Runs the Experiment locally until its budget, its target return or Ctrl-C."""
    from seedrl.service.local.launcher import (
        LocalRun,
        RunDirError,
        check_checkpoint_location,
        prepare_run_dir,
    )
    from seedrl.service.cost.report import format_duration
    from seedrl.service.local.progress import Progress

    exp = _load(args)
    if exp is None:
        return ExitCode.BAD_CONFIG
    try:
        check_checkpoint_location(exp, args.resume)
        # Held until this process ends (and by the learner until it ends).
        held = prepare_run_dir(exp, args.runs_dir, args.resume)
    except RunDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.REFUSED
    except OSError as exc:  # a full disk, say
        print(f"error: cannot write the run directory: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    run_dir = held.path
    progress = None if args.quiet else Progress(exp.metadata.name, exp.spec.budget)
    run = LocalRun(
        exp,
        run_dir,
        on_status=progress.update if progress else None,
        cost=cost_cli.train_cost(exp, run_dir),
        run_lock=held,
    )
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        run.request_stop(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(
        f"training {exp.metadata.name}: {exp.spec.actors.replicas} actors x "
        f"{exp.spec.actors.envs_per_actor} envs of {exp.spec.env.id}, agent "
        f"{exp.spec.agent.name}; logs in {run_dir}",
        flush=True,
    )
    ports = run.metrics_ports
    logdir = tensorboard_uri(exp.spec.checkpoint.uri, run_dir)
    # The hint names a command that runs here, or what to install for it.
    viewer = (
        f"tensorboard --logdir {logdir}"
        if importlib.util.find_spec("tensorboard") is not None
        else f"pip install 'seedrl[local]', then tensorboard --logdir {logdir}"
    )
    print(
        f"metrics: learner http://127.0.0.1:{ports[0]}/metrics (status on /status), actors "
        f"on ports {', '.join(map(str, ports[1:-1]))}, phase and cost on port {ports[-1]}; "
        f"Prometheus targets in "
        f"{run.targets_path} (file_sd_configs); TensorBoard: {viewer}",
        flush=True,
    )
    summary = run.run()
    if progress:
        progress.close()
    reason = summary.get("stop_reason")
    if reason == "learner_failed":
        print(
            f"error: the learner failed (exit code {summary.get('learner_exit_code')}); "
            f"see {summary.get('log')}",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    if reason == "no_progress":
        print(f"error: {summary.get('error')} (logs in {run_dir})", file=sys.stderr)
        return ExitCode.FAILED
    mean = summary.get("mean_return_100")
    mean_text = "n/a" if mean is None else f"{mean:.1f}"
    print(
        f"stopped ({reason}) after {summary.get('env_steps', 0):,} env steps in "
        f"{format_duration(summary.get('seconds', 0))} "
        f"({summary.get('env_steps_per_s', 0):,.0f} steps/s); mean return of the last "
        f"{summary.get('return_window', 0)} episodes: {mean_text}. Summary: "
        f"{run_dir}/summary.json",
        flush=True,
    )
    if run.cost_status:
        from seedrl.service.cost import format_cost_line

        print(format_cost_line(run.cost_status), flush=True)
    if reason == "train_error":
        return ExitCode.FAILED
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK


def cmd_submit(args) -> int:
    """Validates an Experiment locally (every field, as the operator will), then applies it."""
    import yaml

    from seedrl.common.config import apply_overrides, read_yaml_file
    from seedrl.service import kube

    from seedrl.service.cli import cluster
    from seedrl.service.operator import reconcile

    exp = _load(args)
    if exp is None:
        return ExitCode.BAD_CONFIG
    # What is applied is the document as written (plus --set), so that defaults stay the
    # operator's; it was just validated, resolved, above.
    document = apply_overrides(read_yaml_file(args.file, "Experiment"), args.overrides)
    try:
        reconcile.validate(document)  # the cluster's own rules, e.g. the name's length
    except ConfigError as exc:
        print(f"error: invalid experiment {args.file}:", file=sys.stderr)
        for path, reason in exc.problems:
            print(f"  {path}: {reason}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    namespace = (
        args.namespace
        or exp.metadata.namespace
        or kube.default_namespace(args.kubeconfig, args.context)
    )
    notice = cluster.checkpoint_notice(exp, namespace)
    if notice:
        print(notice, file=sys.stderr)
    if args.dry_run:
        document.setdefault("metadata", {})["namespace"] = namespace
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
        return ExitCode.OK
    try:
        client = kube.api_client(args.kubeconfig, args.context)
        stored = cluster.apply_experiment(client, document, namespace, args.force_conflicts)
    except Exception as exc:  # noqa: BLE001 - any client or API failure is reported plainly
        print(
            f"error: could not apply {exp.metadata.name} to namespace {namespace}: "
            f"{_api_error(exc)}",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    print(
        f"{SINGULAR}.{GROUP}/{stored['metadata']['name']} applied in namespace "
        f"{namespace} (generation {stored['metadata'].get('generation', '?')})"
    )
    return ExitCode.OK


def cmd_status(args) -> int:
    """Prints a table of the Experiments in a namespace (or all)."""
    from seedrl.service import kube
    from seedrl.service.cli import cluster

    namespace = (
        None
        if args.all_namespaces
        else (args.namespace or kube.default_namespace(args.kubeconfig, args.context))
    )
    try:
        client = kube.api_client(args.kubeconfig, args.context)
        items = cluster.list_experiments(client, namespace)
    except Exception as exc:  # noqa: BLE001 - any client or API failure is reported plainly
        print(f"error: could not list experiments: {_api_error(exc)}", file=sys.stderr)
        return ExitCode.FAILED
    if not items:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"no experiments in {where}")
        return ExitCode.OK
    sys.stdout.write(
        cluster.format_table(cluster.status_rows(items, with_namespace=namespace is None))
    )
    return ExitCode.OK


def _policy_location(args) -> str | None:
    """LOCATION, or the checkpoint URI the Experiment named by --experiment reports; None
    after saying why there is none."""
    if args.experiment:
        if args.location and args.command == "eval":
            print("error: give LOCATION or --experiment, not both", file=sys.stderr)
            return None
        from seedrl.service import kube
        from seedrl.service.cli import cluster

        namespace = args.namespace or kube.default_namespace(args.kubeconfig, args.context)
        try:
            client = kube.api_client(args.kubeconfig, args.context)
            obj = cluster.get_experiment(client, namespace, args.experiment)
        except Exception as exc:  # noqa: BLE001 - any client or API failure is reported plainly
            print(
                f"error: could not read experiment {args.experiment} in namespace {namespace}: "
                f"{_api_error(exc)}",
                file=sys.stderr,
            )
            return None
        try:
            uri = cluster.checkpoint_location(obj)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return None
        print(f"experiment {args.experiment} in {namespace}: {uri}", file=sys.stderr, flush=True)
        return uri
    if not args.location:
        print(
            "error: give LOCATION (a run, checkpoint directory or URI) or --experiment NAME",
            file=sys.stderr,
        )
        return None
    import os

    if "://" not in args.location and not os.path.exists(args.location):
        # Said before a child spends seconds importing TensorFlow.
        print(f"error: {args.location}: no such run, checkpoint directory or file", file=sys.stderr)
        return None
    return args.location


def _run_policy_tool(module: str, argv: list[str]) -> int:
    """Runs a learner-side tool as its own process (the CLI imports neither the learner nor
    the actors); its output is the user's, its exit code ours."""
    import subprocess

    from seedrl.service.local.processes import child_env, python_module

    try:
        return subprocess.run(python_module(module, *argv), env=child_env(), check=False).returncode
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


def cmd_eval(args) -> int:
    """Evaluates a policy (python -m seedrl.policy.evaluate)."""
    location = _policy_location(args)
    if location is None:
        return ExitCode.FAILED
    argv = [location, "--episodes", str(args.episodes), "--seed", str(args.seed)]
    argv += ["--envs", str(args.envs), "--output", args.output]
    argv += ["--video-episodes", str(args.video_episodes)]
    argv += ["--stochastic"] if args.stochastic else ["--deterministic"]
    for flag, value in (("--env", args.env), ("--video", args.video)):
        if value:
            argv += [flag, value]
    if args.quiet:
        argv.append("--quiet")
    return _run_policy_tool("seedrl.policy.evaluate", argv)


def cmd_export(args) -> int:
    """Exports a policy as a SavedModel (python -m seedrl.learner.export)."""
    if args.experiment and args.location and not args.out:
        # `seedrl export --experiment NAME OUT`: the one positional given is OUT.
        args.location, args.out = None, args.location
    if not args.out:
        print("error: give OUT, the model directory to write", file=sys.stderr)
        return ExitCode.FAILED
    location = _policy_location(args)
    if location is None:
        return ExitCode.FAILED
    argv = [location, args.out] + (["--version", str(args.version)] if args.version else [])
    return _run_policy_tool("seedrl.learner.export", argv)


def _api_error(exc: Exception) -> str:
    """The API server's message for a failed request, else the exception itself."""
    from seedrl.service.cli import cluster

    return cluster.api_error(exc)


def main(argv=None) -> int:
    """Entry point of the `seedrl` console script."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s seedrl %(levelname)s %(message)s")
    if args.command == "train":
        return cmd_train(args)
    if args.command == "cost":
        return cost_cli.cmd_cost(args)
    if args.command == "runs":
        return runs_cli.cmd_runs(args)
    if args.command == "plot":
        return runs_cli.cmd_plot(args)
    if args.command == "submit":
        return cmd_submit(args)
    if args.command == "status":
        return cmd_status(args)
    if args.command == "volumes":
        return volumes_cli.cmd_volumes(args)
    if args.command == "eval":
        return cmd_eval(args)
    if args.command == "export":
        return cmd_export(args)
    return cmd_validate(args)


if __name__ == "__main__":
    sys.exit(main())
