"""What an Experiment becomes in a cluster, and what its status says: pure functions only.

:func:`render` turns a validated Experiment into the Kubernetes objects that run it:

- a ConfigMap holding the resolved Experiment (``config.yaml``), which both roles read;
- the learner: a Job with one pod (``completions: 1``), so that a learner that reaches its budget
  and exits 0 reads as Succeeded, and one that crashes is restarted in place (``restartPolicy:
  OnFailure``, up to ``spec.backoffLimit`` times) and resumes from its latest checkpoint. The
  pod keeps its node (a TPU host is slow to get back) and its scratch volume across restarts;
- a Service for the learner's gRPC and metrics ports;
- the actors: a Deployment of ``spec.actors.replicas`` pods (zero while suspended);
- a NetworkPolicy: only this experiment's actor pods may reach the learner's gRPC port; the
  metrics port (``GET /metrics`` for Prometheus, ``GET /status`` for the operator) is open to
  any pod, since it only serves read-only progress and Prometheus and the operator usually run
  in other namespaces.

:func:`compute_status` derives ``status`` (phase, Kubernetes-style conditions, progress) from
what the operator observed: the Job, the Deployment and the learner's ``/status`` JSON (a
:class:`seedrl.common.learner_status.LearnerStatus`). The operator (``service/operator/handlers.py``) only fetches, applies
and patches; every decision lives here, where tests can reach it without a cluster.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from typing import Any, Mapping

from seedrl.common.config import (
    API_VERSION,
    KIND,
    ConfigError,
    Experiment,
    dump_experiment,
    parse_experiment,
    tpu_chips,
    to_document,
)
from seedrl.common import resume
from seedrl.common.learner_status import LearnerStatus

CONFIG_DIR = "/etc/seedrl"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
RUN_DIR = "/var/run/seedrl"
#: UID/GID the containers run as (the images create this user; any non-root id works).
RUN_AS = 1000
MANAGED_BY = "seedrl-operator"
LABEL_EXPERIMENT = "seedrl.dev/experiment"
LABEL_ROLE = "seedrl.dev/role"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
ANNOTATION_CONFIG_HASH = "seedrl.dev/config-hash"
#: Annotation prefixes of tools, not of the user: left out of the config the pods read.
BOOKKEEPING_ANNOTATIONS = ("kubectl.kubernetes.io/", "kopf.zalando.org/", "seedrl.dev/")
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: GKE Spot VMs give 30 s of notice; an actor holds no state worth more than that.
SPOT_GRACE_SECONDS = 25


# --------------------------------------------------------------------------------------------
# Names and labels
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Names:
    """The names of an Experiment's children (all in the Experiment's namespace)."""

    config: str
    learner: str
    service: str
    actors: str
    network_policy: str


def names(experiment_name: str) -> Names:
    """Children's names: ``<name>-config``, ``<name>-learner`` (Job, Service, NetworkPolicy),
    ``<name>-actors``. Experiment names are DNS labels of at most 63 characters; the suffixes
    keep Service names (limit 63) valid up to a 55-character Experiment name, which validation
    of the operator enforces through :func:`validate`."""
    return Names(config=f"{experiment_name}-config", learner=f"{experiment_name}-learner",
                 service=f"{experiment_name}-learner", actors=f"{experiment_name}-actors",
                 network_policy=f"{experiment_name}-learner")


def selector_labels(experiment_name: str, role: str) -> dict[str, str]:
    """The labels that select one role's pods (stable: they are in immutable selectors)."""
    return {LABEL_EXPERIMENT: experiment_name, LABEL_ROLE: role}


def _labels(exp: Experiment, role: str | None = None) -> dict[str, str]:
    out = dict(exp.metadata.labels)
    out.update({"app.kubernetes.io/name": "seedrl",
                "app.kubernetes.io/instance": exp.metadata.name,
                "app.kubernetes.io/managed-by": MANAGED_BY,
                LABEL_EXPERIMENT: exp.metadata.name})
    if role:
        out.update({"app.kubernetes.io/component": role, LABEL_ROLE: role})
    return out


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The reference that makes an Experiment own (and garbage-collect) a child."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


