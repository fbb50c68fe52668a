"""`seedrl volumes`: the learners' run volumes in a cluster, and reclaiming the retained ones.

An Experiment without ``spec.checkpoint.uri`` checkpoints onto a PersistentVolumeClaim of its
own, which ``spec.checkpoint.volumeRetention: Retain`` (the default) keeps after the
Experiment is deleted: a disk that is paid for until someone deletes it. ``seedrl volumes``
lists every such claim (label ``seedrl.dev/experiment``) with whose run it holds
(:data:`~seedrl.service.operator.render.volume.ANNOTATION_RUN_OF`) and whether that Experiment
still exists; ``seedrl volumes delete NAME`` deletes a retained one, and refuses one an
Experiment uses.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes

from seedrl.common.exit_codes import ExitCode
from seedrl.service.cli import cluster
from seedrl.service.operator import reconcile
from seedrl.service.operator.render.common import LABEL_EXPERIMENT
from seedrl.service.operator.render.volume import ANNOTATION_RUN_OF, run_volume_claim

#: A claim's state in the listing.
IN_USE, RETAINED, WAITING = "in use", "retained", "retained, named by none"


def add_parser(sub, with_cluster) -> None:
    """Adds ``volumes`` (``list``, the default, and ``delete NAME``) to the CLI's
    subparsers; ``with_cluster`` adds the cluster options."""
    p = sub.add_parser(
        "volumes",
        help="the learners' run volumes in the cluster; delete a retained one",
        description="Lists the PersistentVolumeClaims that hold learners' run directories "
        "(Experiments without spec.checkpoint.uri): whose run each holds and whether that "
        "Experiment still uses it. `seedrl volumes delete NAME` deletes a retained one, "
        "checkpoints and all (its disk too, with a StorageClass of reclaim policy Delete).",
    )
    with_cluster(p)
    p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    actions = p.add_subparsers(dest="volumes_action", metavar="ACTION")
    actions.add_parser("list", help="list them (the default)")
    delete = actions.add_parser("delete", help="delete a retained run volume")
    delete.add_argument("claim", metavar="NAME", help="the PersistentVolumeClaim")


def volume_rows(
    claims: Sequence[Mapping[str, Any]], experiments: Sequence[Mapping[str, Any]]
) -> list[dict[str, str]]:
    """A row per claim: namespace, name, size, the Experiment it was made for, and its
    state: ``in use`` by the Experiment whose run it holds, ``retained`` (that Experiment is
    gone), or ``retained, named by none`` while an Experiment of the same name waits for
    ``spec.checkpoint.resumeFrom`` to name it."""
    live: dict[tuple[str, str], Mapping[str, Any]] = {}
    for exp in experiments:
        meta = exp.get("metadata") or {}
        live[(meta.get("namespace") or "", meta.get("uid") or "")] = exp
    rows = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta["name"]
        labels = meta.get("labels") or {}
        run_of = (meta.get("annotations") or {}).get(ANNOTATION_RUN_OF) or ""
        user = live.get((namespace, run_of))
        if user is not None and _claim_of(user) == name:
            state = f"{IN_USE} by {user['metadata']['name']}"
        elif any(
            (e.get("metadata") or {}).get("namespace") == namespace and _claim_of(e) == name
            for e in experiments
        ):
            state = WAITING
        else:
            state = RETAINED
        status = claim.get("status") or {}
        size = (status.get("capacity") or {}).get("storage") or (
            ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
        ).get("storage", "-")
        rows.append(
            {
                "NAMESPACE": namespace,
                "NAME": name,
                "SIZE": str(size),
                "EXPERIMENT": labels.get(LABEL_EXPERIMENT, "-"),
                "STATE": state,
                "AGE": _age(meta.get("creationTimestamp")),
            }
        )
    return sorted(rows, key=lambda r: (r["NAMESPACE"], r["NAME"]))


def _claim_of(exp: Mapping[str, Any]) -> str | None:
    """The run-volume claim an Experiment uses, or None (invalid, or checkpoints on a uri)."""
    try:
        parsed = reconcile.validate(exp)
    except Exception:  # noqa: BLE001 - an invalid Experiment uses no claim
        return None
    return None if parsed.spec.checkpoint.uri else run_volume_claim(parsed)


def _age(created: str | None) -> str:
    if not created:
        return "-"
    then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    days = (datetime.datetime.now(datetime.timezone.utc) - then).days
    return f"{days}d" if days else "<1d"


def run_volumes(client: Any, namespace: str | None) -> list[dict[str, Any]]:
    """The run-volume claims (label ``seedrl.dev/experiment``, role learner) in a namespace,
    or every namespace when None."""
    api = kubernetes.client.CoreV1Api(client)
    selector = f"{LABEL_EXPERIMENT},seedrl.dev/role=learner"
    if namespace is None:
        found = api.list_persistent_volume_claim_for_all_namespaces(label_selector=selector)
    else:
        found = api.list_namespaced_persistent_volume_claim(namespace, label_selector=selector)
    return [client.sanitize_for_serialization(c) for c in found.items]


def format_rows(rows: Sequence[Mapping[str, str]]) -> str:
    """The rows as kubectl prints a table."""
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    lines = ["   ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["   ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def cmd_volumes(args) -> int:
    """Lists the run volumes, or deletes a retained one."""
    from seedrl.service import kube

    namespace = (
        None
        if args.all_namespaces and args.volumes_action != "delete"
        else (args.namespace or kube.default_namespace(args.kubeconfig, args.context))
    )
    try:
        client = kube.api_client(args.kubeconfig, args.context)
        claims = run_volumes(client, namespace)
        experiments = cluster.list_experiments(client, namespace)
    except Exception as exc:  # noqa: BLE001 - any client or API failure is reported plainly
        print(f"error: could not list run volumes: {cluster.api_error(exc)}", file=sys.stderr)
        return ExitCode.FAILED
    rows = volume_rows(claims, experiments)
    if args.volumes_action != "delete":
        if not rows:
            where = "any namespace" if namespace is None else f"namespace {namespace}"
            print(f"no run volumes in {where}")
        else:
            sys.stdout.write(format_rows(rows))
        return ExitCode.OK
    row = next((r for r in rows if r["NAME"] == args.claim), None)
    if row is None:
        print(
            f"error: {args.claim} is not a run volume in namespace {namespace} "
            f"(`seedrl volumes -n {namespace}` lists them)",
            file=sys.stderr,
        )
        return ExitCode.BAD_CONFIG
    if row["STATE"].startswith(IN_USE):
        print(
            f"error: {args.claim} is {row['STATE']}: delete that Experiment first "
            f"(its learner checkpoints onto it)",
            file=sys.stderr,
        )
        return ExitCode.BAD_CONFIG
    try:
        kubernetes.client.CoreV1Api(client).delete_namespaced_persistent_volume_claim(
            args.claim, row["NAMESPACE"]
        )
    except Exception as exc:  # noqa: BLE001 - reported plainly
        print(f"error: could not delete {args.claim}: {cluster.api_error(exc)}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"deleted run volume {args.claim} in {namespace} ({row['SIZE']}, {row['STATE']})")
    return ExitCode.OK
