"""The seedrl operator: thin kopf handlers over :mod:`seedrl.service.operator.reconcile`.

Run it with ``python -m seedrl.service.operator`` (in a cluster it logs in with the pod's service
account; elsewhere with the current kubeconfig: :mod:`seedrl.service.kube`). For every
Experiment it:

- validates the spec with :func:`seedrl.common.config.parse_experiment`; an invalid one gets phase
  Failed, reason ValidationFailed and a message naming each field, and nothing else happens to
  it (no retries: a new spec is a new event). Other Experiments are unaffected;
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
  handlers feed an in-memory :class:`ChildCache`) instead of reading the children on every
  refresh, and reconciles an Experiment at once when its learner Job changes; every
  ``poll_seconds`` the :class:`Poller` reads the Experiment afresh (one that is gone is
  forgotten, never healed), reads the learner's ``GET /status`` (progress has nothing to
  watch) and writes ``status`` (phase, conditions, progress and cost); it recreates a missing
  child and scales the actors to zero once the learner has finished. kopf's watches miss
  deletions when they re-list (after a watch expires or a peering pause), so every
  ``resync_seconds``, and soon after kopf re-lists, the poller lists each kind itself and
  replaces the cache's content (:meth:`ChildCache.replace`): a pod gone unseen stops being
  priced as running, an Experiment gone unseen stops being polled;
- posts Kubernetes Events on the Experiment for phase changes, failures and learner
  replacements;
- with ``spec.queueName`` (Kueue): the learner Job starts suspended and Kueue admits it by
  unsuspending it; the actors stay at zero replicas until then, and carry the same queue label
  so that Kueue accounts for their pods too. Suspending and resuming set the Job's Kueue
  Workload ``spec.active`` (Kueue then suspends or re-queues the Job itself), never the Job's
  ``spec.suspend``, which Kueue owns;
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
:class:`PeeringGate` for each Experiment's namespace.

kopf keeps its own bookkeeping in annotations under ``seedrl.dev/`` rather than in ``status``,
which the CRD's structural schema would prune.
"""

from __future__ import annotations

import base64
import collections
import copy
import dataclasses
import datetime
import functools
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.request
import uuid
from typing import Any, Callable, Mapping, Optional

import kopf
import kubernetes

