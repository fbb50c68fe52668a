"""What the operator decides about an Experiment, as pure functions: whether its spec is valid
and which immutable fields an edit changed, what state its learner Job and pods are in (finished,
outdated, admitted by Kueue, started, unschedulable, failed and why), where the learner's
status is read, and which image defaults it keeps.

The objects it becomes are rendered by :mod:`seedrl.service.operator.render`, its status is
derived by :mod:`seedrl.service.operator.status`; the operator
(:mod:`seedrl.service.operator.handlers`) only fetches, applies and patches. Every decision lives
in these modules, where tests can reach it without a cluster.
"""

from __future__ import annotations

import datetime

from typing import Any, Mapping

from seedrl.common import resume
from seedrl.common.config import (
    API_VERSION,
    KIND,
    ConfigError,
    Experiment,
    ImageDefaults,
    parse_experiment,
    to_document,
)
from seedrl.common.config.retired import fill_absent, upgrade_spec
from seedrl.common.exit_codes import ExitCode
from seedrl.common.exit_codes import describe as describe_exit
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.operator.render.common import (
    ANNOTATION_ADOPTED_HASH,
    ANNOTATION_LEARNER_HASH,
    ENV_SPEC_CONTAINER,
    ENV_SPEC_VOLUME,
    LABEL_ROLE,
    names,
)
from seedrl.service.operator.render.config_map import read_config
from seedrl.service.operator.render.learner_job import (
    earlier_learner_hash,
    learner_document,
    learner_hash,
    legacy_learner_hash,
)


#: Annotation prefixes of tools, not of the user: left out of the config the pods read.
BOOKKEEPING_ANNOTATIONS = ("kubectl.kubernetes.io/", "kopf.zalando.org/", "seedrl.dev/")


#: The longest Experiment name whose children's names stay valid (``-learner`` is the longest
#: suffix and Service names are DNS labels of at most 63 characters).
MAX_NAME_LENGTH = 63 - len("-learner")


def validate(body: Mapping[str, Any]) -> Experiment:
    """Parses an Experiment object as the API server stored it.

    Server-side fields (uid, resourceVersion, status, ...) are dropped first; the namespace is
    the object's own. An actor count past what the learner serves is capped, not refused
    (:func:`_within_learner_limits`). The spec is read as :func:`stored_spec` reads it: with
    the meaning of the release that first ran it.

    Raises:
      ConfigError: naming each bad field, as ``seedrl validate`` would, plus cluster rules.
    """
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", KIND),
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "labels", "annotations")
            if meta.get(k) is not None
        },
        "spec": stored_spec(body),
    }
    # Bookkeeping of kubectl (its last-applied copy) and of the operator's kopf (progress,
    # last-handled spec) says nothing about the experiment; kept, it would change the pods'
    # config at every handler run and roll the actors for nothing.
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(BOOKKEEPING_ANNOTATIONS)
    }
    if annotations:
        document["metadata"]["annotations"] = annotations
    else:
        document["metadata"].pop("annotations", None)
    try:
        exp = parse_experiment(document)
    except ConfigError as exc:
        exp = _within_learner_limits(document, exc)
    if len(exp.metadata.name) > MAX_NAME_LENGTH:
        raise ConfigError(
            [
                (
                    "metadata.name",
                    f"must be at most {MAX_NAME_LENGTH} characters "
                    f"in a cluster (children add -learner), got "
                    f"{len(exp.metadata.name)}",
                )
            ]
        )
    return exp


def stored_spec(body: Mapping[str, Any]) -> dict[str, Any]:
    """An Experiment's spec with the meaning of the release that first ran it: fields an
    earlier release retired rewritten as this release's
    (:func:`~seedrl.common.config.retired.upgrade_spec`), and, in the sections its checkpoints
    are bound to (which cannot change), every field the spec leaves out at the value that
    release resolved and recorded in ``status.appliedImmutable``: a default changed since
    (R2D2's sequence length) neither changes a running Experiment nor refuses it."""
    spec, _ = upgrade_spec(body.get("spec") or {})
    applied = (body.get("status") or {}).get("appliedImmutable")
    if isinstance(applied, Mapping):
        applied, _ = upgrade_spec(applied)
        for key in resume.BOUND_SECTIONS:
            if isinstance(spec.get(key), Mapping) and isinstance(applied.get(key), Mapping):
                spec[key] = fill_absent(spec[key], applied[key])
    return spec


def retired_fields(body: Mapping[str, Any]) -> list[str]:
    """What :func:`stored_spec` rewrote of the spec's retired fields (``path: how``), for a
    Warning: the user's copy should say it the new way."""
    return upgrade_spec(body.get("spec") or {})[1]


