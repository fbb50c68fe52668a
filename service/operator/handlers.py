"""The seedrl operator: thin kopf handlers over :mod:`seedrl.service.operator.reconcile`.

Run it with ``python -m seedrl.service.operator`` (in a cluster it logs in with the pod's service
account; elsewhere with the current kubeconfig). For every Experiment it:

- validates the spec with :func:`seedrl.common.config.parse_experiment`; an invalid one gets phase
  Failed, reason ValidationFailed and a message naming each field, and nothing else happens to
  it (no retries: a new spec is a new event). Other Experiments are unaffected;
- refuses a change of an immutable field (``spec.env``, ``spec.agent``) by comparing with
  ``status.appliedImmutable``: condition SpecApplied=False, reason ImmutableFieldChanged, and
  the children keep running what they were made from;
- otherwise applies what :func:`seedrl.service.operator.reconcile.render` returns (server-side apply, field
  manager ``seedrl-operator``; the learner Job is created once and afterwards only its
  ``spec.suspend`` is changed, since a Job's pod template is immutable);
- every ``poll_seconds`` reads the Job, the Deployment and the learner's ``GET /status``, and
  writes ``status`` (phase, conditions, progress and cost); it recreates a missing child and
  scales the actors to zero once the learner has finished;
- prices the Experiment's pods at every status refresh (:func:`seedrl.service.cost.price_pods`: the
  resources each pod requested x the time it ran, learner and actors apart) into
  ``status.cost``, keeping every pod's record in ``status.costRecords`` so that a pod that is
  gone is still counted. Pricing never fails a reconcile: when the pods cannot be listed or
  priced the previous cost stays and the log says why;
- exports its own metrics (:mod:`seedrl.service.operator.metrics`): reconciles and errors by trigger,
  each Experiment's phase and cost so far, served on ``--metrics-port``.

Suspending (``spec.suspend: true``) sets the learner Job's ``spec.suspend``: the Job controller
deletes the learner pod gracefully, the learner gets SIGTERM and writes a final checkpoint
within ``terminationGracePeriodSeconds``, and the actors are scaled to zero. Resuming unsuspends
the Job, whose new pod restores that checkpoint, and scales the actors back.

Deleting an Experiment deletes its children (they also carry owner references, so the
cluster's garbage collector would remove them too).

kopf keeps its own bookkeeping in annotations under ``seedrl.dev/`` rather than in ``status``,
which the CRD's structural schema would prune.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import urllib.request
from typing import Any, Callable, Mapping, Optional

import kopf
import kubernetes

from seedrl.common.config import GROUP, PLURAL, VERSION, ConfigError, Experiment
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.metrics_http import MetricsServer
from seedrl.service import cost
from seedrl.service.operator import reconcile
from seedrl.service.operator.metrics import OperatorMetrics

log = logging.getLogger(__name__)

FIELD_MANAGER = "seedrl-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"

#: (API class, method suffix) for each kind the operator renders.
_KINDS = {
    "ConfigMap": (kubernetes.client.CoreV1Api, "config_map"),
    "Service": (kubernetes.client.CoreV1Api, "service"),
    "NetworkPolicy": (kubernetes.client.NetworkingV1Api, "network_policy"),
    "Job": (kubernetes.client.BatchV1Api, "job"),
    "Deployment": (kubernetes.client.AppsV1Api, "deployment"),
}

def fetch_url(url: str, timeout: float = 3.0) -> str:
    """GETs a URL and returns the body as text (the default way to read a learner's status)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http only
        return response.read().decode()


@dataclasses.dataclass
class OperatorConfig:
    """What the handlers need from outside.

    Attributes:
      api_client: the kubernetes client the children are read and written with.
      poll_seconds: how often each Experiment's status is refreshed.
      fetch: ``fetch(url) -> text`` for the learner's ``/status`` (raises on failure).
      status_url: ``status_url(namespace, name, metrics_port) -> url`` of a learner's
        ``/status``; through its Service by default.
      prices: the price table pods are priced with (``main`` loads it with
        :func:`seedrl.service.cost.load_prices`, which honours ``$SEEDRL_PRICES``); the packaged
        table by default.
      metrics: the operator's Prometheus series (a fresh registry by default).
      connection: the API server kopf itself talks to; None: the same as ``api_client``'s
        kubeconfig or in-cluster credentials, found by kopf.
    """

    api_client: kubernetes.client.ApiClient
    poll_seconds: float = 10.0
    fetch: Callable[[str], str] = fetch_url
    status_url: Callable[[str, str, int], str] = reconcile.learner_status_url
    prices: cost.PriceTable = dataclasses.field(
        default_factory=lambda: cost.load_prices(environ={}))
    metrics: OperatorMetrics = dataclasses.field(default_factory=OperatorMetrics)
    connection: Optional[kopf.ConnectionInfo] = None


class Children:
    """Reads and writes an Experiment's children through the kubernetes client."""

    def __init__(self, api_client: kubernetes.client.ApiClient):
        self.api_client = api_client

    def _api(self, kind: str):
        cls, suffix = _KINDS[kind]
        return cls(self.api_client), suffix

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        """The object as plain JSON, or None if it does not exist."""
        api, suffix = self._api(kind)
        try:
            response = getattr(api, f"read_namespaced_{suffix}")(name, namespace,
                                                                 _preload_content=False)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        """The pods matching a label selector, as plain JSON."""
        response = kubernetes.client.CoreV1Api(self.api_client).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False)
        return list(json.loads(response.data).get("items") or [])

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side applies one rendered object (creates it or brings it to this state)."""
        api, suffix = self._api(obj["kind"])
        meta = obj["metadata"]
        getattr(api, f"patch_namespaced_{suffix}")(
            meta["name"], meta["namespace"], dict(obj), field_manager=FIELD_MANAGER, force=True,
            _content_type=APPLY, _preload_content=False)

    def create(self, obj: Mapping[str, Any]) -> None:
        """Creates one object; an existing one is left alone."""
        api, suffix = self._api(obj["kind"])
        try:
            getattr(api, f"create_namespaced_{suffix}")(obj["metadata"]["namespace"],
                                                        dict(obj), _preload_content=False)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise

    def merge(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON-merge-patches one object."""
        api, suffix = self._api(kind)
        getattr(api, f"patch_namespaced_{suffix}")(name, namespace, dict(patch),
                                                   _content_type=MERGE, _preload_content=False)

    def delete(self, kind: str, namespace: str, name: str) -> bool:
        """Deletes one object (its pods in the background); False if it was already gone."""
        api, suffix = self._api(kind)
        try:
            getattr(api, f"delete_namespaced_{suffix}")(
                name, namespace, propagation_policy="Background", _preload_content=False)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _job_patch(exp: Experiment, job: Mapping[str, Any]) -> dict | None:
    """What to change on an existing learner Job: only ``spec.suspend`` may change.

    A Job waiting in a Kueue queue is unsuspended by Kueue, not by us; we only suspend it.
    """
    current = bool((job.get("spec") or {}).get("suspend"))
    if exp.spec.suspend and not current:
        return {"spec": {"suspend": True}}
    if not exp.spec.suspend and current and not exp.spec.queue_name:
        return {"spec": {"suspend": False}}
    return None


