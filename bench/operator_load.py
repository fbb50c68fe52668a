"""The operator under load: what N Experiments cost the real API server, and the operator.

    python bench/operator_load.py [--experiments 500] [--namespaces 10] [--window 330]
                                  [--poll-seconds 10] [--settle 65] [--json FILE]

Starts the real control plane (kube-apiserver and etcd v1.37 built by ``make control-plane``,
the controllers that act on no workload), installs the operator chart's CRDs, ServiceAccount,
RBAC and admission policy, and runs HEAD's operator as the chart runs it (its own process,
its ServiceAccount token, the default poll and resync). Then:

1. **Creation**: creates ``--experiments`` Experiments (CartPole V-trace), spread over
   ``--namespaces`` namespaces, as fast as the API server takes them, and waits until the
   operator has made every learner Job and written every first status. Reconcile latency is
   the time from an Experiment's create to the operator's first status write for it, both
   read from the API server's audit log (its own clock).
2. **Idle**: with nothing changing (no kubelet runs the pods: every learner waits, Pending),
   counts the operator's requests over ``--window`` seconds (the default spans one resync of
   every Experiment, 300 s): requests/s and writes/s in all and per Experiment.

Reports the operator's resident memory (now and its peak), and the reconcile durations the
operator itself measured (``seedrl_operator_reconcile_seconds``, p50/p99 by trigger, from its
histogram). Issue 37's goal: at most 0.1 requests/s per idle Experiment, and the operator
within 512 MiB at 500.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import kubernetes  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from seedrl.common.hardware import machine_facts  # noqa: E402
from support.control_plane import free_port  # noqa: E402
from support.operator_harness import LearnerStatusServer, OperatorCluster  # noqa: E402
from support.operator_release import ReleaseOperator  # noqa: E402

EXAMPLE = os.path.join(ROOT, "k8s", "examples", "cartpole-vtrace-cpu.yaml")
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def rss_mib(pid: int) -> tuple[float, float]:
    """A process's resident memory now and its peak, MiB."""
    now = peak = 0.0
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, peak


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' ``histogram_quantile``: linear within the bucket holding rank ``q``.
    ``buckets``: (upper bound, cumulative count), ascending, ending at +Inf."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def reconcile_durations(metrics_url: str) -> dict[str, dict[str, float | None]]:
    """p50 and p99 of the operator's reconcile durations by trigger, seconds."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "seedrl_operator_reconcile_seconds_bucket":
                bound = float(sample.labels["le"])
                buckets.setdefault(sample.labels["trigger"], []).append((bound, sample.value))
    return {
        trigger: {
            "count": found[-1][1],
            "p50_s": histogram_quantile(sorted(found), 0.5),
            "p99_s": histogram_quantile(sorted(found), 0.99),
        }
        for trigger, found in buckets.items()
    }


def audit_events(plane) -> list[dict]:
    """Every audit event so far, the rotated files' first (the API server rotates its log at
    100 MB, which the creation of 500 Experiments passes)."""
    folder = Path(plane.audit_log).parent
    events = []
    for path in [*sorted(folder.glob("audit-*.log")), Path(plane.audit_log)]:
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the line being written
    return events


def stamp(text: str) -> float:
    """An audit timestamp (RFC 3339, microseconds) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints (and with ``--json`` writes) its figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiments", type=int, default=500)
    p.add_argument("--namespaces", type=int, default=10)
    p.add_argument("--window", type=float, default=330.0, help="idle seconds counted")
    p.add_argument("--poll-seconds", type=float, default=10.0)
    p.add_argument(
        "--settle",
        type=float,
        default=65.0,
        help="seconds between the last first status and the idle window (a heartbeat's)",
    )
    p.add_argument("--json", default="", help="also write the figures here")
    args = p.parse_args(argv)
    namespaces = [f"load-{i}" for i in range(args.namespaces)]
    example = yaml.safe_load(Path(EXAMPLE).read_text())
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        workdir = Path(tmp)
        learners = LearnerStatusServer()
        learners.serve()
        with OperatorCluster(*namespaces, workdir=workdir / "cluster") as cluster:
            plane = cluster.plane
            assert plane is not None
            metrics_port = free_port()
            operator = ReleaseOperator(
                cluster, learners, workdir, "operator", poll_seconds=args.poll_seconds
            )
            operator.extra_args = (f"--metrics-port={metrics_port}",)
            operator.start()
            assert operator.process is not None
            api = kubernetes.client.CustomObjectsApi(cluster.api_client())
            batch = kubernetes.client.BatchV1Api(cluster.api_client())
            names = []
            started = time.monotonic()
            for i in range(args.experiments):
                namespace = namespaces[i % len(namespaces)]
                body = json.loads(json.dumps(example))
                body["metadata"] = {"name": f"exp-{i:04d}", "namespace": namespace}
                api.create_namespaced_custom_object(
                    "seedrl.dev", "v1alpha1", namespace, "experiments", body
                )
                names.append((namespace, body["metadata"]["name"]))
            created_s = time.monotonic() - started

            def reconciled() -> int:
                jobs = sum(
                    1
                    for ns in namespaces
                    for job in batch.list_namespaced_job(ns).items
                    if job.metadata.name.endswith("-learner")
                )
                statuses = sum(
                    1
                    for ns in namespaces
                    for exp in api.list_namespaced_custom_object(
                        "seedrl.dev", "v1alpha1", ns, "experiments"
                    )["items"]
                    if (exp.get("status") or {}).get("phase")
                )
                return min(jobs, statuses)

            deadline = time.monotonic() + 1800
            while (done := reconciled()) < args.experiments:
                if not operator.alive:
                    raise SystemExit(f"the operator exited:\n{operator.tail()}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {done} of {args.experiments} reconciled in 30 min")
                time.sleep(2)  # a poll of the whole fleet, bounded by the deadline above
            all_reconciled_s = time.monotonic() - started
            after_creation = rss_mib(operator.process.pid)

            # Idle: settle two poll rounds and a heartbeat, then count.
            time.sleep(max(2 * args.poll_seconds, args.settle))
            window_start, started_at = time.monotonic(), time.time()
            time.sleep(args.window)
            window, ended_at = time.monotonic() - window_start, time.time()
            events = audit_events(plane)
            idle = [
                e
                for e in events
                if started_at <= stamp(e["stageTimestamp"]) < ended_at
                and (e.get("user") or {}).get("username") == cluster.operator_user
                and e.get("verb") != "watch"
                and (e.get("objectRef") or {}).get("resource") != "events"
            ]
            writes = [e for e in idle if e.get("verb") in WRITES]
            memory_now, memory_peak = rss_mib(operator.process.pid)
            durations = reconcile_durations(f"http://127.0.0.1:{metrics_port}/metrics")

            # Creation latency: each Experiment's create to the operator's first status write.
            created: dict[tuple[str, str], float] = {}
            first_status: dict[tuple[str, str], float] = {}
            for e in events:
                ref = e.get("objectRef") or {}
                if ref.get("resource") != "experiments" or e.get("stage") != "ResponseComplete":
                    continue
                key = (ref.get("namespace"), ref.get("name"))
                user = (e.get("user") or {}).get("username")
                if e.get("verb") == "create" and user != cluster.operator_user:
                    created.setdefault(key, stamp(e["requestReceivedTimestamp"]))
                elif (
                    user == cluster.operator_user
                    and e.get("verb") == "patch"
                    and ref.get("subresource") == "status"
                ):
                    first_status.setdefault(key, stamp(e["stageTimestamp"]))
            latencies = [first_status[k] - created[k] for k in created if k in first_status]
            operator.stop()
    learners.close()
    n = args.experiments
    result = {
        "benchmark": "operator_load",
        "date": datetime.date.today().isoformat(),
        "machine": machine_facts(),
        "experiments": n,
        "namespaces": args.namespaces,
        "poll_seconds": args.poll_seconds,
        "create_seconds": round(created_s, 1),
        "all_reconciled_seconds": round(all_reconciled_s, 1),
        "reconcile_latency_s": {
            "count": len(latencies),
            "p50": round(quantile(latencies, 0.5), 3),
            "p99": round(quantile(latencies, 0.99), 3),
        },
        "operator_reconcile_seconds": durations,
        "idle_window_seconds": round(window, 1),
        "idle_requests_per_second": round(len(idle) / window, 2),
        "idle_writes_per_second": round(len(writes) / window, 3),
        "idle_requests_per_second_per_experiment": round(len(idle) / window / n, 4),
        "idle_requests_by_verb_and_resource": _counts(idle),
        "operator_rss_mib": {
            "after_creation": round(after_creation[0]),
            "idle": round(memory_now),
            "peak": round(memory_peak),
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


def _counts(events: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        key = f"{e.get('verb')} {ref.get('resource')}" + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    sys.exit(main())