# --------------------------------------------------------------------------------------------
# Validation as the operator sees it
# --------------------------------------------------------------------------------------------

#: The longest Experiment name whose children's names stay valid (``-learner`` is the longest
#: suffix and Service names are DNS labels of at most 63 characters).
MAX_NAME_LENGTH = 63 - len("-learner")


def validate(body: Mapping[str, Any]) -> Experiment:
    """Parses an Experiment object as the API server stored it.

    Server-side fields (uid, resourceVersion, status, ...) are dropped first; the namespace is
    the object's own.

    Raises:
      ConfigError: naming each bad field, as ``seedrl validate`` would, plus cluster rules.
    """
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", KIND),
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations")
                     if meta.get(k) is not None},
        "spec": body.get("spec") or {},
    }
    # Bookkeeping of kubectl (its last-applied copy) and of the operator's kopf (progress,
    # last-handled spec) says nothing about the experiment; kept, it would change the pods'
    # config at every handler run and roll the actors for nothing.
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not k.startswith(BOOKKEEPING_ANNOTATIONS)}
    if annotations:
        document["metadata"]["annotations"] = annotations
    else:
        document["metadata"].pop("annotations", None)
    exp = parse_experiment(document)
    if len(exp.metadata.name) > MAX_NAME_LENGTH:
        raise ConfigError([("metadata.name", f"must be at most {MAX_NAME_LENGTH} characters "
                                             f"in a cluster (children add -learner), got "
                                             f"{len(exp.metadata.name)}")])
    return exp


def immutable_part(exp: Experiment) -> dict[str, Any]:
    """The part of the spec that may not change once the children exist: the sections its
    checkpoints are bound to (:mod:`seedrl.common.resume`)."""
    return resume.bound_part(to_document(exp.spec))


def immutable_changes(applied: Mapping[str, Any], exp: Experiment) -> list[str]:
    """Dotted paths (``spec.env.id``) where ``exp`` differs from the applied immutable part
    (a section the applied part does not record is not compared)."""
    return resume.bound_changes(applied, to_document(exp.spec),
                                [key for key in resume.BOUND_SECTIONS if key in applied])


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def config_text(exp: Experiment) -> str:
    """The resolved Experiment the pods read, every default filled in."""
    return dump_experiment(exp)


def config_hash(exp: Experiment) -> str:
    """A short digest of the resolved Experiment; in the actors' pod template, so that a
    changed config rolls the actors (the learner reads it at its next start)."""
    return hashlib.sha256(config_text(exp).encode()).hexdigest()[:16]


def _security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod_security_context() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS, "seccompProfile": {"type": "RuntimeDefault"}}


def _resources(res, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": res.cpu, "memory": res.memory}
    limits: dict[str, Any] = {"memory": res.memory}
    if res.cpu_limit:
        limits["cpu"] = res.cpu_limit
    if res.ephemeral_storage:
        requests["ephemeral-storage"] = limits["ephemeral-storage"] = res.ephemeral_storage
    for key, value in (extra or {}).items():
        requests[key] = limits[key] = value
    return {"requests": requests, "limits": limits}


def _volumes(exp: Experiment) -> list[dict[str, Any]]:
    n = names(exp.metadata.name)
    return [{"name": "config", "configMap": {"name": n.config}},
            {"name": "run", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}}]


def _mounts() -> list[dict[str, Any]]:
    return [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
            {"name": "tmp", "mountPath": "/tmp"}]


def _env(exp: Experiment) -> list[dict[str, Any]]:
    return [{"name": "SEEDRL_EXPERIMENT", "value": exp.metadata.name},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            # The root filesystem is read-only: caches (TensorFlow, matplotlib) go to /tmp.
            {"name": "HOME", "value": "/tmp"},
            {"name": "PYTHONUNBUFFERED", "value": "1"}]