class Reconciler:
    """The work behind the handlers, kept apart from kopf so that it reads top to bottom."""

    def __init__(self, config: OperatorConfig):
        self.config = config
        self.children = Children(config.api_client)

    def observe(self, exp: Experiment, namespace: str) -> tuple[dict | None, dict | None]:
        """The learner Job and the actor Deployment as they are now."""
        n = reconcile.names(exp.metadata.name)
        return (self.children.read("Job", namespace, n.learner),
                self.children.read("Deployment", namespace, n.actors))

    def learner_status(self, exp: Experiment, namespace: str,
                       job: Mapping[str, Any] | None) -> tuple[LearnerStatus | None, str | None]:
        """The learner's /status when a learner pod is up; else (None, why)."""
        if not job or not int(((job.get("status") or {}).get("active")) or 0):
            return None, "no learner pod is running"
        url = self.config.status_url(namespace, exp.metadata.name, exp.spec.learner.metrics_port)
        try:
            return LearnerStatus.from_json(self.config.fetch(url)), None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return None, f"reading {url}: {exc}"

    def apply(self, exp: Experiment, namespace: str, uid: str,
              job: Mapping[str, Any] | None, done_before: bool = False) -> None:
        """Brings every child to what ``exp`` renders to.

        Args:
          done_before: the status records a finished learner: its Job, if gone, is not made
            again and no actors run.
        """
        owner = reconcile.owner_reference(exp.metadata.name, uid)
        finished = reconcile.job_finished(job) or done_before
        for obj in reconcile.render(exp, owner, namespace, finished=finished):
            if obj["kind"] != "Job":
                self.children.apply(obj)
            elif job is None:
                if not done_before:
                    self.children.create(obj)
            else:
                patch = _job_patch(exp, job)
                if patch:
                    self.children.merge("Job", namespace, obj["metadata"]["name"], patch)

    def status(self, exp: Experiment, namespace: str, body: Mapping[str, Any],
               refused: list[str]) -> dict:
        """The status to write, from what the children and the learner say now."""
        job, deployment = self.observe(exp, namespace)
        learner, why = self.learner_status(exp, namespace, job)
        status = reconcile.compute_status(
            exp, generation=body["metadata"].get("generation"), previous=body.get("status"),
            job=job, deployment=deployment, learner=learner, learner_error=why, refused=refused)
        report = self.price(exp, namespace, body.get("status") or {}, status)
        self.config.metrics.observe(exp.metadata.name, namespace, body["metadata"].get("uid"),
                                    status.get("phase"), report)
        return status

    def price(self, exp: Experiment, namespace: str, previous: Mapping[str, Any],
              status: dict) -> cost.CostReport | None:
        """Prices the Experiment's pods into ``status["cost"]`` and ``status["costRecords"]``.

        The stored records (``previous["costRecords"]``) are merged with the pods listed now,
        so pods that are gone keep being counted. Any failure leaves both keys out of
        ``status`` (the stored ones stay) and is logged: cost never fails a reconcile.

        Returns:
          The report, or None when nothing was priced this time.
        """
        name = exp.metadata.name
        selector = f"{reconcile.LABEL_EXPERIMENT}={name}"
        try:
            pods = self.children.pods(namespace, selector)
            records, report = cost.price_pods(previous.get("costRecords") or [], pods,
                                              self.config.prices,
                                              env_frames=int(status.get("envFrames") or 0))
        except Exception as exc:  # noqa: BLE001 - cost is best effort, the reconcile is not
            log.warning("Experiment %s/%s: keeping the previous cost; pricing its pods (%s) "
                        "failed: %s", namespace, name, selector, exc)
            return None
        status["cost"] = report.to_status()
        status["costRecords"] = records
        return report

    def reconcile(self, body: Mapping[str, Any], heal_only: bool = False) -> dict:
        """Validates, applies (unless refused) and returns the status to write.

        Args:
          body: the Experiment as stored.
          heal_only: from the periodic timer: apply only when a child is missing or the
            actors must stop because the learner finished; a spec change is the change
            handlers' business.
        """
        meta = body["metadata"]
        namespace = meta["namespace"]
        previous = body.get("status") or {}
        try:
            exp = reconcile.validate(body)
        except ConfigError as exc:
            status = reconcile.invalid_status(previous, meta.get("generation"), exc,
                                              reconcile.now_rfc3339())
            self.config.metrics.observe(meta["name"], namespace, meta.get("uid"),
                                        status.get("phase"), None)
            return status
        applied = previous.get("appliedImmutable")
        refused = reconcile.immutable_changes(applied, exp) if applied else []
        if not refused:
            job, deployment = self.observe(exp, namespace)
            done_before = reconcile.finished_before(previous)
            if not heal_only or self._needs_healing(exp, namespace, job, deployment,
                                                    done_before):
                self.apply(exp, namespace, meta["uid"], job, done_before)
        return self.status(exp, namespace, body, refused)

    def _needs_healing(self, exp: Experiment, namespace: str, job, deployment,
                       done_before: bool) -> bool:
        if (job is None and not done_before) or deployment is None:
            return True
        n = reconcile.names(exp.metadata.name)
        for kind, name in (("ConfigMap", n.config), ("Service", n.service),
                           ("NetworkPolicy", n.network_policy)):
            if self.children.read(kind, namespace, name) is None:
                return True
        wanted = reconcile.actor_replicas(exp, reconcile.job_finished(job) or done_before)
        return ((deployment.get("spec") or {}).get("replicas") != wanted
                or (job is not None and _job_patch(exp, job) is not None))

    def delete(self, body: Mapping[str, Any]) -> list[str]:
        """Deletes every child an Experiment of this name has and drops its series; returns
        what was deleted."""
        namespace = body["metadata"]["namespace"]
        n = reconcile.names(body["metadata"]["name"])
        self.config.metrics.forget(body["metadata"]["name"], namespace,
                                   body["metadata"].get("uid"))
        gone = []
        for kind, name in (("Deployment", n.actors), ("Job", n.learner),
                           ("NetworkPolicy", n.network_policy), ("Service", n.service),
                           ("ConfigMap", n.config)):
            if self.children.delete(kind, namespace, name):
                gone.append(f"{kind}/{name}")
        return gone


