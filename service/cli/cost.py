"""`seedrl cost`: the cost report of a run or Experiment, and the cost planner.

  seedrl cost NAME [--runs-dir DIR] [--namespace NS] [--prices FILE]
  seedrl cost plan FILE --frames N [--throughput FILE.json] [--inference-from BENCH.json]
                   [--actors K] [--learner-steps-per-s R] [--prices FILE]

The planner's rates come from --throughput, else from the Experiment's run summary
(runs/<name>/summary.json), else from the reference figures packaged for the example
environments (service/cost/reference_throughput.yaml), which the report labels as such.

``NAME`` is a local run (``runs/NAME/cost.json``, written by `seedrl train`) or, when there is
none, an Experiment in the cluster whose ``status.cost`` the operator writes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from seedrl.common.config import GROUP, PLURAL, VERSION, ConfigError, load_experiment
from seedrl.common.exit_codes import ExitCode


def add_parser(sub) -> None:
    """Adds the ``cost`` command to the CLI's subparsers."""
    p = sub.add_parser(
        "cost",
        help="cost report of a run or Experiment, or `cost plan FILE --frames N`",
        description="`seedrl cost NAME` prints what a run (runs/NAME) or a cluster "
        "Experiment cost; `seedrl cost plan FILE --frames N` estimates time and "
        "cost to N frames for SEED's layout against IMPALA's.",
    )
    p.add_argument("name", help="a run or Experiment name, or 'plan'")
    p.add_argument("file", nargs="?", help="(plan) the Experiment YAML file")
    p.add_argument("--runs-dir", default="runs", help="where local run directories live")
    p.add_argument(
        "--namespace", default=None, help="the Experiment's namespace (default: the kubeconfig's)"
    )
    p.add_argument(
        "--prices",
        default=None,
        help="a price-table override (YAML; default: $SEEDRL_PRICES or the packaged table)",
    )
    p.add_argument("--frames", type=float, help="(plan) env frames to train to")
    p.add_argument(
        "--throughput",
        default=None,
        help="(plan) measured rates: a bench-throughput JSON or a run's "
        "summary.json (default: runs/<name>/summary.json of FILE's "
        "Experiment, else the packaged reference figures of its env)",
    )
    p.add_argument(
        "--inference-from",
        default=None,
        help="(plan) a bench-throughput JSON giving the model's inference cost "
        "when --throughput is a run summary",
    )
    p.add_argument(
        "--actors",
        type=int,
        default=None,
        help="(plan) actors in the SEED layout (default: spec.actors.replicas)",
    )
    p.add_argument(
        "--learner-steps-per-s",
        type=float,
        default=None,
        help="(plan) the most env steps/s the learner serves, if known",
    )


def _problems(exc: ConfigError, what: str) -> None:
    print(f"error: {what}:", file=sys.stderr)
    for path, reason in exc.problems:
        print(f"  {path}: {reason}", file=sys.stderr)


def cluster_cost(
    name: str, namespace: str | None = None, api_client=None
) -> tuple[str, dict | None]:
    """The namespace read and ``status.cost`` of the Experiment ``name`` through the Kubernetes
    API (None before the operator has priced it).

    Args:
      api_client: a configured ``kubernetes.client.ApiClient``; default:
        :func:`seedrl.service.kube.api_client`'s.
    """
    from kubernetes import client

    from seedrl.service import kube

    if api_client is None:
        api_client = kube.api_client()
        namespace = namespace or kube.default_namespace()
    namespace = namespace or "default"
    obj: Any = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return namespace, ((obj or {}).get("status") or {}).get("cost")


def _local_report(run_dir: str, prices_path: str | None) -> dict | None:
    from seedrl.service import cost
    from seedrl.service.local.cost import read_cost_file

    data = read_cost_file(run_dir)
    if data is None:
        return None
    stored: Mapping[str, Any] = data.get("cost") or {}
    records = [cost.record_from_dict(r) for r in data.get("records", [])]
    prices = cost.load_prices(prices_path)
    as_of = max((e for r in records for _, e in r.intervals if e is not None), default=0.0)
    report = cost.compute_cost(
        records,
        prices,
        env_frames=int(stored.get("envFrames") or 0),
        now=as_of,
        description=cost.describe_records(records, as_of),
    )
    status = report.to_status()
    status["running"] = bool(data.get("running"))
    return status