def _accelerator(exp: Experiment) -> tuple[dict[str, str], list[dict[str, Any]], dict[str, Any]]:
    """Node selector, tolerations and extra resources for the learner's accelerator."""
    acc = exp.spec.learner.accelerator
    if acc.kind == "tpu":
        return ({"cloud.google.com/gke-tpu-accelerator": acc.tpu.type,
                 "cloud.google.com/gke-tpu-topology": acc.tpu.topology},
                [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                {TPU_RESOURCE: str(tpu_chips(acc.tpu.topology))})
    if acc.kind == "gpu":
        return ({"cloud.google.com/gke-accelerator": acc.gpu.type},
                [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                {GPU_RESOURCE: str(acc.gpu.count)})
    return {}, [], {}


def _pod_spec(exp: Experiment, container: dict[str, Any], restart_policy: str,
              grace_seconds: int) -> dict[str, Any]:
    """What every seedrl pod has: one locked-down container, no API token, no service links."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace_seconds,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": _pod_security_context(),
        "containers": [container],
        "volumes": _volumes(exp),
    }
    if exp.spec.service_account_name:
        pod_spec["serviceAccountName"] = exp.spec.service_account_name
    return pod_spec


def _meta(exp: Experiment, name: str, role: str | None, owner: Mapping[str, Any] | None,
          namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(exp, role)}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def render_config_map(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The ConfigMap with the resolved Experiment."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(exp, names(exp.metadata.name).config, None, owner, namespace),
            "data": {"config.yaml": config_text(exp)}}


def render_service(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner's Service: gRPC for the actors, HTTP metrics/status."""
    learner = exp.spec.learner
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(exp, names(exp.metadata.name).service, "learner", owner,
                              namespace),
            "spec": {"type": "ClusterIP",
                     "selector": selector_labels(exp.metadata.name, "learner"),
                     "ports": [{"name": "grpc", "port": learner.port,
                                "targetPort": "grpc", "protocol": "TCP",
                                "appProtocol": "grpc"},
                               {"name": "metrics", "port": learner.metrics_port,
                                "targetPort": "metrics", "protocol": "TCP",
                                "appProtocol": "http"}]}}


def render_network_policy(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """Only this experiment's actors reach the learner's gRPC port; metrics are open."""
    learner = exp.spec.learner
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(exp, names(exp.metadata.name).network_policy, "learner", owner,
                              namespace),
            "spec": {"podSelector": {"matchLabels": selector_labels(exp.metadata.name,
                                                                    "learner")},
                     "policyTypes": ["Ingress"],
                     "ingress": [
                         {"from": [{"podSelector": {"matchLabels": selector_labels(
                             exp.metadata.name, "actor")}}],
                          "ports": [{"protocol": "TCP", "port": learner.port}]},
                         # Read-only progress for Prometheus and the operator, which run in
                         # namespaces this policy cannot know.
                         {"ports": [{"protocol": "TCP", "port": learner.metrics_port}]},
                     ]}}


def render_learner_job(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner: a Job of one pod that restarts in place and resumes from its checkpoint."""
    spec = exp.spec
    learner = spec.learner
    n = names(exp.metadata.name)
    node_selector, tolerations, extra = _accelerator(exp)
    container = {
        "name": "learner",
        "image": learner.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "seedrl.learner", "--config", CONFIG_FILE,
                    "--listen", f"[::]:{learner.port}", "--run-dir", RUN_DIR],
        "ports": [{"name": "grpc", "containerPort": learner.port, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": learner.metrics_port,
                   "protocol": "TCP"}],
        "env": _env(exp),
        "resources": _resources(learner.resources, extra),
        "volumeMounts": _mounts(),
        "securityContext": _security_context(),
        # Ready once it accepts streams; the learner restores its checkpoint before serving.
        "readinessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5,
                           "failureThreshold": 3},
    }
    pod_spec = _pod_spec(exp, container, "OnFailure", learner.termination_grace_period_seconds)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    job_spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": spec.backoff_limit,
        # Kueue admits a queued Job by unsuspending it, so a queued one starts suspended.
        "suspend": bool(spec.suspend or spec.queue_name),
        "template": {"metadata": {"labels": _labels(exp, "learner")}, "spec": pod_spec},
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    meta = _meta(exp, n.learner, "learner", owner, namespace)
    if spec.queue_name:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue_name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def actor_replicas(exp: Experiment, finished: bool = False) -> int:
    """Actor pods to run: none while suspended or once the learner Job has finished (they
    would only retry a learner that is gone)."""
    return 0 if exp.spec.suspend or finished else exp.spec.actors.replicas


def finished_before(previous_status: Mapping[str, Any] | None) -> bool:
    """Whether the status already records a finished learner (Succeeded, or Failed at run time
    rather than by validation). Its Job may since be gone (``ttlSecondsAfterFinished``); it is
    not made again: a finished experiment stays finished."""
    prev = previous_status or {}
    return prev.get("phase") in ("Succeeded", "Failed") and bool(prev.get("completionTime"))


def job_finished(job: Mapping[str, Any] | None) -> bool:
    """Whether the learner Job has completed or failed for good."""
    return bool(_job_condition(job, "Complete") or _job_condition(job, "Failed"))


def render_actors(exp: Experiment, owner=None, namespace=None,
                  finished: bool = False) -> dict[str, Any]:
    """The actors: a Deployment whose pods derive their index from their pod name."""
    spec = exp.spec
    actors = spec.actors
    n = names(exp.metadata.name)
    container = {
        "name": "actor",
        "image": actors.image,
        "imagePullPolicy": "IfNotPresent",
        # A Deployment's pods have no ordinal: `--index auto` hashes the pod name into
        # [0, replicas) (see actors/main.py). Actors reconnect to a restarted learner.
        "command": ["python", "-m", "seedrl.actors", "--config", CONFIG_FILE,
                    "--learner", f"{n.service}:{spec.learner.port}", "--index", "auto"],
        "ports": [{"name": "metrics", "containerPort": actors.metrics_port,
                   "protocol": "TCP"}],
        "env": _env(exp),
        "resources": _resources(actors.resources),
        "volumeMounts": _mounts(),
        "securityContext": _security_context(),
    }
    pod_spec = _pod_spec(exp, container, "Always", SPOT_GRACE_SECONDS if actors.spot else 30)
    if actors.spot:
        pod_spec["nodeSelector"] = {"cloud.google.com/gke-spot": "true"}
        pod_spec["tolerations"] = [{"key": "cloud.google.com/gke-spot", "operator": "Equal",
                                    "value": "true", "effect": "NoSchedule"}]
    template_meta = {"labels": _labels(exp, "actor"),
                     "annotations": {ANNOTATION_CONFIG_HASH: config_hash(exp)}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(exp, n.actors, "actor", owner, namespace),
            "spec": {"replicas": actor_replicas(exp, finished),
                     "selector": {"matchLabels": selector_labels(exp.metadata.name, "actor")},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": "25%",
                                                    "maxUnavailable": "25%"}},
                     "template": {"metadata": template_meta, "spec": pod_spec}}}


def render(exp: Experiment, owner: Mapping[str, Any] | None = None,
           namespace: str | None = None, finished: bool = False) -> list[dict[str, Any]]:
    """Every object that runs ``exp``, in the order to create them (config first).

    Args:
      exp: a validated Experiment.
      owner: an owner reference (see :func:`owner_reference`) put on every object.
      namespace: put in every object's metadata when given (else ``exp.metadata.namespace``).
      finished: the learner Job has completed or failed: no actors are rendered to run.
    """
    ns = namespace or exp.metadata.namespace
    return [render_config_map(exp, owner, ns), render_service(exp, owner, ns),
            render_network_policy(exp, owner, ns), render_learner_job(exp, owner, ns),
            render_actors(exp, owner, ns, finished)]


# --------------------------------------------------------------------------------------------
# The learner's status endpoint
# --------------------------------------------------------------------------------------------

def learner_status_url(namespace: str, experiment_name: str, metrics_port: int) -> str:
    """The in-cluster URL of a learner's status endpoint (through its Service)."""
    return (f"http://{names(experiment_name).service}.{namespace}.svc:{metrics_port}/status")


# --------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------

def now_rfc3339(now: datetime.datetime | None = None) -> str:
    """A Kubernetes timestamp (UTC, whole seconds)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], type_: str, status: bool | None,
                  reason: str, message: str, generation: int | None, now: str) -> None:
    """Sets one condition in place; ``lastTransitionTime`` moves only when status changes."""
    text = "Unknown" if status is None else ("True" if status else "False")
    for cond in conditions:
        if cond.get("type") == type_:
            if cond.get("status") != text:
                cond["lastTransitionTime"] = now
            cond.update(status=text, reason=reason, message=message)
            if generation is not None:
                cond["observedGeneration"] = generation
            return
    cond = {"type": type_, "status": text, "reason": reason, "message": message,
            "lastTransitionTime": now}
    if generation is not None:
        cond["observedGeneration"] = generation
    conditions.append(cond)


def condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of that type in a status, or None."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def _job_condition(job: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def invalid_status(previous: Mapping[str, Any] | None, generation: int | None,
                   error: ConfigError, now: str) -> dict[str, Any]:
    """Status of an Experiment whose spec does not validate: Failed / ValidationFailed."""
    conditions = [dict(c) for c in (previous or {}).get("conditions") or []]
    message = "; ".join(f"{path}: {reason}" for path, reason in error.problems)
    set_condition(conditions, "Valid", False, "ValidationFailed", message, generation, now)
    set_condition(conditions, "Ready", False, "ValidationFailed", message, generation, now)
    return {"phase": "Failed", "conditions": conditions, "observedGeneration": generation}


def compute_status(exp: Experiment, *, generation: int | None,
                   previous: Mapping[str, Any] | None,
                   job: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None,
                   learner: LearnerStatus | None, learner_error: str | None = None,
                   refused: list[str] | tuple[str, ...] = (),
                   now: str | None = None) -> dict[str, Any]:
    """The status of a valid Experiment from what was observed of its children.

    Args:
      exp: the validated Experiment.
      generation: its ``metadata.generation``, recorded as observedGeneration.
      previous: the status as stored (conditions keep their transition times).
      job, deployment: the learner Job and actor Deployment as read, or None if missing.
      learner: the learner's parsed /status, or None if it could not be read.
      learner_error: why it could not be read (for the Progressing condition's message).
      refused: paths of immutable fields whose change was refused (see
        :func:`immutable_changes`); the children then still run the spec they were made from.
      now: the timestamp for transitions.

    Returns:
      A status (the keys this function owns; cost is added by the operator).
    """
    now = now or now_rfc3339()
    prev = dict(previous or {})
    conditions = [dict(c) for c in prev.get("conditions") or []]
    set_condition(conditions, "Valid", True, "Validated", "The spec is valid.", generation, now)
    if refused:
        set_condition(conditions, "SpecApplied", False, "ImmutableFieldChanged",
                      f"{', '.join(refused)} cannot change once an experiment has started "
                      f"(its checkpoints belong to the old value); revert the change or "
                      f"create a new Experiment", generation, now)
    else:
        set_condition(conditions, "SpecApplied", True, "Applied",
                      "The children match the spec.", generation, now)
    job_status = (job or {}).get("status") or {}
    dep_status = (deployment or {}).get("status") or {}
    complete = _job_condition(job, "Complete")
    failed = _job_condition(job, "Failed")
    cleaned_up = job is None and finished_before(prev)
    desired = actor_replicas(exp, bool(complete or failed or cleaned_up))
    ready_actors = int(dep_status.get("readyReplicas") or 0)
    learner_ready = int(job_status.get("ready") or 0) >= 1

    if failed:
        phase = "Failed"
    elif complete:
        phase = "Succeeded"
    elif cleaned_up:
        phase = prev["phase"]
    elif exp.spec.suspend:
        phase = "Suspended"
    elif learner_ready:
        phase = "Running"
    else:
        phase = "Pending"

    if cleaned_up:
        set_condition(conditions, "LearnerReady", False, "Finished", "The learner finished; "
                      "its Job was deleted after ttlSecondsAfterFinished.", generation, now)
    elif job is None:
        set_condition(conditions, "LearnerReady", False, "Creating", "The learner Job does "
                      "not exist yet.", generation, now)
    elif learner_ready:
        set_condition(conditions, "LearnerReady", True, "PodReady", "The learner pod is "
                      "ready.", generation, now)
    else:
        active = int(job_status.get("active") or 0)
        set_condition(conditions, "LearnerReady", False,
                      "Suspended" if exp.spec.suspend else
                      ("PodNotReady" if active else "NoPod"),
                      "The learner is suspended." if exp.spec.suspend else
                      (f"{active} learner pod(s), none ready." if active else
                       "No learner pod is running."), generation, now)
    if desired == 0:
        actors_ok = ready_actors == 0
        set_condition(conditions, "ActorsReady", actors_ok,
                      "ScaledToZero" if actors_ok else "ScalingDown",
                      "No actors are wanted now." if actors_ok else
                      f"{ready_actors} actor pod(s) still running.", generation, now)
    else:
        actors_ok = ready_actors >= desired
        set_condition(conditions, "ActorsReady", actors_ok,
                      "AllReady" if actors_ok else "NotAllReady",
                      f"{ready_actors} of {desired} actor pods ready.", generation, now)

    if learner is not None and learner.state == "running":
        set_condition(conditions, "Progressing", True, "Training",
                      f"{learner.env_steps} env steps, {learner.learner_steps} learner steps "
                      f"with {learner.actors} actor stream(s).", generation, now)
    elif learner is not None and learner.state == "waiting_for_actors":
        set_condition(conditions, "Progressing", False, "WaitingForActors",
                      "The learner waits for its first actor.", generation, now)
    elif learner is not None:
        set_condition(conditions, "Progressing", False, "LearnerFinished",
                      f"The learner finished ({learner.stop_reason or 'no reason given'}).",
                      generation, now)
    elif phase == "Running":
        set_condition(conditions, "Progressing", None, "StatusUnavailable",
                      learner_error or "The learner's status endpoint did not answer.",
                      generation, now)
    else:
        set_condition(conditions, "Progressing", False, phase, f"The experiment is "
                      f"{phase.lower()}.", generation, now)

    set_condition(conditions, "Suspended", exp.spec.suspend,
                  "SpecSuspended" if exp.spec.suspend else "NotSuspended",
                  "spec.suspend is true: the learner checkpointed and stopped; actors are at "
                  "zero." if exp.spec.suspend else "The experiment is not suspended.",
                  generation, now)
    if complete:
        set_condition(conditions, "Complete", True, complete.get("reason") or "Completed",
                      complete.get("message") or "The learner reached its budget.",
                      generation, now)
    if failed:
        set_condition(conditions, "Failed", True, failed.get("reason") or "JobFailed",
                      failed.get("message") or "The learner Job failed.", generation, now)
    ready = phase == "Running" and learner_ready and actors_ok
    set_condition(conditions, "Ready", ready, "Ready" if ready else phase,
                  "Learner and actors are ready." if ready else f"Phase {phase}.",
                  generation, now)

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": generation,
        "replicas": ready_actors,
        "selector": ",".join(f"{k}={v}" for k, v in
                             selector_labels(exp.metadata.name, "actor").items()),
        "actors": {"desired": desired, "ready": ready_actors,
                   "connected": learner.actors if learner else 0},
    }
    if not refused:
        status["appliedImmutable"] = immutable_part(exp)
    start = prev.get("startTime") or job_status.get("startTime")
    if start:
        status["startTime"] = start
    if phase in ("Succeeded", "Failed"):
        status["completionTime"] = (prev.get("completionTime")
                                    or job_status.get("completionTime")
                                    or (failed or {}).get("lastTransitionTime") or now)
    if learner is not None:
        status.update(learner.to_experiment_status())
    return status