def _write_status(patch: kopf.Patch, status: Mapping[str, Any],
                  current: Mapping[str, Any] | None) -> None:
    """Puts into kopf's patch only the keys of ``status`` that differ from ``current``, so that
    an unchanged poll writes nothing."""
    current = current or {}
    for key, value in status.items():
        if current.get(key) != value:
            patch.status[key] = value


def build_registry(config: OperatorConfig,
                   registry: kopf.OperatorRegistry | None = None) -> kopf.OperatorRegistry:
    """Registers the handlers for Experiments on ``registry`` (a new one if None)."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    rec = Reconciler(config)
    res = dict(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Bookkeeping in annotations: the CRD's structural schema would prune status.kopf.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration")
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        settings.posting.level = logging.WARNING

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if config.connection is not None:
            return config.connection
        return kopf.login_via_client(**kwargs)

    # An invalid spec never raises (it is reported in status); what raises is an API error,
    # retried after a pause, while the timer below keeps reconciling as well.
    @kopf.on.create(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    @kopf.on.update(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    @kopf.on.resume(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    def on_change(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with config.metrics.reconciling("change"):
            _write_status(patch, rec.reconcile(body), body.get("status"))

    @kopf.timer(**res, interval=config.poll_seconds, initial_delay=config.poll_seconds,
                idle=None)
    def poll(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        if body["metadata"].get("deletionTimestamp"):
            return  # on_delete has it; a status written now would bring its series back
        with config.metrics.reconciling("poll"):
            _write_status(patch, rec.reconcile(body, heal_only=True), body.get("status"))

    @kopf.on.delete(**res, errors=kopf.ErrorsMode.TEMPORARY, backoff=2)
    def on_delete(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
        gone = rec.delete(body)
        logger.info("deleted %s", ", ".join(gone) or "nothing (no children left)")

    return registry


def default_api_client() -> kubernetes.client.ApiClient:
    """A kubernetes client from the in-cluster service account, else the local kubeconfig."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def serve_metrics(metrics: OperatorMetrics, port: int,
                  host: str = "0.0.0.0") -> MetricsServer | None:
    """Starts serving the operator's registry on ``/metrics`` (and ``/healthz``); port 0
    serves nothing and returns None."""
    if not port:
        return None
    server = MetricsServer(metrics.registry, host=host, port=port)
    server.start()
    log.info("serving metrics on http://%s:%d/metrics", host, server.port)
    return server