def cmd_report(args) -> int:
    """Prints the cost report of a local run, else of a cluster Experiment."""
    from seedrl.service import cost

    run_dir = os.path.join(args.runs_dir, args.name)
    try:
        status = _local_report(run_dir, args.prices)
    except ConfigError as exc:
        _problems(exc, "invalid price table")
        return ExitCode.BAD_CONFIG
    where = f"local run {run_dir}"
    if status is None:
        try:
            namespace, status = cluster_cost(args.name, args.namespace)
        except Exception as exc:  # noqa: BLE001 - any API or config failure is reported as is
            print(
                f"error: no local run {run_dir}/cost.json, and the cluster could not be "
                f"read: {exc}",
                file=sys.stderr,
            )
            return ExitCode.FAILED
        where = f"Experiment {namespace}/{args.name}"
        if not status:
            print(f"{where}: no cost yet (the operator writes status.cost once its pods run)")
            return ExitCode.OK
    state = " (running; as of its last update)" if status.get("running") else ""
    print(f"{where}{state}")
    print(cost.format_report(status))
    return ExitCode.OK


def cmd_plan(args) -> int:
    """Prints the planner's estimate for ``args.file``."""
    from seedrl.service import cost
    from seedrl.service.cost import plan as cost_plan

    if not args.file or args.frames is None or args.frames <= 0:
        print("error: usage: seedrl cost plan FILE --frames N (N > 0)", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    try:
        exp = load_experiment(args.file)
        prices = cost.load_prices(args.prices)
        source = args.throughput or os.path.join(args.runs_dir, exp.metadata.name, "summary.json")
        if args.throughput or os.path.exists(source):
            throughput = cost_plan.read_throughput(source, exp, args.inference_from)
        else:
            # Nothing measured by the user yet: the packaged figures of the example envs.
            reference = cost_plan.reference_throughput(exp)
            if reference is None:
                known = ", ".join(sorted(cost_plan.load_reference().envs))
                print(
                    f"error: no throughput for {exp.spec.env.id}: {source} does not exist "
                    f"and reference figures exist only for {known}; pass --throughput "
                    f"bench-throughput.json (make bench-throughput) or a run's "
                    f"summary.json",
                    file=sys.stderr,
                )
                return ExitCode.BAD_CONFIG
            throughput = reference
        machines = cost.rendered_machines(exp)
        result = cost_plan.plan(
            frames=int(args.frames),
            frames_per_step=exp.spec.env.frames_per_step,
            replicas=args.actors or exp.spec.actors.replicas,
            learner=machines["learner"],
            actor=machines["actor"],
            throughput=throughput,
            prices=prices,
            learner_steps_per_s=args.learner_steps_per_s,
        )
    except ConfigError as exc:
        _problems(exc, "cannot plan")
        return ExitCode.BAD_CONFIG
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    print(cost_plan.format_plan(result))
    return ExitCode.OK


def cmd_cost(args) -> int:
    """``seedrl cost``: the planner for ``plan``, else a report."""
    if args.name == "plan":
        return cmd_plan(args)
    if args.file:
        print(f"error: unexpected argument {args.file!r}; usage: seedrl cost NAME", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    return cmd_report(args)


def train_cost(exp, run_dir: str):
    """The :class:`seedrl.service.local.cost.LocalCost` of a `seedrl train` run, or None (with the
    reason on stderr) when the price table is invalid: training goes on without a cost."""
    from seedrl.service.local.cost import LocalCost

    try:
        return LocalCost(exp, run_dir)
    except ConfigError as exc:
        _problems(exc, "invalid price table; no cost estimate for this run")
        return None
