"""The work behind the operator's handlers, kept apart from kopf so that it reads top to bottom:
:class:`Reconciler` validates an Experiment, applies what it renders to (the learner Job
created once, patched, or replaced; the learner's certificate), reads its learner's status,
prices its pods and returns the status to write; :func:`announce` posts the Events of phase
changes. :class:`OperatorConfig` is what it needs from outside.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.client
import json
import logging
import math
import time
import urllib.request
from typing import Any, Callable, Mapping, Optional

import kopf
import kubernetes

from seedrl.common.config import (
    ConfigError,
    Experiment,
    ImageDefaults,
)
from seedrl.common.learner_status import LearnerStatus
from seedrl.service import cost
from seedrl.service.operator import reconcile
from seedrl.service.operator.render import render
from seedrl.service.operator.render.actors import actor_replicas
from seedrl.service.operator.render.learner_job import learner_hash, legacy_learner_hash
from seedrl.service.operator.render.common import (
    ANNOTATION_ADOPTED_HASH,
    LABEL_EXPERIMENT,
    LABEL_ROLE,
    names,
    owner_reference,
)
from seedrl.service.operator.render.volume import needs_run_volume, run_volume_claim
from seedrl.service.operator.run_volume import RunVolumes
from seedrl.service.operator.status import (
    HEARTBEAT_SECONDS,
    compute_status,
    condition,
    invalid_status,
    now_rfc3339,
)
from seedrl.service.operator.usage import LearnerUsage, usage_now
from seedrl.service.operator.metrics import OperatorMetrics
from seedrl.service.operator.children import Children
from seedrl.service.operator.env_spec import EnvSpecProgress, EnvSpecs
from seedrl.service.operator.learner_certificates import LearnerCertificates

log = logging.getLogger(__name__)


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
        peers for the Experiments of a namespace
        (:class:`~seedrl.service.operator.poller.PeeringGate`); always, when standalone.
      images: where the images an Experiment does not name come from (this release's, from
        ``--image-registry``); an Experiment keeps the ones of its first reconcile
        (:func:`seedrl.service.operator.reconcile.image_defaults`).
      namespaces: the namespaces kopf watches (``--namespace``); empty: every namespace. The
        poller's resync lists these.
      resync_seconds: how often the poller lists what the watches feed the cache with and
        replaces the cache's content with it (``ChildCache.replace``), so that objects
        that vanished without a DELETED event are dropped; sooner after kopf re-lists.
      heartbeat_seconds: how often a status whose only change is when the operator looked
        (``learnerUsage.lastSeen``, ``cost.asOf``) is written anyway
        (:func:`~seedrl.service.operator.status.worth_writing`).
      stranded_seconds: how long past the end of its grace period a learner pod that is being
        deleted may stay before the operator takes its kubelet for gone and finishes the
        deletion (:meth:`Reconciler.release_stranded`); a kubelet that is up kills it at the
        end of its grace.
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
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    stranded_seconds: float = 60.0


#: Kinds created once and never applied again (a claim's spec is immutable once bound).
_CREATE_ONLY = ("PersistentVolumeClaim",)


def _job_patch(
    exp: Experiment, job: Mapping[str, Any], usage: LearnerUsage | None = None
) -> dict | None:
    """What to change on an existing learner Job (None: nothing).

    Its ``spec.suspend`` follows the spec's, but never for a queued Job (Kueue owns a queued
    Job's ``spec.suspend``: see :func:`workload_active`). Its ``activeDeadlineSeconds`` is what
    is left of the spec's (``usage``: what was used, the run that a suspension ended included:
    :func:`~seedrl.service.operator.usage.usage_now`) while it is suspended and as it is
    resumed: the Job's own timer starts again from zero at every unsuspend, the operator's and
    Kueue's admission alike ("Jobs": the timer is stopped and reset), so a Job that is
    unsuspended by anyone starts with the right deadline. Its ``ttlSecondsAfterFinished``
    follows the spec's (the API lets it change; the learner never reads it), and a Job made
    by an earlier release that runs the same spec gets this release's learner hash beside its
    own (:func:`~seedrl.service.operator.reconcile.job_current`).
    """
    spec = job.get("spec") or {}
    suspended = bool(spec.get("suspend"))
    patch: dict[str, Any] = {}
    if not exp.spec.queue_name and exp.spec.suspend != suspended:
        patch["suspend"] = exp.spec.suspend
    deadline = (usage or LearnerUsage()).deadline(exp)
    if (
        deadline is not None
        and (suspended or patch.get("suspend") is False)
        and spec.get("activeDeadlineSeconds") != deadline
    ):
        patch["activeDeadlineSeconds"] = deadline
    if spec.get("ttlSecondsAfterFinished") != exp.spec.ttl_seconds_after_finished:
        patch["ttlSecondsAfterFinished"] = exp.spec.ttl_seconds_after_finished  # None: removed
    out: dict[str, Any] = {"spec": patch} if patch else {}
    wanted = learner_hash(exp)
    # A Job of an earlier release that runs the same spec keeps that release's hash, which a
    # rollback reads; this release's goes beside it (see adopt_earlier_job).
    adopted = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ADOPTED_HASH)
    if (
        reconcile.job_hash(job) != wanted
        and reconcile.job_hash(job) == legacy_learner_hash(exp)
        and adopted != wanted
    ):
        out["metadata"] = {"annotations": {ANNOTATION_ADOPTED_HASH: wanted}}
    return out or None


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
      pods: the Experiment's pods (every role), or None when they were not looked at.
    """

    job: dict | None
    deployment: dict | None
    pods: list[dict] | None = None
    #: The env-spec Job, where :attr:`cached`.
    env_spec_job: dict | None = None
    #: Whether this is the watches' view (the poller's cache), complete for every kind above.
    cached: bool = False