#: The rules an actor count past what the learner serves breaks (replicas x envsPerActor, and
#: x streamsPerActor): :func:`validate` caps the count instead of refusing the Experiment.
REPLICA_LIMITS = ("spec.learner.maxTotalEnvs", "spec.learner.maxStreams")


def most_actors(exp: Experiment) -> int:
    """The most actors the learner serves: ``spec.learner.maxTotalEnvs / envsPerActor`` and
    ``maxStreams / streamsPerActor`` (a stream has at least one env), rounded down."""
    actors, learner = exp.spec.actors, exp.spec.learner
    streams = min(actors.streams_per_actor, actors.envs_per_actor)
    return min(learner.max_total_envs // actors.envs_per_actor, learner.max_streams // streams)


def _within_learner_limits(document: dict[str, Any], exc: ConfigError) -> Experiment:
    """The Experiment of ``document`` with ``spec.actors.replicas`` capped at
    :func:`most_actors`, when the count is all that ``exc`` refused it for.

    The count is the scale subresource's (``kubectl scale``, a HorizontalPodAutoscaler), whose
    writers know nothing of the learner's limits: refusing it would fail a running Experiment
    while its learner trains on. Capped, the actors run at the most the learner serves and the
    status says so (:func:`actors_limited`, condition ActorsLimited). Anything else invalid,
    or an Experiment whose learner serves not even one actor, raises ``exc``.
    """
    if not exc.problems or any(path not in REPLICA_LIMITS for path, _ in exc.problems):
        raise exc
    spec = dict(document.get("spec") or {})
    try:
        one = parse_experiment({**document, "spec": {**spec, "actors": _replicas(spec, 1)}})
    except ConfigError:
        raise exc from None
    most = most_actors(one)
    if most < 1:
        raise exc
    return parse_experiment({**document, "spec": {**spec, "actors": _replicas(spec, most)}})


def _replicas(spec: Mapping[str, Any], count: int) -> dict[str, Any]:
    return {**(spec.get("actors") or {}), "replicas": count}


def actors_limited(body: Mapping[str, Any], exp: Experiment) -> str | None:
    """Why the Experiment runs fewer actors than its ``spec.actors.replicas`` asks (capped
    by :func:`validate` at what the learner serves), or None when it runs them all."""
    asked = ((body.get("spec") or {}).get("actors") or {}).get("replicas")
    running = exp.spec.actors.replicas
    if not isinstance(asked, int) or asked <= running:
        return None
    actors, learner = exp.spec.actors, exp.spec.learner
    return (
        f"spec.actors.replicas is {asked}, more than the learner serves: {running} actors run "
        f"(spec.learner.maxTotalEnvs {learner.max_total_envs} / envsPerActor "
        f"{actors.envs_per_actor}, spec.learner.maxStreams {learner.max_streams} / "
        f"streamsPerActor {actors.streams_per_actor}); raise those to run more."
    )


def immutable_part(exp: Experiment) -> dict[str, Any]:
    """The part of the spec that may not change once the children exist: the sections its
    checkpoints are bound to (:mod:`seedrl.common.resume`)."""
    return resume.bound_part(to_document(exp.spec))


def immutable_changes(applied: Mapping[str, Any], exp: Experiment) -> list[str]:
    """Dotted paths (``spec.env.id``) where ``exp`` differs from the applied immutable part
    (a section the applied part does not record is not compared)."""
    return resume.bound_changes(
        applied, to_document(exp.spec), [key for key in resume.BOUND_SECTIONS if key in applied]
    )


def admitted(exp: Experiment, job: Mapping[str, Any] | None) -> bool:
    """Whether a queued Experiment's learner is admitted: Kueue admits a Job by unsuspending
    it. An Experiment without ``spec.queueName`` needs no admission."""
    if not exp.spec.queue_name:
        return True
    return job is not None and not bool((job.get("spec") or {}).get("suspend"))


def workload_pending(workloads: list[Mapping[str, Any]]) -> str | None:
    """Kueue's reason a queued Job's Workload is not admitted: the message of its
    QuotaReserved condition while that is False (Kueue v0.17: "couldn't assign flavors to pod
    set main: insufficient quota for cpu in flavor default, previously considered podsets
    requests (0) + current podset request (2) > maximum capacity (1)"), or None when there is
    no Workload or no such condition yet."""
    for workload in workloads:
        for cond in (workload.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "QuotaReserved" and cond.get("status") == "False":
                return str(cond.get("message") or cond.get("reason") or "") or None
    return None


def finished_before(previous_status: Mapping[str, Any] | None) -> bool:
    """Whether the status already records a finished learner (Succeeded, or Failed at run time
    rather than by validation). Its Job may since be gone (``ttlSecondsAfterFinished``); it is
    not made again: a finished experiment stays finished."""
    prev = previous_status or {}
    return prev.get("phase") in ("Succeeded", "Failed") and bool(prev.get("completionTime"))


def job_finished(job: Mapping[str, Any] | None) -> bool:
    """Whether the learner Job has completed or failed for good."""
    return bool(job_condition(job, "Complete") or job_condition(job, "Failed"))


def job_condition(job: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The Job's condition of that type when it is True, or None."""
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def job_hash(job: Mapping[str, Any] | None) -> str | None:
    """The :func:`learner_hash` a learner Job was made with (its annotation), or None."""
    return (((job or {}).get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_LEARNER_HASH
    )


def job_current(exp: Experiment, job: Mapping[str, Any] | None) -> bool:
    """Whether a learner Job runs ``exp``: its hash is :func:`learner_hash`, or the
    :func:`legacy_learner_hash` of an earlier release's operator (whose annotation the
    operator then rewrites), or it was kept from an earlier release
    (:func:`job_runs_config`) for what ``exp`` is now."""
    if job_hash(job) in (learner_hash(exp), legacy_learner_hash(exp)):
        return True
    adopted = (((job or {}).get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_ADOPTED_HASH
    )
    return adopted is not None and adopted == learner_hash(exp)


def job_runs_config(exp: Experiment, job: Mapping[str, Any] | None, config: str | None) -> bool:
    """Whether a learner Job an earlier release made runs ``exp``, judged by what it was
    given: its hash is the one that release computed for ``config`` (the ConfigMap's
    ``config.yaml``, which it wrote with the Job), and ``config`` read by this release (fields
    retired since rewritten, fields added since at their defaults) asks the learner for what
    ``exp`` does. An upgrade that adds fields, or renames them, thus keeps the Job; the
    operator then records this release's hash beside the earlier one
    (:data:`~seedrl.service.operator.render.common.ANNOTATION_ADOPTED_HASH`)."""
    if job is None or config is None:
        return False
    docs = read_config(config)
    if docs is None:
        return False
    written, read = docs
    if job_hash(job) != earlier_learner_hash(written):
        return False
    try:
        then = parse_experiment(read)
    except ConfigError:
        return False
    # As data, not digests: a float field's default may be an int (0) here and a float (0.0)
    # when read back from YAML.
    return learner_document(then) == learner_document(exp)


def job_outdated(exp: Experiment, job: Mapping[str, Any] | None) -> bool:
    """Whether a learner Job that has not finished runs another spec than ``exp`` (see
    :func:`job_current`): it is then replaced. A finished one is left as it is."""
    return job is not None and not job_finished(job) and not job_current(exp, job)


def reads_derived_env_spec(job: Mapping[str, Any] | None) -> bool:
    """Whether a learner Job's pod mounts its env spec from the env-spec Job's ConfigMap (this
    release's Jobs) rather than deriving it in an init container (earlier releases')."""
    template = (((job or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    volumes = template.get("volumes") or []
    return any("configMap" in v for v in volumes if v.get("name") == ENV_SPEC_VOLUME)


def learner_started(pods: list[Mapping[str, Any]] | tuple) -> bool:
    """Whether a learner container runs in one of ``pods`` (the learner's) that is not being
    deleted: the learner imports TensorFlow, restores and trains before and after its pod is
    ready (ready: serving and not finished), and a short run can end before the first
    readiness probe."""
    return any(
        "running" in _learner_state(pod)
        for pod in pods
        if not (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def stranded_pods(
    pods: list[Mapping[str, Any]] | tuple, now: datetime.datetime, after_seconds: float
) -> list[Mapping[str, Any]]:
    """The pods of ``pods`` that are being deleted on a node whose kubelet no longer acts:
    bound to a node, not finished, and still there ``after_seconds`` past their
    ``deletionTimestamp`` (the time by which their grace period ends). A kubelet that is up
    stops a pod by then (SIGKILL at the end of the grace); one on a NotReady or unreachable
    node never does, and the pod stays Terminating until the node is deleted or tainted out of
    service, which a learner Job (``podReplacementPolicy: Failed``) waits for before it makes
    the replacement."""
    out = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        deleting = meta.get("deletionTimestamp")
        if not deleting or not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            continue
        try:
            due = datetime.datetime.fromisoformat(deleting.replace("Z", "+00:00"))
        except ValueError:
            continue
        if (now - due).total_seconds() >= after_seconds:
            out.append(pod)
    return out


def learner_unschedulable(pods: list[Mapping[str, Any]] | tuple) -> str | None:
    """The scheduler's message when a learner pod that is not being deleted waits with
    condition PodScheduled=False, reason Unschedulable (no node fits: labels, taints,
    capacity, a TPU topology no node pool has); None otherwise."""
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("spec") or {}).get(
            "nodeName"
        ):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                return str(cond.get("message") or "no node fits it")
    return None


#: Waiting reasons of a container the kubelet cannot start as things stand: its image cannot
#: be pulled, or its spec refers to what is missing (a Secret, a ConfigMap key).
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def learner_stuck(pods: list[Mapping[str, Any]] | tuple) -> tuple[str, str] | None:
    """(reason, message) when a pod (the learner's, or the env-spec Job's) that is not being
    deleted has a container waiting for a reason in :data:`STUCK_REASONS`, as the kubelet
    reports it; None otherwise."""
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        for kind in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(kind) or []:
                waiting = (container.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in STUCK_REASONS:
                    message = waiting.get("message") or waiting["reason"]
                    return waiting["reason"], f"container {container.get('name')}: {message}"
    return None


def _learner_state(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The learner container's ``state`` in ``pod`` (empty when it has none yet)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == "learner":
            return status.get("state") or {}
    return {}


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    return _learner_state(pod).get("terminated")


def _env_spec_failed(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The terminated state of a pod's env-spec container, when it failed: the env-spec Job's
    container, or the learner pod's init container of releases before 0.2."""
    status = pod.get("status") or {}
    for kind in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(kind) or []:
            if container.get("name") == ENV_SPEC_CONTAINER:
                term = (container.get("state") or {}).get("terminated")
                if term and term.get("exitCode"):
                    return term
    return None


def final_learner_status(pods: list[Mapping[str, Any]] | tuple) -> LearnerStatus | None:
    """The final status the last stopped learner pod left in its termination message (the
    learner writes it there on the way out), or None when there is none to read."""
    ended = [(t, p) for p in pods if (t := _terminated(p)) is not None]
    if not ended:
        return None
    term, _ = max(ended, key=lambda tp: tp[0].get("finishedAt") or "")
    try:
        return LearnerStatus.from_json(term.get("message") or "")
    except ValueError:
        return None


def failure_reason(
    failed: Mapping[str, Any], pods: list[Mapping[str, Any]] | tuple = ()
) -> tuple[str, str]:
    """The reason and message of a failed learner Job's Experiment (or of its env-spec Job's,
    with that Job's pods).

    The reason names the cause when the last failed pod tells it: its exit code's reason
    (CheckpointLocationUnusable, InvalidConfiguration, ...) or the kubelet's (OOMKilled), else
    the Job's (BackoffLimitExceeded, DeadlineExceeded). The message is the Job's, then that
    pod's exit and the end of its log (``terminationMessagePolicy: FallbackToLogsOnError``).
    A pod whose env-spec container failed (the learner never ran) is told by that one.
    """
    reason = failed.get("reason") or "JobFailed"
    message = failed.get("message") or "The learner Job failed."
    ended = [
        (t, p)
        for p in pods
        if (p.get("status") or {}).get("phase") == "Failed"
        and (t := _terminated(p) or _env_spec_failed(p)) is not None
    ]
    if not ended:
        return reason, message
    term, pod = max(ended, key=lambda tp: tp[0].get("finishedAt") or "")
    code: Any = term.get("exitCode")
    try:
        known = ExitCode(code)
    except (ValueError, TypeError):
        known = None
    if term.get("reason") == "OOMKilled":
        reason = "OOMKilled"
    elif known is not None and known != ExitCode.OK:
        reason = known.reason
    # No learner exit: the env spec could not be derived, and the learner never ran.
    role = (pod["metadata"].get("labels") or {}).get(LABEL_ROLE) or "learner"
    which = f", init container {ENV_SPEC_CONTAINER}" if role == "learner" else ""
    if _terminated(pod) is not None:
        which = ""
    detail = f"{role} pod {pod['metadata']['name']}{which}: {describe_exit(code)}"
    if term.get("reason") not in (None, "Error", "Completed"):
        detail += f", reason {term['reason']}"
    last = (term.get("message") or "").strip()
    if last and final_learner_status([pod]) is None:  # the end of its log, not its status
        detail += f"; its last words: {last[-600:]}"
    return reason, f"{message} {detail}"


def learner_status_url(namespace: str, experiment_name: str, metrics_port: int) -> str:
    """The in-cluster URL of a learner's status endpoint (through its Service)."""
    return f"http://{names(experiment_name).service}.{namespace}.svc:{metrics_port}/status"


def image_defaults(
    previous_status: Mapping[str, Any] | None, operator: ImageDefaults
) -> ImageDefaults:
    """The image defaults of an Experiment: those its status recorded at its first
    reconcile (``status.images``), else the running operator's. An operator upgrade thus
    changes no running Experiment's images (a learner replaced after it still runs the
    actors' release), and both roles always come from one registry and release."""
    pinned = (previous_status or {}).get("images") or {}
    if isinstance(pinned, Mapping) and pinned.get("registry") and pinned.get("release"):
        return ImageDefaults(registry=str(pinned["registry"]), release=str(pinned["release"]))
    return operator