from seedrl.common.config import (
    GROUP,
    IMAGE_REGISTRY,
    PLURAL,
    VERSION,
    ConfigError,
    Experiment,
    ImageDefaults,
)
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.metrics_http import MetricsServer
from seedrl.service import cost
from seedrl.service.kube import api_client
from seedrl.service.operator import certificates, reconcile
from seedrl.service.operator.render import render
from seedrl.service.operator.render.actors import actor_replicas
from seedrl.service.operator.render.common import (
    LABEL_EXPERIMENT,
    LABEL_ROLE,
    MANAGED_BY,
    names,
    owner_reference,
)
from seedrl.service.operator.render.tls import (
    CERT_MANAGER_GROUP,
    ca_secret_name,
    learner_dns_names,
    render_certificate,
    render_tls_secret,
    tls_secret_name,
)
from seedrl.service.operator.render.volume import needs_run_volume
from seedrl.service.operator.status import compute_status, condition, invalid_status, now_rfc3339
from seedrl.service.operator.usage import LearnerUsage
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
    "PersistentVolumeClaim": (kubernetes.client.CoreV1Api, "persistent_volume_claim"),
    "PodDisruptionBudget": (kubernetes.client.PolicyV1Api, "pod_disruption_budget"),
    "Secret": (kubernetes.client.CoreV1Api, "secret"),
}
#: Kinds created once and never applied again (a claim's spec is immutable once bound).
_CREATE_ONLY = ("PersistentVolumeClaim",)
#: Kueue's Workload, which owns a queued Job's admission.
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"


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
      active: ``active(namespace) -> bool``: whether this replica is the active one among
        peers for the Experiments of a namespace (:class:`PeeringGate`); always, when
        standalone.
      images: where the images an Experiment does not name come from (this release's, from
        ``--image-registry``); an Experiment keeps the ones of its first reconcile
        (:func:`seedrl.service.operator.reconcile.image_defaults`).
      namespaces: the namespaces kopf watches (``--namespace``); empty: every namespace. The
        poller's resync lists these.
      resync_seconds: how often the poller lists what the watches feed the cache with and
        replaces the cache's content with it (:meth:`ChildCache.replace`), so that objects
        that vanished without a DELETED event are dropped; sooner after kopf re-lists.
    """

    api_client: kubernetes.client.ApiClient
    poll_seconds: float = 10.0
    fetch: Callable[[str], str] = fetch_url
    status_url: Callable[[str, str, int], str] = reconcile.learner_status_url
    prices: cost.PriceTable = dataclasses.field(
        default_factory=lambda: cost.load_prices(environ={})
    )
    metrics: OperatorMetrics = dataclasses.field(default_factory=OperatorMetrics)
    connection: Optional[kopf.ConnectionInfo] = None
    active: Callable[[str], bool] = lambda namespace: True
    images: ImageDefaults = dataclasses.field(default_factory=ImageDefaults)
    namespaces: tuple[str, ...] = ()
    resync_seconds: float = 300.0


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
            response = getattr(api, f"read_namespaced_{suffix}")(
                name, namespace, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        """The pods matching a label selector, as plain JSON."""
        response = kubernetes.client.CoreV1Api(self.api_client).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        return list(json.loads(response.data).get("items") or [])

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side applies one rendered object (creates it or brings it to this state)."""
        api, suffix = self._api(obj["kind"])
        meta = obj["metadata"]
        getattr(api, f"patch_namespaced_{suffix}")(
            meta["name"],
            meta["namespace"],
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
            _preload_content=False,
        )

    def create(self, obj: Mapping[str, Any]) -> None:
        """Creates one object; an existing one is left alone."""
        api, suffix = self._api(obj["kind"])
        try:
            getattr(api, f"create_namespaced_{suffix}")(
                obj["metadata"]["namespace"], dict(obj), _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise

    def merge(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON-merge-patches one object."""
        api, suffix = self._api(kind)
        getattr(api, f"patch_namespaced_{suffix}")(
            name, namespace, dict(patch), _content_type=MERGE, _preload_content=False
        )

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Posts a Kubernetes Event about ``obj`` (best effort: a failure is only logged)."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.timezone.utc)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            kubernetes.client.CoreV1Api(self.api_client).create_namespaced_event(
                meta["namespace"], body, _preload_content=False
            )
        except (kubernetes.client.ApiException, OSError) as exc:
            log.warning(
                "cannot post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc
            )

    def workloads(self, namespace: str, job_uid: str) -> list[dict]:
        """The Kueue Workloads of a Job (Kueue labels them with the Job's uid)."""
        group, version, plural = KUEUE
        api = kubernetes.client.CustomObjectsApi(self.api_client)
        response = api.list_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            label_selector=f"{LABEL_KUEUE_JOB_UID}={job_uid}",
            _preload_content=False,
        )
        return list(json.loads(response.data).get("items") or [])

    def set_workload_active(self, namespace: str, name: str, active: bool) -> None:
        """Activates or deactivates a Kueue Workload (``spec.active``)."""
        group, version, plural = KUEUE
        kubernetes.client.CustomObjectsApi(self.api_client).patch_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            name,
            {"spec": {"active": active}},
            _content_type=MERGE,
            _preload_content=False,
        )

    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool:
        """Deletes one object (its dependents in the background, or first with
        ``Foreground``); False if it was already gone."""
        api, suffix = self._api(kind)
        try:
            getattr(api, f"delete_namespaced_{suffix}")(
                name, namespace, propagation_policy=propagation, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _job_patch(
    exp: Experiment, job: Mapping[str, Any], usage: LearnerUsage | None = None
) -> dict | None:
    """What to change on an existing learner Job: only ``spec.suspend`` may change, and never
    for a queued one (Kueue owns a queued Job's ``spec.suspend``: see :func:`workload_active`).
    Resumed, its ``activeDeadlineSeconds`` becomes what is left of the spec's: the Job's own
    timer starts again from zero at every resume.
    """
    if exp.spec.queue_name:
        return None
    current = bool((job.get("spec") or {}).get("suspend"))
    if exp.spec.suspend != current:
        patch: dict[str, Any] = {"suspend": exp.spec.suspend}
        deadline = (usage or LearnerUsage()).deadline(exp)
        if not exp.spec.suspend and deadline is not None:
            patch["activeDeadlineSeconds"] = deadline
        return {"spec": patch}
    return None


def workload_active(exp: Experiment) -> bool:
    """What a queued Experiment's Kueue Workload ``spec.active`` should be: false while it is
    suspended (Kueue evicts it, suspends the Job and frees the quota), true otherwise (Kueue
    queues it again and admits it by unsuspending the Job)."""
    return not exp.spec.suspend


@dataclasses.dataclass
class Observed:
    """An Experiment's children as the operator last saw them.

    Attributes:
      job: the learner Job, or None.
      deployment: the actor Deployment, or None.
      pods: the Experiment's pods (both roles), or None when they were not looked at.
    """

    job: dict | None
    deployment: dict | None
    pods: list[dict] | None = None


class Reconciler:
    """The work behind the handlers, kept apart from kopf so that it reads top to bottom."""

    def __init__(self, config: OperatorConfig):
        self.config = config
        self.children = Children(config.api_client)

    def observe(self, exp: Experiment, namespace: str) -> Observed:
        """The learner Job and the actor Deployment as the API server has them now."""
        n = names(exp.metadata.name)
        return Observed(
            self.children.read("Job", namespace, n.learner),
            self.children.read("Deployment", namespace, n.actors),
        )

    def learner_status(
        self, exp: Experiment, namespace: str, job: Mapping[str, Any] | None
    ) -> tuple[LearnerStatus | None, str | None]:
        """The learner's /status when a learner pod is up; else (None, why)."""
        if not job or not int(((job.get("status") or {}).get("active")) or 0):
            return None, "no learner pod is running"
        url = self.config.status_url(namespace, exp.metadata.name, exp.spec.learner.metrics_port)
        try:
            return LearnerStatus.from_json(self.config.fetch(url)), None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return None, f"reading {url}: {exc}"

    def apply(
        self,
        exp: Experiment,
        namespace: str,
        uid: str,
        job: Mapping[str, Any] | None,
        done_before: bool = False,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        """Brings every child to what ``exp`` renders to.

        Args:
          done_before: the status records a finished learner: its Job, if gone, is not made
            again and no actors run.
          body: the Experiment, for the Events posted about what was done.
        """
        owner = owner_reference(exp.metadata.name, uid)
        finished = reconcile.job_finished(job) or done_before
        self.ensure_learner_certificate(exp, namespace, owner)
        admitted = reconcile.admitted(exp, job)
        previous = (body or {}).get("status")
        images = reconcile.image_defaults(previous, self.config.images)
        usage = LearnerUsage.from_status(previous)
        for obj in render(
            exp, owner, namespace, finished=finished, admitted=admitted, images=images, usage=usage
        ):
            kind = obj["kind"]
            if kind in _CREATE_ONLY:
                self.children.create(obj)
            elif kind != "Job":
                self.children.apply(obj)
            elif job is None:
                if not done_before:
                    self.children.create(obj)
            elif reconcile.job_outdated(exp, job):
                self.replace_learner(exp, namespace, job, body)
            else:
                patch = _job_patch(exp, job, usage)
                if patch:
                    self.children.merge("Job", namespace, obj["metadata"]["name"], patch)
                if exp.spec.queue_name:
                    self.activate_workload(exp, namespace, job)

    def replace_learner(
        self,
        exp: Experiment,
        namespace: str,
        job: Mapping[str, Any],
        body: Mapping[str, Any] | None,
    ) -> None:
        """Deletes a learner Job that runs an older spec, in the foreground: the Job stays
        until its pod is gone (it gets SIGTERM and writes its final checkpoint), so the new
        Job, created by a later reconcile, never runs beside it."""
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            return  # already on its way out
        name = job["metadata"]["name"]
        if self.children.delete("Job", namespace, name, propagation="Foreground"):
            log.info(
                "Experiment %s/%s: replacing learner Job %s (the spec changed)",
                namespace,
                exp.metadata.name,
                name,
            )
            if body is not None:
                self.children.event(
                    body,
                    "Normal",
                    "ReplacingLearner",
                    f"The spec changed what the learner runs: Job {name} is "
                    f"replaced; the new learner resumes from the checkpoint.",
                )

    def activate_workload(self, exp: Experiment, namespace: str, job: Mapping[str, Any]) -> None:
        """Sets the queued Job's Kueue Workload ``spec.active`` from ``spec.suspend``."""
        wanted = workload_active(exp)
        for workload in self.children.workloads(namespace, job["metadata"]["uid"]):
            if bool((workload.get("spec") or {}).get("active", True)) != wanted:
                self.children.set_workload_active(namespace, workload["metadata"]["name"], wanted)

    def status(
        self,
        exp: Experiment,
        namespace: str,
        body: Mapping[str, Any],
        refused: list[str],
        seen: Observed | None = None,
        forbidden: str | None = None,
    ) -> dict:
        """The status to write, from what the children and the learner say now
        (``forbidden``: the API server's refusal of a call applying the children)."""
        seen = seen or self.observe(exp, namespace)
        job, deployment = seen.job, seen.deployment
        learner, why = self.learner_status(exp, namespace, job)
        pods = seen.pods
        if pods is None:
            try:
                pods = self.children.pods(namespace, f"{LABEL_EXPERIMENT}={exp.metadata.name}")
            except kubernetes.client.ApiException as exc:
                log.warning(
                    "Experiment %s/%s: cannot list its pods: %s", namespace, exp.metadata.name, exc
                )
        learner_pods = [
            p
            for p in pods or []
            if (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == "learner"
        ]
        if learner is None and job is not None and reconcile.job_finished(job):
            # The learner is gone: its final status is in its pod's termination message.
            learner = reconcile.final_learner_status(learner_pods) or learner
        status = compute_status(
            exp,
            generation=body["metadata"].get("generation"),
            previous=body.get("status"),
            job=job,
            deployment=deployment,
            learner=learner,
            learner_error=why,
            refused=refused,
            learner_pods=learner_pods,
            replacing=reconcile.job_outdated(exp, job),
            images=reconcile.image_defaults(body.get("status"), self.config.images),
            forbidden=forbidden,
        )
        report = self.price(exp, namespace, body.get("status") or {}, status, pods)
        self.config.metrics.observe(
            exp.metadata.name, namespace, body["metadata"].get("uid"), status.get("phase"), report
        )
        return status

    def price(
        self,
        exp: Experiment,
        namespace: str,
        previous: Mapping[str, Any],
        status: dict,
        pods: list[dict] | None = None,
    ) -> cost.CostReport | None:
        """Prices the Experiment's pods into ``status["cost"]`` and ``status["costRecords"]``.

        The stored records (``previous["costRecords"]``) are merged with the pods listed now,
        so pods that are gone keep being counted. Any failure leaves both keys out of
        ``status`` (the stored ones stay) and is logged: cost never fails a reconcile.

        Returns:
          The report, or None when nothing was priced this time.
        """
        name = exp.metadata.name
        selector = f"{LABEL_EXPERIMENT}={name}"
        try:
            if pods is None:
                pods = self.children.pods(namespace, selector)
            records, report = cost.price_pods(
                previous.get("costRecords") or [],
                pods,
                self.config.prices,
                # Frames, Atari's skipped ones included (the learner counts them).
                env_frames=int(status.get("envFrames") or 0),
            )
        except Exception as exc:  # noqa: BLE001 - cost is best effort, the reconcile is not
            log.warning(
                "Experiment %s/%s: keeping the previous cost; pricing its pods (%s) failed: %s",
                namespace,
                name,
                selector,
                exc,
            )
            return None
        status["cost"] = report.to_status()
        status["costRecords"] = records
        return report

    def reconcile(
        self, body: Mapping[str, Any], heal_only: bool = False, seen: Observed | None = None
    ) -> dict:
        """Validates, applies (unless refused) and returns the status to write.

        Args:
          body: the Experiment as stored.
          heal_only: from the periodic timer or a child's event: apply only when a child is
            missing, the actors must change because the learner finished or was admitted, or
            the learner Job must be replaced or suspended; a spec change is the change
            handlers' business.
          seen: the children as watched (the timer's kopf indexes); None reads them.
        """
        meta = body["metadata"]
        namespace = meta["namespace"]
        previous = body.get("status") or {}
        try:
            exp = reconcile.validate(body)
        except ConfigError as exc:
            status = invalid_status(previous, meta.get("generation"), exc, now_rfc3339())
            self.config.metrics.observe(
                meta["name"], namespace, meta.get("uid"), status.get("phase"), None
            )
            return status
        applied = previous.get("appliedImmutable")
        refused = reconcile.immutable_changes(applied, exp) if applied else []
        forbidden = None
        if not refused:
            seen = seen or self.observe(exp, namespace)
            done_before = reconcile.finished_before(previous)
            if not heal_only or self._needs_healing(exp, namespace, seen, done_before):
                try:
                    self.apply(exp, namespace, meta["uid"], seen.job, done_before, body)
                except kubernetes.client.ApiException as exc:
                    if exc.status != 403:
                        raise
                    # Retrying would only be refused again: say so where the user looks.
                    forbidden = _api_message(exc)
                    self._announce_forbidden(body, forbidden)
                seen = self.observe(exp, namespace)
        return self.status(exp, namespace, body, refused, seen, forbidden)

    def _announce_forbidden(self, body: Mapping[str, Any], message: str) -> None:
        """Logs a refused call and posts a Warning Event, once per new refusal."""
        before = condition(body.get("status") or {}, "SpecApplied") or {}
        meta = body["metadata"]
        log.error("Experiment %s/%s: %s", meta["namespace"], meta["name"], message)
        if before.get("reason") != "Forbidden" or message not in (before.get("message") or ""):
            self.children.event(body, "Warning", "Forbidden", message)

    def _needs_healing(
        self, exp: Experiment, namespace: str, seen: Observed, done_before: bool
    ) -> bool:
        job, deployment = seen.job, seen.deployment
        if (job is None and not done_before) or deployment is None:
            return True
        if reconcile.job_outdated(exp, job):
            return True
        n = names(exp.metadata.name)
        children = [
            ("ConfigMap", n.config),
            ("Service", n.service),
            ("NetworkPolicy", n.network_policy),
            ("PodDisruptionBudget", n.disruption_budget),
        ]
        if needs_run_volume(exp):
            children.append(("PersistentVolumeClaim", n.run_volume))
        for kind, name in children:
            if self.children.read(kind, namespace, name) is None:
                return True
        wanted = actor_replicas(
            exp, reconcile.job_finished(job) or done_before, reconcile.admitted(exp, job)
        )
        return (deployment.get("spec") or {}).get("replicas") != wanted or (
            job is not None and _job_patch(exp, job) is not None
        )

    def forget(self, body: Mapping[str, Any]) -> None:
        """Drops the series of an Experiment that is gone (its children are the garbage
        collector's: they carry owner references)."""
        self.config.metrics.forget(
            body["metadata"]["name"], body["metadata"]["namespace"], body["metadata"].get("uid")
        )

    # -- the learner's TLS certificate ---------------------------------------------------------

    def cert_manager_installed(self) -> bool:
        """Whether the cluster serves cert-manager's API (read from API discovery, which every
        authenticated client may read: no extra rights needed)."""
        api = kubernetes.client.CustomObjectsApi(self.children.api_client)
        try:
            resources = api.get_api_resources(CERT_MANAGER_GROUP, "v1")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.name == "certificates" for r in resources.resources or [])

    def ensure_learner_certificate(
        self, exp: Experiment, namespace: str, owner: Mapping[str, Any]
    ) -> None:
        """Provisions the learner's certificate when ``spec.learner.tls.enabled``: a
        cert-manager Issuer and Certificate where cert-manager runs (it writes and renews the
        Secret), else a Secret with a self-signed CA and leaf made here, made again when
        missing, for other names or near its end. The pods mount the Secret by name and wait
        for it."""
        if not exp.spec.learner.tls.enabled:
            return
        if self.cert_manager_installed():
            api = kubernetes.client.CustomObjectsApi(self.children.api_client)
            for obj in render_certificate(exp, owner, namespace):
                api.patch_namespaced_custom_object(
                    CERT_MANAGER_GROUP,
                    "v1",
                    namespace,
                    obj["kind"].lower() + "s",
                    obj["metadata"]["name"],
                    obj,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type=APPLY,
                )
            self.own_secrets(
                namespace,
                [
                    tls_secret_name(exp.metadata.name),
                    ca_secret_name(exp.metadata.name),
                ],
                owner,
            )
            return
        name = tls_secret_name(exp.metadata.name)
        current = self.children.read("Secret", namespace, name)
        data = {k: base64.b64decode(v) for k, v in ((current or {}).get("data") or {}).items()}
        dns_names = learner_dns_names(exp.metadata.name, namespace)
        if certificates.needs_new(data, dns_names):
            log.info(
                "Experiment %s/%s: making the learner's TLS certificate (%s)",
                namespace,
                exp.metadata.name,
                ", ".join(dns_names),
            )
            self.children.apply(
                render_tls_secret(exp, certificates.self_signed(dns_names), owner, namespace)
            )

    def own_secrets(self, namespace: str, names: list[str], owner: Mapping[str, Any]) -> None:
        """Makes the Experiment own the Secrets cert-manager wrote for it: cert-manager does
        not delete a Certificate's Secret with it (unless started with
        ``--enable-certificate-owner-ref``), so the learner's key would outlive the
        Experiment. A Secret not written yet is left for the next reconcile."""
        for name in names:
            secret = self.children.read("Secret", namespace, name)
            if secret is None:
                continue
            refs = (secret.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("uid") == owner["uid"] for r in refs):
                continue
            self.children.merge(
                "Secret", namespace, name, {"metadata": {"ownerReferences": [*refs, dict(owner)]}}
            )


def _api_message(exc: kubernetes.client.ApiException) -> str:
    """The API server's message of a refused call (its Status body), else the reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def _write_status(
    patch: kopf.Patch, status: Mapping[str, Any], current: Mapping[str, Any] | None
) -> None:
    """Puts into kopf's patch only the keys of ``status`` that differ from ``current``, so that
    an unchanged poll writes nothing."""
    current = current or {}
    for key, value in status.items():
        if current.get(key) != value:
            patch.status[key] = value


#: Phases whose arrival is a Warning event; the others are Normal.
_WARNING_PHASES = ("Failed",)


def announce(children: "Children", body: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    """Posts a Kubernetes Event on the Experiment when its phase changes (a Warning with the
    Failed condition's reason and message when it fails)."""
    before = (body.get("status") or {}).get("phase")
    phase = status.get("phase")
    if not phase or phase == before:
        return
    cond = condition(status, "Failed") if phase == "Failed" else None
    cond = cond or condition(status, "Valid") if phase == "Failed" else cond
    if cond and cond.get("status") in ("True", "False") and phase == "Failed":
        reason, message = cond.get("reason") or "Failed", cond.get("message") or ""
    else:
        reason, message = (
            phase,
            f"The experiment is {phase.lower()}" + (f" (was {before.lower()})." if before else "."),
        )
    children.event(body, "Warning" if phase in _WARNING_PHASES else "Normal", reason, message)


#: The children the operator made (the labels kopf's watches of Jobs and Deployments select).
_SELECTOR_OURS = f"{LABEL_EXPERIMENT},app.kubernetes.io/managed-by={MANAGED_BY}"
#: What the :class:`ChildCache` holds, selected as kopf's watches select it: kind -> (label
#: selector, None: every object; the list call across all namespaces; the list call in one).
#: The calls take the ApiClient first and return the raw response.
_WATCHED: dict[str, tuple[str | None, Callable[..., Any], Callable[..., Any]]] = {
    "Experiment": (
        None,
        lambda c, **kw: kubernetes.client.CustomObjectsApi(c).list_cluster_custom_object(
            GROUP, VERSION, PLURAL, **kw
        ),
        lambda c, ns, **kw: kubernetes.client.CustomObjectsApi(c).list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, **kw
        ),
    ),
    "Job": (
        _SELECTOR_OURS,
        lambda c, **kw: kubernetes.client.BatchV1Api(c).list_job_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.BatchV1Api(c).list_namespaced_job(ns, **kw),
    ),
    "Deployment": (
        _SELECTOR_OURS,
        lambda c, **kw: kubernetes.client.AppsV1Api(c).list_deployment_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.AppsV1Api(c).list_namespaced_deployment(ns, **kw),
    ),
    "Pod": (
        LABEL_EXPERIMENT,
        lambda c, **kw: kubernetes.client.CoreV1Api(c).list_pod_for_all_namespaces(**kw),
        lambda c, ns, **kw: kubernetes.client.CoreV1Api(c).list_namespaced_pod(ns, **kw),
    ),
}
#: Objects per page of a resync's list calls.
_PAGE = 500


def list_watched(
    api_client: kubernetes.client.ApiClient, kind: str, namespaces: tuple[str, ...] = ()
) -> list[dict]:
    """Every object of one of the cache's kinds (:data:`_WATCHED`) in ``namespaces`` (empty:
    all), as plain JSON with ``apiVersion`` and ``kind`` filled in as kopf fills them in (a
    list's items lack them). Paged; raises on an API error."""
    selector, everywhere, in_namespace = _WATCHED[kind]
    calls: list[Callable[..., Any]] = (
        [functools.partial(in_namespace, api_client, ns) for ns in namespaces]
        if namespaces
        else [functools.partial(everywhere, api_client)]
    )
    items: list[dict] = []
    for call in calls:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_preload_content": False}
            if selector:
                kwargs["label_selector"] = selector
            if token:
                kwargs["_continue"] = token
            page = json.loads(call(**kwargs).data)
            for item in page.get("items") or []:
                if page.get("apiVersion"):
                    item.setdefault("apiVersion", page["apiVersion"])
                item.setdefault("kind", kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return items


class ChildCache:
    """The Experiments, learner Jobs, actor Deployments and pods as the watch streams last
    delivered them (kopf's ``on.event`` handlers feed it; the poller reads it).

    kopf's watches are the fast path, but they miss deletions: after a watch expires (410
    Gone) or a peering pause, kopf lists the objects again (events of type None) and never
    says which ones vanished meanwhile. So the poller also lists each kind itself now and
    then and :meth:`replace`\\ s what is held with that listing. An event handled after the
    listing began wins over the listing, whatever either says (every event is counted,
    deletions included: :meth:`mark`), so that an object a watch delivered while the list
    call ran is not dropped, nor one it deleted meanwhile brought back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], dict]] = collections.defaultdict(dict)
        #: The count of events handled so far, and for each kind the count at each key's last
        #: change (deletions too), while a later :meth:`replace` may still need it.
        self._count = 0
        self._changed: dict[str, dict[tuple[str, str], int]] = collections.defaultdict(dict)

    def update(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Records one watch event (``DELETED`` forgets the object, unless what is held is a
        newer object of that name: the events of two objects may be handled out of order)."""
        meta = body["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        with self._lock:
            self._count += 1
            if event_type == "DELETED":
                held = self._objects[kind].get(key)
                if held is None or not _other_object(held, body):
                    self._objects[kind].pop(key, None)
                    self._changed[kind][key] = self._count
            else:
                self._objects[kind][key] = copy.deepcopy(dict(body))
                self._changed[kind][key] = self._count

    def mark(self) -> int:
        """The count of events handled so far: take it before listing for :meth:`replace`."""
        with self._lock:
            return self._count

    def replace(self, kind: str, listed: list[Mapping[str, Any]], since: int) -> list[dict]:
        """Makes what is held of ``kind`` what a listing says, but for the objects an event
        changed (or deleted) after :meth:`mark` returned ``since``: those stay as the event
        left them, for the listing may predate the event and the watch delivers what comes
        after it in order. The listing must have started after that :meth:`mark`.

        Returns:
          The objects dropped: gone from the API server without a DELETED event seen.
        """
        fresh = {((o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o for o in listed}
        with self._lock:
            held, changed = self._objects[kind], self._changed[kind]
            recent = {key for key, count in changed.items() if count > since}
            out = {key: held[key] for key in recent if key in held}
            for key, obj in fresh.items():
                if key not in recent:
                    out[key] = copy.deepcopy(dict(obj))
            dropped = [obj for key, obj in held.items() if key not in out]
            self._objects[kind] = out
            # Counts up to ``since`` can matter to no later replace: each marks anew.
            self._changed[kind] = {key: changed[key] for key in recent}
            return dropped

    def experiments(self) -> list[dict]:
        """Every Experiment seen, not being deleted."""
        with self._lock:
            return [
                b
                for b in self._objects["Experiment"].values()
                if not b["metadata"].get("deletionTimestamp")
            ]

    def experiment(self, namespace: str, name: str) -> dict | None:
        """One Experiment as last seen."""
        with self._lock:
            return self._objects["Experiment"].get((namespace, name))

    def observed(self, namespace: str, name: str) -> Observed:
        """An Experiment's children as last seen."""
        n = names(name)
        with self._lock:
            pods = [
                p
                for (ns, _), p in self._objects["Pod"].items()
                if ns == namespace
                and (p["metadata"].get("labels") or {}).get(LABEL_EXPERIMENT) == name
            ]
            return Observed(
                self._objects["Job"].get((namespace, n.learner)),
                self._objects["Deployment"].get((namespace, n.actors)),
                pods,
            )


def _other_object(held: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether two bodies of one name are two objects (deleted and made again): their uids
    differ (an unknown uid is taken for the same object)."""
    a, b = held["metadata"].get("uid"), body["metadata"].get("uid")
    return bool(a and b and a != b)


class PeeringGate:
    """Whether this replica is the active one among peers for a namespace's Experiments:
    kopf's rule over its peering object, where every replica keeps
    ``status[identity] = {priority, lifetime, lastseen}`` and the live one of the highest
    priority is active, the others pause. kopf pauses its own watchers; this tells the poller,
    which kopf does not drive, to pause too.

    A cluster-wide kopf has one ClusterKopfPeering. A namespace-scoped one keeps a KopfPeering
    of that name in every namespace it watches (and pauses all its watchers while any of them
    is missing or names a higher peer): the poller follows the Experiment's own namespace's,
    since a peer working there keeps its record there. A peering that cannot be read (missing,
    or the API down) pauses, as kopf stays paused without one.

    Args:
      api_client: the client to read the peering objects with.
      name: the peering objects' name (``--peering``).
      identity, priority: this replica's, as given to kopf.
      clusterwide: True: the ClusterKopfPeering decides for every namespace; False: each
        namespace's KopfPeering for its own.
    """

    def __init__(
        self, api_client, name: str, identity: str, priority: int, clusterwide: bool = True
    ):
        self.api = kubernetes.client.CustomObjectsApi(api_client)
        self.name, self.identity, self.priority, self.clusterwide = (
            name,
            identity,
            priority,
            clusterwide,
        )

    def __call__(self, namespace: str) -> bool:
        """Whether to work on the Experiments of ``namespace`` now."""
        try:
            if self.clusterwide:
                body = self.api.get_cluster_custom_object(
                    "kopf.dev", "v1", "clusterkopfpeerings", self.name
                )
            else:
                body = self.api.get_namespaced_custom_object(
                    "kopf.dev", "v1", namespace, "kopfpeerings", self.name
                )
        except kubernetes.client.ApiException as exc:
            where = "cluster-wide" if self.clusterwide else f"in {namespace}"
            log.warning("cannot read peering %s %s: %s; pausing", self.name, where, exc.reason)
            return False
        return is_active_peer(body.get("status") or {}, self.identity, self.priority)


def is_active_peer(
    peers: Mapping[str, Any], identity: str, priority: int, now: datetime.datetime | None = None
) -> bool:
    """Whether ``identity`` is the live peer of the highest priority (kopf's rule: a peer is
    live until ``lastseen + lifetime``; a tie keeps the lower identity active, so that
    exactly one replica works even then)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for other, info in peers.items():
        if other == identity or not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.datetime.fromisoformat(str(info.get("lastseen")))
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=datetime.timezone.utc)
            alive = seen + datetime.timedelta(seconds=int(info.get("lifetime") or 0)) > now
        except (TypeError, ValueError):
            continue
        theirs = int(info.get("priority") or 0)
        if alive and (theirs > priority or (theirs == priority and other < identity)):
            return False
    return True


class Poller:
    """Refreshes every Experiment's status each ``poll_seconds`` (and at once when its learner
    Job changes): the learner's ``/status`` has nothing to watch.

    The children come from the :class:`ChildCache`, the Experiment itself is read afresh
    first: one that is gone (its DELETED event missed) is dropped from the cache and its
    series with it, never healed (its children would be made again for a dead owner, which
    the garbage collector deletes again, every poll). Status is written only where it changed.
    Each Experiment is refreshed only where this replica is active for its namespace
    (``config.active``). Every ``resync_seconds``, and at the next round after kopf re-listed
    a kind, it :meth:`resync`\\ s the cache with the API server.
    """

    def __init__(self, config: OperatorConfig, rec: "Reconciler", cache: ChildCache):
        self.config, self.rec, self.cache = config, rec, cache
        #: ``active(namespace)``: whether this replica works there (see :class:`PeeringGate`).
        self.active = config.active
        self._stop = threading.Event()
        self._woken: set[tuple[str, str]] = set()
        self._wake = threading.Event()
        self._relisted = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seedrl-poller", daemon=True)
        self.api = kubernetes.client.CustomObjectsApi(config.api_client)

    def start(self) -> None:
        """Starts the refresh thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stops it."""
        self._stop.set()
        self._wake.set()

    def wake(self, namespace: str, name: str) -> None:
        """Refreshes one Experiment now (its learner Job or a learner pod changed)."""
        self._woken.add((namespace, name))
        self._wake.set()

    def relisted(self) -> None:
        """Brings the next resync forward to the next round: kopf is listing a kind (again,
        after a watch expired or a pause), which tells nothing of what vanished meanwhile."""
        self._relisted.set()

    def _run(self) -> None:
        next_all = time.monotonic() + self.config.poll_seconds
        next_resync = time.monotonic() + self.config.resync_seconds
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_all - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return
            if time.monotonic() >= next_all:
                next_all = time.monotonic() + self.config.poll_seconds
                if self._relisted.is_set() or time.monotonic() >= next_resync:
                    self._relisted.clear()
                    next_resync = time.monotonic() + self.config.resync_seconds
                    try:
                        self.resync()
                    except Exception:  # the watches go on feeding the cache meanwhile
                        log.exception("resyncing the watch cache failed")
                targets = [
                    (b["metadata"]["namespace"], b["metadata"]["name"])
                    for b in self.cache.experiments()
                ]
                self._woken.clear()
            else:
                targets, self._woken = list(self._woken), set()
            self.poll(targets)

    def poll(self, targets: list[tuple[str, str]]) -> None:
        """Refreshes the given Experiments (namespace, name) of the namespaces where this
        replica is active (asked once per namespace); one failing never stops the others."""
        active: dict[str, bool] = {}
        for namespace, name in targets:
            if namespace not in active:
                active[namespace] = self.active(namespace)
            if not active[namespace]:
                continue
            try:
                self.refresh(namespace, name)
            except Exception:  # one Experiment never stops the others
                log.exception("refreshing Experiment %s/%s failed", namespace, name)

    def resync(self) -> None:
        """Lists each kind the cache holds (in the watched namespaces) and replaces the cache's
        content with it (:meth:`ChildCache.replace`): what vanished without a DELETED event
        goes, an Experiment's series with it. A kind that cannot be listed is left as is."""
        for kind in _WATCHED:
            since = self.cache.mark()
            try:
                listed = list_watched(self.config.api_client, kind, self.config.namespaces)
            except (kubernetes.client.ApiException, OSError, ValueError) as exc:
                log.warning("cannot list %ss to resync the watch cache: %s", kind, exc)
                continue
            dropped = self.cache.replace(kind, listed, since)
            for body in dropped:
                if kind == "Experiment":
                    self.rec.forget(body)
            if dropped:
                log.info(
                    "resync: %d %s(s) gone without a DELETED event seen: %s",
                    len(dropped),
                    kind,
                    ", ".join(
                        f"{b['metadata'].get('namespace')}/{b['metadata']['name']}" for b in dropped
                    ),
                )

    def read(self, namespace: str, name: str) -> dict | None:
        """The Experiment as the API server has it now; None if it is gone."""
        try:
            response = self.api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def refresh(self, namespace: str, name: str) -> None:
        """Reconciles one Experiment (healing only) and writes what changed in its status."""
        cached = self.cache.experiment(namespace, name)
        if cached is None:
            return
        # Read afresh: the cache may hold an Experiment that is gone, whose DELETED event a
        # re-listing watch never delivered; healing it would make its children again.
        body = self.read(namespace, name)
        if body is None:
            log.info("Experiment %s/%s is gone: forgetting it", namespace, name)
            self.cache.update("Experiment", "DELETED", cached)
            self.rec.forget(cached)
            return
        if body["metadata"].get("deletionTimestamp"):
            return  # going: a status written now would bring its series back
        with self.config.metrics.reconciling("poll"):
            status = self.rec.reconcile(
                body, heal_only=True, seen=self.cache.observed(namespace, name)
            )
            changed = {k: v for k, v in status.items() if (body.get("status") or {}).get(k) != v}
            if not changed:
                return
            announce(self.rec.children, body, status)
            try:
                self.api.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    {"status": changed},
                    _content_type=MERGE,
                    _preload_content=False,
                )
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise


def build_registry(
    config: OperatorConfig, registry: kopf.OperatorRegistry | None = None
) -> kopf.OperatorRegistry:
    """Registers the handlers for Experiments on ``registry`` (a new one if None)."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    rec = Reconciler(config)
    res = dict(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)
    res_args = (GROUP, VERSION, PLURAL)
    # The children kopf watches: the same selection as the resync lists (_WATCHED).
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
    def start_polling(**_: Any) -> None:
        poller.start()

    @kopf.on.cleanup(registry=registry)
    def stop_polling(**_: Any) -> None:
        poller.stop()

    # An invalid spec never raises (it is reported in status); what raises is an API error,
    # retried after a pause, while the timer below keeps reconciling as well.
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
    args = p.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