class ExperimentGone(LookupError):
    """The Experiment a cache held is gone from the API server."""


class Reconciler:
    """The work behind the handlers, kept apart from kopf so that it reads top to bottom."""

    def __init__(self, config: OperatorConfig):
        self.config = config
        self.children = Children(config.api_client)
        self.env_specs = EnvSpecs(self.children)
        self.run_volumes = RunVolumes(self.children)
        self.certificates = LearnerCertificates(self.children)
        #: When each Experiment's (by uid) unwatched children were last found all there.
        self._looked_up: dict[str, float] = {}
        #: The Experiments whose certificate Secrets were found owned.
        self._secrets_owned: set[str] = set()

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
    ) -> EnvSpecProgress | None:
        """Brings every child to what ``exp`` renders to, the env spec of a new learner Job
        among them (:class:`~seedrl.service.operator.env_spec.EnvSpecs`).

        Args:
          done_before: the status records a finished learner: its Job, if gone, is not made
            again and no actors run.
          body: the Experiment, for the Events posted about what was done.

        Returns:
          Where the env spec of a learner Job that needs it stands, else None.
        """
        owner = owner_reference(exp.metadata.name, uid)
        self.certificates.ensure(exp, namespace, owner)
        admitted = reconcile.admitted(exp, job)
        previous = (body or {}).get("status")
        images = reconcile.image_defaults(previous, self.config.images)
        usage = usage_now(previous, job, now_rfc3339())
        config = self.config_text(exp, namespace)
        # A new learner Job's pod serves the env spec the env-spec Job derives beside it: the
        # kubelet mounts its ConfigMap once the operator has made it, and the pod waits till
        # then. The env-spec Job mounts the Experiment's ConfigMap, so it comes after that.
        needs_spec = not done_before and (
            job is None
            or (not reconcile.job_finished(job) and reconcile.reads_derived_env_spec(job))
        )
        progress = None
        if needs_spec and config is not None:
            progress = self.env_specs.ensure(exp, namespace, owner, images, now_rfc3339())
        failed_spec = progress is not None and progress.failed is not None
        if failed_spec and job is not None:
            self.stop_learner(exp, namespace, job, body)
        finished = reconcile.job_finished(job) or done_before or failed_spec
        for obj in render(
            exp,
            owner,
            namespace,
            finished=finished,
            admitted=admitted,
            images=images,
            usage=usage,
            config=config,
        ):
            kind = obj["kind"]
            if kind in _CREATE_ONLY:
                self.children.create(obj)
            elif kind != "Job":
                self.children.apply(obj)
            elif failed_spec:
                continue
            elif job is None:
                if needs_spec and progress is None:  # its ConfigMap was made just now
                    progress = self.env_specs.ensure(exp, namespace, owner, images, now_rfc3339())
                    if progress.failed is not None:
                        continue
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
        return progress

    def config_text(self, exp: Experiment, namespace: str) -> str | None:
        """The ``config.yaml`` the Experiment's ConfigMap holds now, or None."""
        config = self.children.read("ConfigMap", namespace, names(exp.metadata.name).config)
        text = ((config or {}).get("data") or {}).get("config.yaml")
        return text if isinstance(text, str) else None

    def adopt_earlier_job(self, exp: Experiment, namespace: str, seen: Observed) -> Observed:
        """Records this release's hash beside the earlier one on a learner Job that an
        earlier release made when it runs ``exp``
        (:func:`~seedrl.service.operator.reconcile.job_runs_config`), so that an operator
        upgrade replaces no learner, nor a rollback; ``seen`` as it is then."""
        job = seen.job
        if job is None or reconcile.job_finished(job) or reconcile.job_current(exp, job):
            return seen
        if not reconcile.job_runs_config(exp, job, self.config_text(exp, namespace)):
            return seen
        name = job["metadata"]["name"]
        wanted = learner_hash(exp)
        self.children.merge(
            "Job", namespace, name, {"metadata": {"annotations": {ANNOTATION_ADOPTED_HASH: wanted}}}
        )
        log.info(
            "Experiment %s/%s: learner Job %s of an earlier release runs this spec: kept",
            namespace,
            exp.metadata.name,
            name,
        )
        return dataclasses.replace(seen, job=self.children.read("Job", namespace, name))

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
        name = job["metadata"]["name"]
        if self._delete_job(namespace, job, "Foreground"):
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

    def stop_learner(
        self,
        exp: Experiment,
        namespace: str,
        job: Mapping[str, Any],
        body: Mapping[str, Any] | None,
    ) -> None:
        """Deletes a learner Job whose env spec could not be derived: its pod waits for a
        spec that will never come (the Experiment fails with the env-spec Job's reason)."""
        name = job["metadata"]["name"]
        if self._delete_job(namespace, job, "Background") and body is not None:
            self.children.event(
                body,
                "Warning",
                "EnvSpecFailed",
                f"The env spec could not be derived: learner Job {name} is deleted.",
            )

    def _delete_job(self, namespace: str, job: Mapping[str, Any], propagation: str) -> bool:
        """Deletes a learner Job unless it is already on its way out; True if this did."""
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return self.children.delete("Job", namespace, job["metadata"]["name"], propagation)

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
        limited: str | None = None,
        env_spec: EnvSpecProgress | None = None,
        held: str | None = None,
    ) -> dict:
        """The status to write, from what the children and the learner say now
        (``forbidden``: the API server's refusal of a call applying the children;
        ``limited``: why fewer actors run than asked; ``env_spec``: where the env spec of a
        learner not started yet stands; ``held``: why the run volume may not be used)."""
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
        learner_pods = _learner_pods(pods)
        self.release_stranded(body, namespace, learner_pods)
        queue_message = self.queue_message(exp, namespace, job)
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
            limited=limited,
            queue_message=queue_message,
            env_spec=env_spec,
            held=held,
        )
        report = self.price(exp, namespace, body.get("status") or {}, status, pods)
        self.config.metrics.observe(
            exp.metadata.name, namespace, body["metadata"].get("uid"), status.get("phase"), report
        )
        return status

    def release_stranded(
        self, body: Mapping[str, Any], namespace: str, learner_pods: list[dict]
    ) -> None:
        """Finishes the deletion of learner pods stranded on a lost node
        (:func:`~seedrl.service.operator.reconcile.stranded_pods`: Terminating
        ``stranded_seconds`` past their grace, their kubelet silent) as the pod garbage
        collector would for a node out of service: Failed with condition DisruptionTarget,
        then deleted. The learner Job then makes its replacement, without counting a failure,
        instead of waiting until someone deletes the node. A learner that still runs on a
        partitioned node is refused at its next checkpoint (another learner published since:
        CheckpointConflict), and its kubelet kills it once it finds the pod gone."""
        now = datetime.datetime.now(datetime.timezone.utc)
        for pod in reconcile.stranded_pods(learner_pods, now, self.config.stranded_seconds):
            meta = pod["metadata"]
            node = pod["spec"]["nodeName"]
            message = (
                f"Learner pod {meta['name']} was still Terminating "
                f"{self.config.stranded_seconds:g} s after its grace period on node {node}, "
                f"whose kubelet no longer answers: marked Failed and deleted so that its Job "
                f"replaces it (not counted against spec.backoffLimit)."
            )
            if self.children.fail_pod(namespace, meta["name"], meta["uid"], "NodeLost", message):
                log.warning("Experiment %s/%s: %s", namespace, body["metadata"]["name"], message)
                self.children.event(body, "Warning", "LearnerNodeLost", message)

    def queue_message(
        self, exp: Experiment, namespace: str, job: Mapping[str, Any] | None
    ) -> str | None:
        """Kueue's reason the learner Job waits (:func:`reconcile.workload_pending`), read
        only while it does; None otherwise, or when the Workloads cannot be read (logged: the
        status still says the learner is queued)."""
        if job is None or exp.spec.suspend or reconcile.admitted(exp, job):
            return None
        try:
            workloads = self.children.workloads(namespace, job["metadata"]["uid"])
        except kubernetes.client.ApiException as exc:
            log.warning(
                "Experiment %s/%s: cannot read its Kueue Workload: %s",
                namespace,
                exp.metadata.name,
                exc,
            )
            return None
        return reconcile.workload_pending(workloads)

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
        self,
        body: Mapping[str, Any],
        heal_only: bool = False,
        seen: Observed | None = None,
        confirm: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> dict:
        """Validates, applies (unless refused) and returns the status to write.

        Args:
          body: the Experiment as stored.
          heal_only: from the :class:`~seedrl.service.operator.poller.Poller` (each
            ``poll_seconds``, or at once after a learner Job or learner pod event): apply only
            when a child is missing, the actors must change because the learner finished or
            was admitted, or the learner Job must be replaced or suspended; a spec change is
            the change handlers' business.
          seen: the children as the watches last delivered them (the poller's
            :class:`~seedrl.service.operator.watch_cache.ChildCache`); None reads them from
            the API server.
          confirm: with ``body`` from a cache, reads the Experiment afresh (None: gone); called
            before anything is made or changed, and the Experiment is reconciled as read
            instead where it differs, so that a cache that missed a deletion or an edit
            never heals a dead or outdated Experiment.

        Raises:
          ExperimentGone: ``confirm`` found no Experiment.
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
        if not heal_only:
            self._announce_retired(body)
        limited = reconcile.actors_limited(body, exp)
        if limited:
            self._announce_limited(body, limited)
        applied = previous.get("appliedImmutable")
        refused = reconcile.immutable_changes(applied, exp) if applied else []
        forbidden = held = None
        progress = None
        if not refused:
            seen = self.adopt_earlier_job(exp, namespace, seen or self.observe(exp, namespace))
            done_before = reconcile.finished_before(previous)
            progress = self.env_spec_progress(exp, namespace, seen, done_before, meta["uid"])
            if (
                not heal_only
                or (progress is not None and progress.actionable)
                or self._needs_healing(exp, namespace, seen, done_before, previous, meta["uid"])
            ):
                if confirm is not None:
                    fresh = confirm()
                    if fresh is None:
                        raise ExperimentGone(f"{namespace}/{meta['name']}")
                    if fresh["metadata"].get("resourceVersion") != meta.get("resourceVersion"):
                        return self.reconcile(fresh, heal_only)
                try:
                    if needs_run_volume(exp):
                        owner = owner_reference(exp.metadata.name, meta["uid"])
                        held = self.run_volumes.check(exp, namespace, owner, body)
                    if held is None:
                        progress = self.apply(
                            exp, namespace, meta["uid"], seen.job, done_before, body
                        )
                except kubernetes.client.ApiException as exc:
                    if exc.status != 403:
                        raise
                    # Retrying would only be refused again: say so where the user looks.
                    forbidden = _api_message(exc)
                    self._announce_forbidden(body, forbidden)
                seen = self.observe(exp, namespace)
        else:
            seen = seen or self.observe(exp, namespace)
            if self.scale_and_suspend(exp, namespace, seen, previous):
                seen = self.observe(exp, namespace)
        return self.status(exp, namespace, body, refused, seen, forbidden, limited, progress, held)

    def env_spec_progress(
        self, exp: Experiment, namespace: str, seen: Observed, done_before: bool, uid: str = ""
    ) -> EnvSpecProgress | None:
        """Where the env spec stands (as read) while a learner is to be made or its pod has not
        started (it waits for the spec to mount); None when no learner needs it now."""
        job = seen.job
        if done_before or (
            job is not None
            and (
                reconcile.job_finished(job)
                or not reconcile.reads_derived_env_spec(job)
                or reconcile.learner_started(_learner_pods(seen.pods))
                or int(((job.get("status") or {}).get("ready")) or 0) >= 1
                # Suspended or queued, its pod is not there to wait: the spec is copied once
                # it is unsuspended (a Job event wakes the poller then).
                or bool((job.get("spec") or {}).get("suspend"))
            )
        ):
            return None
        cached = (seen.env_spec_job, seen.pods or []) if seen.cached else None
        return self.env_specs.progress(exp, namespace, now_rfc3339(), uid, cached)

    def scale_and_suspend(
        self, exp: Experiment, namespace: str, seen: Observed, previous: Mapping[str, Any]
    ) -> bool:
        """While an edit of an immutable field is refused the children keep the spec they were
        made from, but a suspend, a resume and a scale still reach them: none changes what the
        checkpoints are bound to, and an edit nobody can apply must not freeze the run (an
        operator upgrade that misread a spec once did). Not the count of an agent whose
        learner knows it (R2D2's exploration): that needs a new learner. True when something
        was patched."""
        job, deployment = seen.job, seen.deployment
        changed = False
        if job is not None and not reconcile.job_finished(job):
            patch = (_job_patch(exp, job, usage_now(previous, job, now_rfc3339())) or {}).get(
                "spec"
            ) or {}
            patch = {k: v for k, v in patch.items() if k in ("suspend", "activeDeadlineSeconds")}
            if patch:
                self.children.merge("Job", namespace, job["metadata"]["name"], {"spec": patch})
                changed = True
        if deployment is not None:
            finished = reconcile.job_finished(job) or reconcile.finished_before(previous)
            wanted = actor_replicas(exp, finished, reconcile.admitted(exp, job))
            current = (deployment.get("spec") or {}).get("replicas")
            if exp.spec.agent.name == "r2d2" and wanted and current:
                wanted = current
            if current != wanted:
                name = deployment["metadata"]["name"]
                self.children.merge("Deployment", namespace, name, {"spec": {"replicas": wanted}})
                changed = True
        return changed

    def _announce_retired(self, body: Mapping[str, Any]) -> None:
        """Posts a Warning Event naming the spec's retired fields and how they were read, at
        each change handler's run (creation, an edit, the operator's start), not at polls."""
        notes = reconcile.retired_fields(body)
        if notes:
            self.children.event(
                body,
                "Warning",
                "DeprecatedField",
                "; ".join(notes) + ". Write the new fields: the next API version drops these.",
            )

    def _announce_limited(self, body: Mapping[str, Any], message: str) -> None:
        """Posts a Warning Event when the actors become limited, or limited otherwise."""
        before = condition(body.get("status") or {}, "ActorsLimited") or {}
        if before.get("status") != "True" or before.get("message") != message:
            self.children.event(body, "Warning", "ActorsLimited", message)

    def _announce_forbidden(self, body: Mapping[str, Any], message: str) -> None:
        """Logs a refused call and posts a Warning Event, once per new refusal."""
        before = condition(body.get("status") or {}, "SpecApplied") or {}
        meta = body["metadata"]
        log.error("Experiment %s/%s: %s", meta["namespace"], meta["name"], message)
        if before.get("reason") != "Forbidden" or message not in (before.get("message") or ""):
            self.children.event(body, "Warning", "Forbidden", message)

    def _needs_healing(
        self,
        exp: Experiment,
        namespace: str,
        seen: Observed,
        done_before: bool,
        previous: Mapping[str, Any],
        uid: str,
    ) -> bool:
        job, deployment = seen.job, seen.deployment
        if (job is None and not done_before) or deployment is None:
            return True
        if reconcile.job_outdated(exp, job):
            return True
        if self._children_missing(exp, namespace, uid):
            return True
        wanted = actor_replicas(
            exp, reconcile.job_finished(job) or done_before, reconcile.admitted(exp, job)
        )
        return (deployment.get("spec") or {}).get("replicas") != wanted or (
            job is not None
            and _job_patch(exp, job, usage_now(previous, job, now_rfc3339())) is not None
        )

    def _children_missing(self, exp: Experiment, namespace: str, uid: str) -> bool:
        """Whether a child no watch delivers (the ConfigMap, Service, NetworkPolicy,
        PodDisruptionBudget, run volume) is missing, or the learner's certificate Secrets
        need the operator.

        Each lookup is a request per Experiment, and at every poll they were most of an idle
        operator's requests to the API server: the children are looked up at most every
        ``resync_seconds`` per Experiment (one deleted by hand comes back within that), the
        Secrets at every poll only until the Experiment owns them."""
        now = time.monotonic()
        if uid not in self._secrets_owned:
            if self.certificates.secrets_unowned(exp, namespace, uid):
                return True
            self._secrets_owned.add(uid)
        if now - self._looked_up.get(uid, -math.inf) < self.config.resync_seconds:
            return False
        n = names(exp.metadata.name)
        children = [
            ("ConfigMap", n.config),
            ("Service", n.service),
            ("NetworkPolicy", n.network_policy),
            ("PodDisruptionBudget", n.disruption_budget),
        ]
        if needs_run_volume(exp):
            children.append(("PersistentVolumeClaim", run_volume_claim(exp)))
        if any(self.children.read(kind, namespace, name) is None for kind, name in children):
            return True
        if self.certificates.secrets_unowned(exp, namespace, uid):
            return True
        self._looked_up[uid] = now
        return False

    def forget(self, body: Mapping[str, Any]) -> None:
        """Drops the series of an Experiment that is gone (its children are the garbage
        collector's: they carry owner references)."""
        uid = body["metadata"].get("uid")
        self.config.metrics.forget(body["metadata"]["name"], body["metadata"]["namespace"], uid)
        self._looked_up.pop(uid, None)
        self._secrets_owned.discard(uid)
        self.env_specs.forget(uid)


def _learner_pods(pods: list[dict] | None) -> list[dict]:
    """The learner's pods among an Experiment's (none when they were not looked at)."""
    return [
        p for p in pods or [] if (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == "learner"
    ]


def _api_message(exc: kubernetes.client.ApiException) -> str:
    """The API server's message of a refused call (its Status body), else the reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


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
