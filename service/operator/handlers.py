"""The seedrl operator: thin kopf handlers over :mod:`seedrl.service.operator.reconciler`.

Run it with ``python -m seedrl.service.operator`` (in a cluster it logs in with the pod's service
account; elsewhere with the current kubeconfig: :mod:`seedrl.service.kube`). For every
Experiment it:

- validates the spec with :func:`seedrl.common.config.parse_experiment`; an invalid one gets
  Valid=False, reason ValidationFailed and a message naming each field, and nothing else happens
  to it (no retries: a new spec is a new event): phase Failed if it never ran, else its phase
  and children stay as last applied (SpecApplied=False). Other Experiments are unaffected;
- refuses a change of an immutable field (``spec.env``, ``spec.agent``) by comparing with
  ``status.appliedImmutable``: condition SpecApplied=False, reason ImmutableFieldChanged, and
  the children keep running what they were made from;
- otherwise applies what :func:`seedrl.service.operator.render.render` returns (server-side
  apply, field manager ``seedrl-operator``). A Job's pod template is immutable, so the learner Job
  is created once; when an edit changes what the learner runs (its
  :func:`~seedrl.service.operator.render.learner_job.learner_hash`), the Job is deleted in the
  foreground (its pod checkpoints on SIGTERM and is gone before the Job is) and created again, and
  the new pod resumes from the checkpoint; meanwhile SpecApplied=False, reason ReplacingLearner.
  Otherwise only its ``spec.suspend`` changes;
- watches the Experiments and the Jobs, Deployments and pods it made (kopf's ``on.event``
  handlers feed an in-memory :class:`~seedrl.service.operator.watch_cache.ChildCache`) instead
  of reading the children on every refresh, and refreshes an Experiment at once when its learner
  Job or a learner pod changes; every ``poll_seconds`` the
  :class:`~seedrl.service.operator.poller.Poller` reads the Experiment afresh (one that is gone is
  forgotten, never healed), reads the learner's ``GET /status`` (progress has nothing to
  watch) and writes ``status`` (phase, conditions, progress and cost); it recreates a missing
  child and scales the actors to zero once the learner has finished. kopf's watches miss
  deletions when they re-list (after a watch expires or a peering pause), so every
  ``resync_seconds``, and soon after kopf re-lists, the poller lists each kind itself and
  replaces the cache's content (``ChildCache.replace``): a pod gone unseen stops being
  priced as running, an Experiment gone unseen stops being polled;
- finishes the deletion of a learner pod stranded on a lost node (still Terminating
  ``stranded_seconds`` past its grace period: its kubelet no longer acts) as the pod garbage
  collector does for a node out of service, so that its Job replaces it
  (:meth:`~seedrl.service.operator.reconciler.Reconciler.release_stranded`);
- posts Kubernetes Events on the Experiment for phase changes, failures and learner
  replacements;
- with ``spec.queueName`` (Kueue): the learner Job starts suspended and Kueue admits it by
  unsuspending it; the actors stay at zero replicas until then, and carry the same queue label
  so that Kueue accounts for their pods too. Suspending and resuming set the Job's Kueue
  Workload ``spec.active`` (Kueue then suspends or re-queues the Job itself), never the Job's
  ``spec.suspend``, which Kueue owns. While a learner Job is suspended (queued, evicted, or by
  ``spec.suspend``) its ``activeDeadlineSeconds`` is kept at what is left of the spec's, since
  the Job's timer starts from zero at every unsuspend, Kueue's admissions included;
- prices the Experiment's pods at every status refresh (:func:`seedrl.service.cost.price_pods`: the
  resources each pod requested x the time it ran, learner and actors apart) into ``status.cost``,
  keeping the pods' records in ``status.costRecords`` so that a pod that is gone is still counted
  (beyond the 50 most recent, gone pods fold into one record per role and machine:
  :func:`seedrl.service.cost.compact_records`, so the object stays bounded). Pricing never fails a
  reconcile: when the pods cannot be listed or priced the previous cost stays and the log says why;
- exports its own metrics (:mod:`seedrl.service.operator.metrics`): reconciles and errors by
  trigger, each Experiment's phase and cost so far, served on ``--metrics-port``.

Suspending (``spec.suspend: true``) sets the learner Job's ``spec.suspend``: the Job controller
deletes the learner pod gracefully, the learner gets SIGTERM and writes a final checkpoint
within ``terminationGracePeriodSeconds``, and the actors are scaled to zero. Resuming unsuspends
the Job, whose new pod restores that checkpoint, and scales the actors back.

Deleting an Experiment needs nothing from the operator: every child carries an owner reference
and the cluster's garbage collector removes them, so no finalizer holds the deletion up while
the operator is down. The operator only drops the Experiment's metric series when it sees it
go.

Several replicas may run: with ``--peering NAME`` kopf's peering elects one (the highest
priority, random per process by default) and the others stay idle until it is gone. Watching
every namespace, kopf peers through the ClusterKopfPeering NAME; watching some (``--namespace``),
through a KopfPeering NAME in each of them (the chart makes them: kopf pauses while one is
missing). kopf pauses its own watchers; the poller, which kopf does not drive, asks the
:class:`~seedrl.service.operator.poller.PeeringGate` for each Experiment's namespace.

kopf keeps its own bookkeeping in annotations under ``seedrl.dev/`` rather than in ``status``,
which the CRD's structural schema would prune.

This module registers the handlers (:func:`build_registry`) and runs them (:func:`main`); the
work is in :mod:`~seedrl.service.operator.reconciler` (validate, apply, compute the status),
:mod:`~seedrl.service.operator.children` (the API calls),
:mod:`~seedrl.service.operator.watch_cache` (what the watches delivered) and
:mod:`~seedrl.service.operator.poller` (the periodic refresh and the peering gate); the decisions
are pure functions in :mod:`~seedrl.service.operator.reconcile`,
:mod:`~seedrl.service.operator.status` and :mod:`~seedrl.service.operator.render`.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

import kopf

from seedrl.common.config import (
    GROUP,
    IMAGE_REGISTRY,
    PLURAL,
    VERSION,
    ConfigError,
    ImageDefaults,
)
from seedrl.common.metrics_http import MetricsServer
from seedrl.service import cost
from seedrl.service.kube import api_client
from seedrl.service.operator.render.common import (
    LABEL_EXPERIMENT,
    LABEL_ROLE,
    MANAGED_BY,
)
from seedrl.service.operator.conversion import ConversionWebhook
from seedrl.service.operator.metrics import OperatorMetrics
from seedrl.service.operator.poller import PeeringGate, Poller
from seedrl.service.operator.reconciler import OperatorConfig, Reconciler, announce
from seedrl.service.operator.status import status_patch
from seedrl.service.operator.webhook_certificate import WebhookCertificate, service_dns_names
from seedrl.service.operator.watch_cache import ChildCache

log = logging.getLogger(__name__)


def _write_status(
    patch: kopf.Patch, status: Mapping[str, Any], current: Mapping[str, Any] | None
) -> None:
    """Puts into kopf's patch (a JSON merge patch) only what differs from ``current``, so that
    an unchanged poll writes nothing, with nulls for the nested keys that went
    (:func:`~seedrl.service.operator.status.status_patch`)."""
    for key, value in status_patch(current, status).items():
        patch.status[key] = value


def build_registry(
    config: OperatorConfig, registry: kopf.OperatorRegistry | None = None
) -> kopf.OperatorRegistry:
    """Registers the handlers for Experiments on ``registry`` (a new one if None)."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    rec = Reconciler(config)
    res = dict(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)
    res_args = (GROUP, VERSION, PLURAL)
    # The children kopf watches: the same selection as the resync lists (watch_cache.WATCHED).
    ours = {
        LABEL_EXPERIMENT: kopf.PRESENT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Bookkeeping in annotations: the CRD's structural schema would prune status.kopf.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        settings.posting.level = logging.WARNING

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if config.connection is not None:
            return config.connection
        return kopf.login_via_client(**kwargs)

    # The Experiments and their children, watched: every watch event updates an in-memory
    # cache, so a refresh reads them from memory instead of the API server. (Not kopf timers:
    # kopf puts a finalizer on every object a timer runs for.) An event of type None is kopf
    # listing the kind (at start, after a watch expired or a pause), which delivers nothing
    # for the objects that vanished meanwhile: the poller's resync then drops them.
    # Not @kopf.index: kopf hands its indexes only to its own handlers (the poller is a thread
    # of ours) and never drops an object its re-list missed, which ChildCache.replace does.
    cache = ChildCache()

    @kopf.on.event(*res_args, registry=registry)
    def experiment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        cache.update("Experiment", type, body)
        if type is None:
            poller.relisted()
        elif type == "DELETED":
            # No finalizer: the children go with the Experiment through their owner
            # references (the garbage collector's work); the operator drops its series.
            rec.forget(body)

    @kopf.on.event("batch", "v1", "jobs", labels=ours, registry=registry)
    def job_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        cache.update("Job", type, body)
        if type is None:  # a listing, which the next round's refresh covers
            poller.relisted()
        else:
            poller.wake(
                body["metadata"]["namespace"],
                body["metadata"]["labels"][LABEL_EXPERIMENT],
            )

    @kopf.on.event("apps", "v1", "deployments", labels=ours, registry=registry)
    def deployment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        cache.update("Deployment", type, body)
        if type is None:
            poller.relisted()

    @kopf.on.event("v1", "pods", labels={LABEL_EXPERIMENT: kopf.PRESENT}, registry=registry)
    def pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        cache.update("Pod", type, body)
        if type is None:
            poller.relisted()
        labels = body["metadata"].get("labels") or {}
        # A learner container starting changes the phase (Running) without changing the Job's
        # status; actor pods are many and their readiness reaches the status at the next poll.
        if type is not None and labels.get(LABEL_ROLE) == "learner":
            poller.wake(body["metadata"]["namespace"], labels[LABEL_EXPERIMENT])

    poller = Poller(config, rec, cache)

    @kopf.on.startup(registry=registry)
    def start_polling(memo: kopf.Memo, **_: Any) -> None:
        # On kopf's memo (the operator's shared state), for whoever runs kopf to inspect.
        memo.poller = poller
        poller.start()

    @kopf.on.cleanup(registry=registry)
    def stop_polling(**_: Any) -> None:
        poller.stop()

    # kopf's liveness endpoint (--liveness) answers 500 when a probe fails: a dead or stalled
    # poller freezes every Experiment's status while kopf's own tasks look healthy.
    @kopf.on.probe(id="poller", registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    def poller_alive(**_: Any) -> str:
        problem = poller.health()
        if problem:
            raise kopf.PermanentError(problem)
        return "ok"

    # An invalid spec never raises (it is reported in status); what raises is an API error,
    # retried after a pause, while the poller keeps reconciling as well.
    @kopf.on.create(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    @kopf.on.update(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    @kopf.on.resume(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    def on_change(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with config.metrics.reconciling("change"):
            status = rec.reconcile(body)
            announce(rec.children, body, status)
            _write_status(patch, status, body.get("status"))

    return registry


def serve_metrics(
    metrics: OperatorMetrics, port: int, host: str = "0.0.0.0"
) -> MetricsServer | None:
    """Starts serving the operator's registry on ``/metrics`` (and ``/healthz``); port 0
    serves nothing and returns None."""
    if not port:
        return None
    server = MetricsServer(metrics.registry, host=host, port=port)
    server.start()
    log.info("serving metrics on http://%s:%d/metrics", host, server.port)
    return server


def peering_priority(given: int | None) -> int:
    """A replica's peering priority: the given one, else a random one. kopf pauses every peer
    that shares the highest priority, so replicas of one Deployment must differ."""
    import random

    return given if given is not None else random.SystemRandom().randrange(1, 2**31)


def main(argv: list[str] | None = None) -> int:
    """``python -m seedrl.service.operator [--namespace NS ...] [--poll-seconds S]
    [--resync-seconds S] [--metrics-port P] [--peering NAME [--priority P]]``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m seedrl.service.operator", description="Run the seedrl operator."
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only these namespaces (repeatable); default: all",
    )
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=10.0,
        help="how often to refresh each Experiment's status",
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="how often to list the watched objects again and drop those gone without a "
        "DELETED event (sooner after kopf re-lists)",
    )
    p.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="kopf's liveness endpoint"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=8081,
        help="port of the operator's Prometheus /metrics on 0.0.0.0; 0 disables",
    )
    p.add_argument(
        "--peering",
        default="",
        help="elect one active operator among replicas through kopf's peering "
        "objects of this name (a KopfPeering in each --namespace, or the "
        "ClusterKopfPeering when watching every namespace); empty: run "
        "standalone (one replica only)",
    )
    p.add_argument(
        "--image-registry",
        default=os.environ.get("SEEDRL_IMAGE_REGISTRY") or IMAGE_REGISTRY,
        help="registry of the learner and actor images of Experiments that name none (a "
        "mirror of the release's images); default: $SEEDRL_IMAGE_REGISTRY, else "
        f"{IMAGE_REGISTRY}",
    )
    p.add_argument(
        "--priority",
        type=int,
        default=None,
        help="this replica's peering priority (the highest is active); default: "
        "random, so that replicas never tie (tied peers all pause)",
    )
    p.add_argument(
        "--conversion-webhook-port",
        type=int,
        default=0,
        help="serve the Experiment's conversion webhook (HTTPS, POST /convert; "
        "seedrl.service.operator.conversion) on this port of 0.0.0.0, on every replica; "
        "0 (default): not served",
    )
    p.add_argument(
        "--conversion-webhook-cert-dir",
        default="/etc/seedrl/webhook",
        help="folder of the webhook's serving certificate and key (tls.crt, tls.key: a "
        "kubernetes.io/tls Secret mounted, e.g. cert-manager's), signed by the CRD's "
        "caBundle; unused with --conversion-webhook-secret",
    )
    p.add_argument(
        "--conversion-webhook-secret",
        default="",
        help="keep the webhook's certificate in this Secret of $POD_NAMESPACE, made and "
        "renewed by the operator, and the CRD's caBundle trusting it "
        "(seedrl.service.operator.webhook_certificate); the chart's default",
    )
    p.add_argument(
        "--conversion-webhook-service",
        default="",
        help="the webhook's Service in $POD_NAMESPACE, whose names the certificate of "
        "--conversion-webhook-secret is for",
    )
    p.add_argument(
        "--conversion-webhook-dns-name",
        action="append",
        default=[],
        help="another name that certificate is for (the host of a CRD clientConfig url); "
        "repeatable",
    )
    args = p.parse_args(argv)
    if args.conversion_webhook_secret and not (
        args.conversion_webhook_service or args.conversion_webhook_dns_name
    ):
        p.error(
            "--conversion-webhook-secret needs --conversion-webhook-service or "
            "--conversion-webhook-dns-name: the names its certificate is for"
        )
    if not 0 <= args.conversion_webhook_port <= 65535:
        p.error(f"--conversion-webhook-port must be 0 to 65535, got {args.conversion_webhook_port}")
    if not 0 <= args.metrics_port <= 65535:
        p.error(f"--metrics-port must be 0 to 65535, got {args.metrics_port}")
    if args.resync_seconds <= 0:
        p.error(f"--resync-seconds must be positive, got {args.resync_seconds}")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s seedrl-operator %(levelname)s %(message)s"
    )
    try:
        prices = cost.load_prices()
    except ConfigError as exc:
        p.error(f"the price table ({cost.PRICES_ENV}): {exc}")
    log.info("pricing pods with table %s (%s)", prices.version, prices.region)
    config = OperatorConfig(
        api_client=api_client(),
        poll_seconds=args.poll_seconds,
        prices=prices,
        images=ImageDefaults(registry=args.image_registry.rstrip("/")),
        namespaces=tuple(args.namespace),
        resync_seconds=args.resync_seconds,
    )
    identity = f"seedrl-operator@{socket.gethostname()}/{os.getpid()}"
    priority = peering_priority(args.priority)
    if args.peering:
        config.active = PeeringGate(
            config.api_client,
            args.peering,
            identity,
            priority,
            # Namespace-scoped, kopf keeps a KopfPeering in each watched namespace.
            clusterwide=not args.namespace,
        )
        log.info("peering %s as %s, priority %d", args.peering, identity, priority)
    server = serve_metrics(config.metrics, args.metrics_port)
    webhook = None
    stop_renewals = threading.Event()
    if args.conversion_webhook_port:
        # Before kopf: with the CRD converting through it, kopf's own reads of a version
        # other than the stored one wait on it.
        folder = Path(args.conversion_webhook_cert_dir)
        kept = None
        if args.conversion_webhook_secret:
            namespace = os.environ.get("POD_NAMESPACE") or "default"
            names = list(args.conversion_webhook_dns_name)
            if args.conversion_webhook_service:
                names = service_dns_names(args.conversion_webhook_service, namespace) + names
            kept = WebhookCertificate(
                config.api_client,
                namespace,
                args.conversion_webhook_secret,
                names,
                f"{PLURAL}.{GROUP}",
                Path(tempfile.mkdtemp(prefix="seedrl-webhook-")),
            )
            kept.ensure()
            folder = kept.folder
        webhook = ConversionWebhook(
            "0.0.0.0", args.conversion_webhook_port, folder / "tls.crt", folder / "tls.key"
        ).start()
        if kept is not None:
            threading.Thread(
                target=kept.refresh,
                args=(webhook.reload, stop_renewals),
                daemon=True,
                name="webhook-certificate",
            ).start()
        log.info("conversion webhook on port %d", webhook.port)
    try:
        kopf.run(
            registry=build_registry(config),
            standalone=not args.peering,
            peering_name=args.peering or None,
            identity=identity,
            priority=priority if args.peering else None,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
        )
    finally:
        if server is not None:
            server.stop()
        stop_renewals.set()
        if webhook is not None:
            webhook.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