def main(argv: list[str] | None = None) -> int:
    """``python -m seedrl.service.operator [--namespace NS ...] [--poll-seconds S]
    [--metrics-port P]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m seedrl.service.operator",
                                description="Run the seedrl operator.")
    p.add_argument("--namespace", action="append", default=[],
                   help="watch only these namespaces (repeatable); default: all")
    p.add_argument("--poll-seconds", type=float, default=10.0,
                   help="how often to refresh each Experiment's status")
    p.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                   help="kopf's liveness endpoint")
    p.add_argument("--metrics-port", type=int, default=8081,
                   help="port of the operator's Prometheus /metrics on 0.0.0.0; 0 disables")
    args = p.parse_args(argv)
    if not 0 <= args.metrics_port <= 65535:
        p.error(f"--metrics-port must be 0 to 65535, got {args.metrics_port}")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s seedrl-operator %(levelname)s %(message)s")
    try:
        prices = cost.load_prices()
    except ConfigError as exc:
        p.error(f"the price table ({cost.PRICES_ENV}): {exc}")
    log.info("pricing pods with table %s (%s)", prices.version, prices.region)
    config = OperatorConfig(api_client=default_api_client(), poll_seconds=args.poll_seconds,
                            prices=prices)
    server = serve_metrics(config.metrics, args.metrics_port)
    try:
        kopf.run(registry=build_registry(config), standalone=True,
                 clusterwide=not args.namespace, namespaces=args.namespace,
                 liveness_endpoint=args.liveness)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
