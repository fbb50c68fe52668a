"""What an Experiment becomes in a cluster, and what its status says: pure functions only.

:func:`render` turns a validated Experiment into the Kubernetes objects that run it:

- a ConfigMap holding the resolved Experiment (``config.yaml``), which both roles read;
- the learner: a Job with one pod (``completions: 1``, ``restartPolicy: Never``) whose
  ``podFailurePolicy`` follows the learner's exit codes (:mod:`seedrl.common.exit_codes`): 0
  only when the Experiment is finished, so the Job completes only then; a pod disrupted
  (condition DisruptionTarget: drained, evicted, preempted) or stopped early (exit STOPPED after
  its final checkpoint) is replaced without counting; a bad configuration, an unusable
  checkpoint location or a missing accelerator fails the Job at once; any other failure (a
  crash, OOMKilled) counts against ``spec.backoffLimit``. Before the learner, the pod's init
  container derives the env spec with the actor image (an env that cannot be made fails the
  Job at once), and the learner serves that spec. Each new pod resumes from the latest
  checkpoint; with no
  ``spec.checkpoint.uri`` its run directory is a PersistentVolumeClaim, so that it outlives the
  pod. A PodDisruptionBudget and the cluster autoscaler's safe-to-evict annotation keep
  voluntary disruptions off a healthy learner, and a learner stays off Spot nodes unless
  ``spec.learner.spot`` asks for them;
- a Service for the learner's gRPC and metrics ports;
- the actors: a Deployment of ``spec.actors.replicas`` pods (zero while suspended);
- a NetworkPolicy: only this experiment's actor pods may reach the learner's gRPC port; the
  metrics port (``GET /metrics`` for Prometheus, ``GET /status`` for the operator) is open to
  any pod, since it only serves read-only progress and Prometheus and the operator usually run
  in other namespaces.

:func:`compute_status` derives ``status`` (phase, Kubernetes-style conditions, progress) from
what the operator observed: the Job, the Deployment and the learner's ``/status`` JSON (a
:class:`seedrl.common.learner_status.LearnerStatus`). The operator
(``service/operator/handlers.py``) only fetches, applies and patches; every decision lives here,
where tests can reach it without a cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
from typing import Any, Mapping

from seedrl.common.exit_codes import PERMANENT, RETRY_FREELY, ExitCode
from seedrl.common.exit_codes import describe as describe_exit
from seedrl.common.config import (
    API_VERSION,
    KIND,
    ConfigError,
    Experiment,
    RELEASE_IMAGES,
    ImageDefaults,
    PlacementConfig,
    TolerationConfig,
    dump_experiment,
    actor_image,
    learner_image,
    parse_experiment,
    tpu_chips,
    to_document,
)
from seedrl.common import resume
from seedrl.common.learner_status import LearnerStatus

#: Where the learner's TLS certificate is mounted (the learner: tls.crt and tls.key; the actors:
#: ca.crt only).
TLS_DIR = "/etc/seedrl-tls"
#: cert-manager's API group: where a cluster serves it, the learner's certificate is a
#: cert-manager Certificate; elsewhere the operator makes it (service/operator/certificates.py).
CERT_MANAGER_GROUP = "cert-manager.io"
CONFIG_DIR = "/etc/seedrl"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
RUN_DIR = "/var/run/seedrl"
#: Where the learner writes its final status (the container's terminationMessagePath).
TERMINATION_LOG = "/dev/termination-log"
#: The learner pod's emptyDir shared by its init container and the learner.
SHARED_DIR = "/shared"
#: The env spec the learner pod's init container derives from the Experiment with the actor
#: image's code (``python -m seedrl.actors --env-spec-out``), which the learner then serves
#: (``--env-spec``), as ``seedrl train`` does locally.
ENV_SPEC_FILE = f"{SHARED_DIR}/env_spec.json"
#: The name of that init container (the Job's podFailurePolicy names it).
ENV_SPEC_CONTAINER = "env-spec"
#: UID/GID the containers run as (the images create this user; any non-root id works).
RUN_AS = 1000
MANAGED_BY = "seedrl-operator"
LABEL_EXPERIMENT = "seedrl.dev/experiment"
LABEL_ROLE = "seedrl.dev/role"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
ANNOTATION_CONFIG_HASH = "seedrl.dev/config-hash"
#: On the learner Job: the digest of what its pod runs (:func:`learner_hash`); a Job whose
#: digest differs from the spec's is replaced.
ANNOTATION_LEARNER_HASH = "seedrl.dev/learner-hash"
#: The cluster autoscaler does not remove a node that runs a pod with this annotation "false".
ANNOTATION_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
#: GKE's label of Spot VM nodes.
LABEL_SPOT = "cloud.google.com/gke-spot"
#: GKE's label of the older preemptible VM nodes (24 h at most, the same 15 s notice).
LABEL_PREEMPTIBLE = "cloud.google.com/gke-preemptible"
#: Annotation prefixes of tools, not of the user: left out of the config the pods read.
BOOKKEEPING_ANNOTATIONS = ("kubectl.kubernetes.io/", "kopf.zalando.org/", "seedrl.dev/")
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: A preempted GKE Spot VM gives non-system pods at most 15 s of graceful shutdown (the rest of
#: its 30 s notice goes to system pods); asking for more only means being killed mid-exit.
SPOT_GRACE_SECONDS = 15
#: The Job condition of a pod stopped by a disruption (eviction, preemption, node shutdown).
DISRUPTION_TARGET = "DisruptionTarget"


#: The permanent exit codes a learner can exit with (REFUSED and ENV_FAILED are an actor's).
LEARNER_PERMANENT = tuple(
    sorted(c for c in PERMANENT if c not in (ExitCode.REFUSED, ExitCode.ENV_FAILED))
)

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
    disruption_budget: str
    run_volume: str


def names(experiment_name: str) -> Names:
    """Children's names: ``<name>-config``, ``<name>-learner`` (Job, Service, NetworkPolicy),
    ``<name>-actors``. Experiment names are DNS labels of at most 63 characters; the suffixes
    keep Service names (limit 63) valid up to a 55-character Experiment name, which validation
    of the operator enforces through :func:`validate`."""
    return Names(
        config=f"{experiment_name}-config",
        learner=f"{experiment_name}-learner",
        service=f"{experiment_name}-learner",
        actors=f"{experiment_name}-actors",
        network_policy=f"{experiment_name}-learner",
        disruption_budget=f"{experiment_name}-learner",
        run_volume=f"{experiment_name}-learner-run",
    )


def selector_labels(experiment_name: str, role: str) -> dict[str, str]:
    """The labels that select one role's pods (stable: they are in immutable selectors)."""
    return {LABEL_EXPERIMENT: experiment_name, LABEL_ROLE: role}


def _labels(exp: Experiment, role: str | None = None) -> dict[str, str]:
    """The labels of a child object: the Experiment's own, then the operator's."""
    return {**exp.metadata.labels, **_pod_labels(exp, role)}


def _pod_labels(exp: Experiment, role: str | None = None) -> dict[str, str]:
    """The labels of a pod template: the operator's only. The Experiment's labels change
    with every ``kubectl label`` and every ``helm upgrade`` (the chart's helm.sh/chart label),
    and a template that changes rolls every actor; the Job's template cannot change at all."""
    out = {}
    out.update(
        {
            "app.kubernetes.io/name": "seedrl",
            "app.kubernetes.io/instance": exp.metadata.name,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            LABEL_EXPERIMENT: exp.metadata.name,
        }
    )
    if role:
        out.update({"app.kubernetes.io/component": role, LABEL_ROLE: role})
    return out


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The reference that makes an Experiment own (and garbage-collect) a child."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


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
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "labels", "annotations")
            if meta.get(k) is not None
        },
        "spec": body.get("spec") or {},
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
    exp = parse_experiment(document)
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


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def config_text(exp: Experiment) -> str:
    """The resolved Experiment the pods read, every default filled in."""
    return dump_experiment(exp)


def _digest(document: Any) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def config_hash(exp: Experiment) -> str:
    """A short digest of the whole resolved Experiment (what the ConfigMap holds)."""
    return hashlib.sha256(config_text(exp).encode()).hexdigest()[:16]


#: The sections of the spec an actor reads from config.yaml (besides metadata.name): a change
#: anywhere else must not restart the actors.
ACTOR_SECTIONS = ("seed", "env", "actors")


def actor_hash(exp: Experiment) -> str:
    """A digest of what an actor pod reads from its config: ``metadata.name``, ``spec.seed``,
    ``spec.env`` and ``spec.actors`` less ``replicas``. In the actors' pod template, so that a
    change to them rolls the actors while scaling, or a learner-only edit, leaves every running
    actor alone (what else a pod runs, image, resources, Spot, the learner's port, is in the
    template itself)."""
    spec = to_document(exp.spec)
    part = {key: spec[key] for key in ACTOR_SECTIONS}
    part["actors"] = {k: v for k, v in part["actors"].items() if k != "replicas"}
    return _digest({"name": exp.metadata.name, "spec": part})


def learner_hash(exp: Experiment) -> str:
    """A digest of what the learner Job runs: the whole resolved Experiment but its labels
    and annotations, ``spec.suspend`` (a suspend is applied to the running Job) and
    ``spec.actors.replicas`` (scaling is the actors' business), unless the agent's
    exploration schedule is defined over the actor count (R2D2's per-actor epsilons and
    evaluation actors): then a new count needs a learner that knows it. A Job whose digest
    differs is replaced, and its new pod resumes from the checkpoint."""
    document = to_document(exp)
    # Labels and annotations are bookkeeping (kubectl label, Argo CD, the chart's labels):
    # the learner reads neither, and replacing a TPU learner for them wastes its hours.
    document["metadata"].pop("labels", None)
    document["metadata"].pop("annotations", None)
    document["spec"]["suspend"] = False
    if exp.spec.agent.name != "r2d2":
        document["spec"]["actors"].pop("replicas")
    return _digest(document)


def _security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


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


def _volumes(exp: Experiment, role: str = "actor") -> list[dict[str, Any]]:
    n = names(exp.metadata.name)
    run: dict[str, Any] = {"emptyDir": {}}
    if role == "learner" and needs_run_volume(exp):
        run = {"persistentVolumeClaim": {"claimName": n.run_volume}}
    return [
        {"name": "config", "configMap": {"name": n.config}},
        {"name": "run", **run},
        {"name": "tmp", "emptyDir": {}},
    ]


def needs_run_volume(exp: Experiment) -> bool:
    """Whether the learner's run directory needs a PersistentVolumeClaim: with no
    ``spec.checkpoint.uri`` its checkpoints live there and must outlive each pod."""
    return not exp.spec.checkpoint.uri


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]


def _env(exp: Experiment) -> list[dict[str, Any]]:
    return [
        {"name": "SEEDRL_EXPERIMENT", "value": exp.metadata.name},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # The root filesystem is read-only: caches (TensorFlow, matplotlib) go to /tmp.
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def learner_accelerator_args(exp: Experiment) -> list[str]:
    """The learner's arguments that say what it was scheduled on: with a GPU or TPU it exits
    NO_ACCELERATOR at once if it finds none, instead of training on the node's CPU."""
    return ["--accelerator", exp.spec.learner.accelerator.kind]


def _accelerator(exp: Experiment) -> tuple[dict[str, str], list[dict[str, Any]], dict[str, Any]]:
    """Node selector, tolerations and extra resources for the learner's accelerator."""
    acc = exp.spec.learner.accelerator
    if acc.kind == "tpu":
        return (
            {
                "cloud.google.com/gke-tpu-accelerator": acc.tpu.type,
                "cloud.google.com/gke-tpu-topology": acc.tpu.topology,
            },
            [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            {TPU_RESOURCE: str(tpu_chips(acc.tpu.topology))},
        )
    if acc.kind == "gpu":
        return (
            {"cloud.google.com/gke-accelerator": acc.gpu.type},
            [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            {GPU_RESOURCE: str(acc.gpu.count)},
        )
    return {}, [], {}


def _pod_spec(
    exp: Experiment,
    container: dict[str, Any],
    restart_policy: str,
    grace_seconds: int,
    role: str = "actor",
) -> dict[str, Any]:
    """What every seedrl pod has: one locked-down container, no API token, no service links.
    The learner runs as ``spec.serviceAccountName``, the actors as
    ``spec.actors.serviceAccountName``: never the learner's, whose cloud credentials
    (Workload Identity) reach the checkpoints."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace_seconds,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": _pod_security_context(),
        "containers": [container],
        "volumes": _volumes(exp, role),
    }
    account = (
        exp.spec.service_account_name if role == "learner" else exp.spec.actors.service_account_name
    )
    if account:
        pod_spec["serviceAccountName"] = account
    return pod_spec


def _meta(
    exp: Experiment,
    name: str,
    role: str | None,
    owner: Mapping[str, Any] | None,
    namespace: str | None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(exp, role)}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def render_config_map(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The ConfigMap with the resolved Experiment."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(exp, names(exp.metadata.name).config, None, owner, namespace),
        "data": {"config.yaml": config_text(exp)},
    }


def render_service(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner's Service: gRPC for the actors, HTTP metrics/status."""
    learner = exp.spec.learner
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(exp, names(exp.metadata.name).service, "learner", owner, namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(exp.metadata.name, "learner"),
            "ports": [
                {
                    "name": "grpc",
                    "port": learner.port,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                {
                    "name": "metrics",
                    "port": learner.metrics_port,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
            ],
        },
    }


def render_network_policy(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """Only this experiment's actors reach the learner's gRPC port; metrics are open."""
    learner = exp.spec.learner
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(
            exp, names(exp.metadata.name).network_policy, "learner", owner, namespace
        ),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(exp.metadata.name, "learner")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": selector_labels(exp.metadata.name, "actor")
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": learner.port}],
                },
                # Read-only progress for Prometheus and the operator, which run in
                # namespaces this policy cannot know.
                {"ports": [{"protocol": "TCP", "port": learner.metrics_port}]},
            ],
        },
    }


#: Seconds the startup probe gives a slow start (TensorFlow's import, a checkpoint restore)
#: before liveness counts.
STARTUP_SECONDS = 300


def _probes(port: str, ready_path: str, period: int = 5) -> dict[str, Any]:
    """Probes on a seedrl process's HTTP endpoint (:mod:`seedrl.common.metrics_http`):
    ``/healthz`` answers while the process serves; ``ready_path`` once it does its work. The
    startup probe gives a slow start :data:`STARTUP_SECONDS` before liveness counts; liveness
    then restarts a process whose endpoint stops answering for two minutes.

    ``period``: seconds between startup and readiness probes, so how long a process may do
    its work before it is ready (in its Service's endpoints) in the worst case.
    """
    return {
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": STARTUP_SECONDS // period,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": ready_path, "port": port},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }


def learner_failure_policy() -> dict[str, Any]:
    """The learner Job's ``podFailurePolicy``, from the learner's exit codes.

    Rules apply in order, the first that matches wins (Kubernetes, "Handling Pod and container
    failures"): a pod with condition DisruptionTarget (evicted, drained, preempted, node
    shutdown) is replaced without counting; so is one that exited STOPPED (a signal stopped
    it after its final checkpoint: a drain that deleted it, a suspend); a permanent code
    fails the Job at once; anything else counts against backoffLimit: an exception,
    SIGKILL/OOMKilled, and a learner stopped while its own /healthz was not answering, which
    exits FAILED (:mod:`seedrl.learner.health`), so that one its liveness probe kills again
    and again fails at the limit instead of cycling for ever.
    """
    return {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
            },
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": "learner",
                    "operator": "In",
                    "values": [int(c) for c in RETRY_FREELY],
                },
            },
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": "learner",
                    "operator": "In",
                    "values": [int(c) for c in LEARNER_PERMANENT],
                },
            },
            # The env cannot be made from the Experiment: every new pod would find the same.
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": ENV_SPEC_CONTAINER,
                    "operator": "In",
                    "values": [int(ExitCode.BAD_CONFIG)],
                },
            },
        ]
    }


def toleration(tol: TolerationConfig) -> dict[str, Any]:
    """A toleration as a pod spec holds it (empty parts left out)."""
    out: dict[str, Any] = {"operator": tol.operator}
    for key, value in (("key", tol.key), ("value", tol.value), ("effect", tol.effect)):
        if value:
            out[key] = value
    if tol.toleration_seconds is not None:
        out["tolerationSeconds"] = tol.toleration_seconds
    return out


def _and_node_terms(ours: list[dict], theirs: list[dict]) -> list[dict]:
    """Required node affinity that holds where both hold: terms are ORed, a term's
    expressions ANDed ("Assigning Pods to Nodes"), so each of ``theirs`` gets ours added
    (one of ``ours`` at most: the operator renders a single term)."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    (mine,) = ours
    return [
        {
            **term,
            "matchExpressions": [
                *(term.get("matchExpressions") or []),
                *mine.get("matchExpressions", []),
            ],
        }
        for term in theirs
    ]


def apply_placement(
    placement: PlacementConfig,
    pod_spec: dict[str, Any],
    node_selector: Mapping[str, str],
    tolerations: list[dict[str, Any]],
    node_terms: list[dict[str, Any]],
) -> None:
    """Puts a role's placement on its pod spec, in place, merged with the operator's own
    ``node_selector`` (wins on a shared key), ``tolerations`` (first) and required
    ``node_terms`` (added to every term of the user's)."""
    selector = {**placement.node_selector, **node_selector}
    if selector:
        pod_spec["nodeSelector"] = selector
    merged = [*tolerations, *(toleration(t) for t in placement.tolerations)]
    if merged:
        pod_spec["tolerations"] = merged
    affinity = copy.deepcopy(placement.affinity)
    node = affinity.get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = _and_node_terms(node_terms, list(required.get("nodeSelectorTerms") or []))
    if terms:
        affinity["nodeAffinity"] = {
            **node,
            "requiredDuringSchedulingIgnoredDuringExecution": {
                **required,
                "nodeSelectorTerms": terms,
            },
        }
    if affinity:
        pod_spec["affinity"] = affinity
    if placement.priority_class_name:
        pod_spec["priorityClassName"] = placement.priority_class_name
    if placement.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in placement.image_pull_secrets]


def _learner_placement(exp: Experiment, pod_spec: dict[str, Any]) -> None:
    """Node selectors, tolerations, the Spot rule and the user's placement of the learner
    pod, in place."""
    node_selector, tolerations, _ = _accelerator(exp)
    node_terms: list[dict[str, Any]] = []
    if exp.spec.learner.spot:
        node_selector = {**node_selector, LABEL_SPOT: "true"}
        tolerations = [*tolerations, _SPOT_TOLERATION]
    else:
        # GKE does not taint Spot or preemptible nodes by itself: without this a learner may
        # land on one, and a preemption gives it 15 s.
        node_terms = [
            {
                "matchExpressions": [
                    {"key": LABEL_SPOT, "operator": "DoesNotExist"},
                    {"key": LABEL_PREEMPTIBLE, "operator": "DoesNotExist"},
                ]
            }
        ]
    apply_placement(exp.spec.learner.placement, pod_spec, node_selector, tolerations, node_terms)


_SPOT_TOLERATION = {"key": LABEL_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def learner_grace_seconds(exp: Experiment) -> int:
    """The learner pod's ``terminationGracePeriodSeconds``: ``spec.learner.
    terminationGracePeriodSeconds``, but at most :data:`SPOT_GRACE_SECONDS` on Spot, where
    GKE's preemption gives no more whatever the pod asks; the learner then budgets its final
    checkpoint for the 15 s it will get (it reads this value from its config)."""
    grace = exp.spec.learner.termination_grace_period_seconds
    return min(grace, SPOT_GRACE_SECONDS) if exp.spec.learner.spot else grace


@dataclasses.dataclass(frozen=True)
class LearnerUsage:
    """What the learner has used up of ``spec.backoffLimit`` and
    ``spec.activeDeadlineSeconds`` before its current Job and run, which a new Job would
    otherwise start from zero: a replaced learner Job (an edit) counts its failures afresh,
    and a Job's deadline restarts each time it is resumed from a suspend ("Jobs": the timer
    is stopped and reset). Recorded in ``status.learnerUsage`` at every status refresh
    (:func:`advance_usage`), so up to one poll of either is missed.

    Attributes:
      failed: failures counted by learner Jobs replaced before the current one.
      active_seconds: seconds learner Jobs were active before the current Job's current run.
    """

    failed: int = 0
    active_seconds: float = 0.0

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> "LearnerUsage":
        """The usage recorded in an Experiment's status (none: nothing used)."""
        usage = (status or {}).get("learnerUsage") or {}
        try:
            return cls(
                failed=int(usage.get("earlierFailed") or 0),
                active_seconds=float(usage.get("earlierActiveSeconds") or 0.0),
            )
        except (TypeError, ValueError, AttributeError):
            return cls()

    def backoff_limit(self, exp: Experiment) -> int:
        """The ``backoffLimit`` of a new learner Job: what is left of the spec's."""
        return max(0, exp.spec.backoff_limit - self.failed)

    def deadline(self, exp: Experiment) -> int | None:
        """The ``activeDeadlineSeconds`` of a learner Job's next run: what is left of the
        spec's (at least 1 s: the API refuses 0, and the Job then fails at once)."""
        if exp.spec.active_deadline_seconds is None:
            return None
        return max(1, int(exp.spec.active_deadline_seconds - self.active_seconds))


def _seconds_between(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    try:
        a = datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (b - a).total_seconds())


def advance_usage(
    previous: Mapping[str, Any] | None, job: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """``status.learnerUsage`` after observing ``job`` at ``now``: when the Job is another
    than last time, the last one's failures and run are added to what came before; when the
    Job's run ended or restarted (its ``startTime`` went or changed: suspended, resumed), the
    run's active time is."""
    prev = dict(previous or {})
    failed = int(prev.get("earlierFailed") or 0)
    active = float(prev.get("earlierActiveSeconds") or 0.0)
    meta = (job or {}).get("metadata") or {}
    status = (job or {}).get("status") or {}
    uid, start = meta.get("uid"), status.get("startTime")
    run_start, last_seen = prev.get("runStart"), prev.get("lastSeen")
    if prev.get("jobUid") and uid != prev["jobUid"]:
        failed += int(prev.get("jobFailed") or 0)
        active += _seconds_between(run_start, last_seen)
        run_start = None
    elif run_start and start != run_start:
        active += _seconds_between(run_start, last_seen)
        run_start = None
    out: dict[str, Any] = {
        "earlierFailed": failed,
        "earlierActiveSeconds": round(active, 1),
        "lastSeen": now,
    }
    if uid:
        out["jobUid"] = uid
        out["jobFailed"] = int(status.get("failed") or 0)
    if start:
        out["runStart"] = start
    return out


def render_learner_job(
    exp: Experiment,
    owner=None,
    namespace=None,
    images: ImageDefaults = RELEASE_IMAGES,
    usage: LearnerUsage | None = None,
) -> dict[str, Any]:
    """The learner: a Job of one pod, replaced (never restarted in place) by its exit code, and
    resuming from its checkpoint in each new pod."""
    spec = exp.spec
    learner = spec.learner
    n = names(exp.metadata.name)
    _, _, extra = _accelerator(exp)
    container = {
        "name": "learner",
        "image": learner_image(learner, images),
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python",
            "-m",
            "seedrl.learner",
            "--config",
            CONFIG_FILE,
            "--listen",
            f"[::]:{learner.port}",
            "--run-dir",
            RUN_DIR,
            "--termination-log",
            TERMINATION_LOG,
            "--env-spec",
            ENV_SPEC_FILE,
            "--grace-seconds",
            str(learner_grace_seconds(exp)),
            *learner_accelerator_args(exp),
        ],
        "ports": [
            {"name": "grpc", "containerPort": learner.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": learner.metrics_port, "protocol": "TCP"},
        ],
        "env": _env(exp),
        "resources": _resources(learner.resources, extra),
        "volumeMounts": [*_mounts(), {"name": "shared", "mountPath": SHARED_DIR, "readOnly": True}],
        "securityContext": _security_context(),
        # Ready once it serves the actors' streams (after restoring its checkpoint). The actors
        # reach it through its Service only once it is: probed every second, not every 5 s
        # (every learner start, preemptions' included, waited up to 5 s with none streaming).
        **_probes("metrics", "/readyz", period=1),
        # The learner's final status once it stops (its /status is then gone); when it wrote
        # none (an early failure), the end of its log, which says why.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = _pod_spec(exp, container, "Never", learner_grace_seconds(exp), "learner")
    pod_spec["initContainers"] = [render_env_spec_container(exp, images)]
    pod_spec["volumes"].append({"name": "shared", "emptyDir": {}})
    add_tls(exp, "learner", container, pod_spec)
    _learner_placement(exp, pod_spec)
    template_meta = {
        "labels": _pod_labels(exp, "learner"),
        # The autoscaler must not take the learner's node away to save a node.
        "annotations": {ANNOTATION_SAFE_TO_EVICT: "false"},
    }
    job_spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": (usage or LearnerUsage()).backoff_limit(exp),
        "podFailurePolicy": learner_failure_policy(),
        # A new pod only once the old one has stopped: two learners never write the same
        # checkpoints (and the only value podFailurePolicy allows).
        "podReplacementPolicy": "Failed",
        # Kueue admits a queued Job by unsuspending it, so a queued one starts suspended.
        "suspend": bool(spec.suspend or spec.queue_name),
        "template": {"metadata": template_meta, "spec": pod_spec},
    }
    deadline = (usage or LearnerUsage()).deadline(exp)
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    meta = _meta(exp, n.learner, "learner", owner, namespace)
    meta["annotations"] = {ANNOTATION_LEARNER_HASH: learner_hash(exp)}
    if spec.queue_name:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue_name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def render_env_spec_container(
    exp: Experiment, images: ImageDefaults = RELEASE_IMAGES
) -> dict[str, Any]:
    """The learner pod's init container: the actor image derives the env spec from the
    Experiment (it makes the env once, with the actors' own code and packages, which the
    learner image need not have) into :data:`ENV_SPEC_FILE`, and the learner serves that spec.
    An env that cannot be made fails the pod with BAD_CONFIG and the reason (the end of its
    log), and the Job at once, before a learner starts. It asks for the learner's CPU and
    memory, without accelerators: an init container runs before the learner, so it never
    raises what the pod asks for."""
    return {
        "name": ENV_SPEC_CONTAINER,
        "image": actor_image(exp.spec.actors, images),
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python",
            "-m",
            "seedrl.actors",
            "--config",
            CONFIG_FILE,
            "--env-spec-out",
            ENV_SPEC_FILE,
        ],
        "env": _env(exp),
        "resources": _resources(exp.spec.learner.resources),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "shared", "mountPath": SHARED_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": _security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def render_disruption_budget(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """A PodDisruptionBudget that refuses voluntary evictions (drains, node upgrades, the
    autoscaler) of a healthy learner pod. An unhealthy one (not ready: starting, restoring,
    crashing) may still be evicted, so that it never blocks a drain for nothing. GKE's node
    upgrades respect it for up to an hour, then delete the pod: the learner then checkpoints
    and resumes elsewhere, as it does after any disruption."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(
            exp, names(exp.metadata.name).disruption_budget, "learner", owner, namespace
        ),
        "spec": {
            # An integer minAvailable: a Job has no scale subresource, and for such pods
            # Kubernetes honours only that ("Specifying a Disruption Budget for your
            # Application": maxUnavailable and percentages need a scalable controller; the
            # disruption controller otherwise marks the budget failed).
            "minAvailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": selector_labels(exp.metadata.name, "learner")},
        },
    }


def render_run_volume(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner's run directory (status, metrics, checkpoints) as a PersistentVolumeClaim,
    for an Experiment without ``spec.checkpoint.uri``: each learner pod is a new pod, and an
    emptyDir would lose the checkpoints with the old one.

    With ``spec.checkpoint.volumeRetention: Retain`` (the default) the claim has no owner
    reference: deleting the Experiment (``kubectl delete``, ``helm uninstall``) leaves it and
    its checkpoints, since the garbage collector would delete an owned claim and GKE's
    default StorageClass (reclaim policy Delete) its disk. An Experiment of the same name
    then finds the claim and resumes from it."""
    checkpoint = exp.spec.checkpoint
    kept = checkpoint.volume_retention == "Retain"
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": checkpoint.volume_size}},
    }
    if checkpoint.volume_storage_class_name:
        spec["storageClassName"] = checkpoint.volume_storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(
            exp, names(exp.metadata.name).run_volume, "learner", None if kept else owner, namespace
        ),
        "spec": spec,
    }


def actor_replicas(exp: Experiment, finished: bool = False, admitted: bool = True) -> int:
    """Actor pods to run: none while suspended, while the learner waits for Kueue's admission
    (they would run outside the quota, with no learner to stream to), or once the learner Job
    has finished (they would only retry a learner that is gone)."""
    if exp.spec.suspend or finished or not admitted:
        return 0
    return exp.spec.actors.replicas


def admitted(exp: Experiment, job: Mapping[str, Any] | None) -> bool:
    """Whether a queued Experiment's learner is admitted: Kueue admits a Job by unsuspending
    it. An Experiment without ``spec.queueName`` needs no admission."""
    if not exp.spec.queue_name:
        return True
    return job is not None and not bool((job.get("spec") or {}).get("suspend"))


def finished_before(previous_status: Mapping[str, Any] | None) -> bool:
    """Whether the status already records a finished learner (Succeeded, or Failed at run time
    rather than by validation). Its Job may since be gone (``ttlSecondsAfterFinished``); it is
    not made again: a finished experiment stays finished."""
    prev = previous_status or {}
    return prev.get("phase") in ("Succeeded", "Failed") and bool(prev.get("completionTime"))


def job_finished(job: Mapping[str, Any] | None) -> bool:
    """Whether the learner Job has completed or failed for good."""
    return bool(_job_condition(job, "Complete") or _job_condition(job, "Failed"))


def _job_hash(job: Mapping[str, Any] | None) -> str | None:
    return (((job or {}).get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_LEARNER_HASH
    )


def job_outdated(exp: Experiment, job: Mapping[str, Any] | None) -> bool:
    """Whether a learner Job that has not finished runs another spec than ``exp`` (its
    :func:`learner_hash` differs): it is then replaced. A finished one is left as it is."""
    return job is not None and not job_finished(job) and _job_hash(job) != learner_hash(exp)


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


def _learner_state(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The learner container's ``state`` in ``pod`` (empty when it has none yet)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == "learner":
            return status.get("state") or {}
    return {}


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    return _learner_state(pod).get("terminated")


def _init_failed(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The terminated state of the learner pod's env spec init container, when it failed."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == ENV_SPEC_CONTAINER:
            term = (status.get("state") or {}).get("terminated")
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
    """The reason and message of a failed learner Job's Experiment.

    The reason names the cause when the last failed learner pod tells it: its exit code's
    reason (CheckpointLocationUnusable, InvalidConfiguration, ...) or the kubelet's (OOMKilled),
    else the Job's (BackoffLimitExceeded, DeadlineExceeded). The message is the Job's, then
    that pod's exit and the end of its log (``terminationMessagePolicy: FallbackToLogsOnError``).
    A pod whose env spec init container failed (the learner never ran) is told by that one.
    """
    reason = failed.get("reason") or "JobFailed"
    message = failed.get("message") or "The learner Job failed."
    ended = [
        (t, p)
        for p in pods
        if (p.get("status") or {}).get("phase") == "Failed"
        and (t := _terminated(p) or _init_failed(p)) is not None
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
    # No learner exit: the init container failed, and the learner never ran.
    which = f", init container {ENV_SPEC_CONTAINER}" if _terminated(pod) is None else ""
    detail = f"learner pod {pod['metadata']['name']}{which}: {describe_exit(code)}"
    if term.get("reason") not in (None, "Error", "Completed"):
        detail += f", reason {term['reason']}"
    last = (term.get("message") or "").strip()
    if last and final_learner_status([pod]) is None:  # the end of its log, not its status
        detail += f"; its last words: {last[-600:]}"
    return reason, f"{message} {detail}"


def render_actors(
    exp: Experiment,
    owner=None,
    namespace=None,
    finished: bool = False,
    admitted: bool = True,
    images: ImageDefaults = RELEASE_IMAGES,
) -> dict[str, Any]:
    """The actors: a Deployment whose pods derive their index from their pod name."""
    spec = exp.spec
    actors = spec.actors
    n = names(exp.metadata.name)
    container = {
        "name": "actor",
        "image": actor_image(actors, images),
        "imagePullPolicy": "IfNotPresent",
        # A Deployment's pods have no ordinal: with `--index auto` the learner assigns each
        # actor the lowest free index (unique among live actors, kept across reconnects).
        "command": [
            "python",
            "-m",
            "seedrl.actors",
            "--config",
            CONFIG_FILE,
            "--learner",
            f"{n.service}:{spec.learner.port}",
            "--index",
            "auto",
        ],
        "ports": [{"name": "metrics", "containerPort": actors.metrics_port, "protocol": "TCP"}],
        "env": _env(exp),
        "resources": _resources(actors.resources),
        "volumeMounts": _mounts(),
        "securityContext": _security_context(),
        # Ready while streaming to the learner.
        **_probes("metrics", "/readyz"),
    }
    pod_spec = _pod_spec(exp, container, "Always", SPOT_GRACE_SECONDS if actors.spot else 30)
    add_tls(exp, "actor", container, pod_spec)
    apply_placement(
        actors.placement,
        pod_spec,
        {LABEL_SPOT: "true"} if actors.spot else {},
        [_SPOT_TOLERATION] if actors.spot else [],
        [],
    )
    template_meta = {
        "labels": _pod_labels(exp, "actor"),
        "annotations": {ANNOTATION_CONFIG_HASH: actor_hash(exp)},
    }
    meta = _meta(exp, n.actors, "actor", owner, namespace)
    if spec.queue_name:
        # Kueue's Deployment integration admits each actor pod in the same queue, so that the
        # actors' resources count against the quota as the learner's do.
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue_name
        template_meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue_name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": actor_replicas(exp, finished, admitted),
            "selector": {"matchLabels": selector_labels(exp.metadata.name, "actor")},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


# --------------------------------------------------------------------------------------------
# TLS between actors and learner
# --------------------------------------------------------------------------------------------


def tls_secret_name(experiment_name: str) -> str:
    """The Secret holding the learner's certificate (``tls.crt``, ``tls.key``, ``ca.crt``)."""
    return f"{experiment_name}-learner-tls"


def learner_dns_names(experiment_name: str, namespace: str) -> list[str]:
    """The names the learner's certificate is valid for: its Service's, short and qualified.
    Actors connect to the short one (``<name>-learner``) and verify it."""
    service = names(experiment_name).service
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def add_tls(
    exp: Experiment, role: str, container: dict[str, Any], pod_spec: dict[str, Any]
) -> None:
    """Mounts the learner's certificate into a pod and starts its process with TLS, when
    ``spec.learner.tls.enabled``: the learner gets its certificate and key and serves only TLS;
    an actor gets the CA alone (least privilege) and verifies the learner's Service name."""
    if not exp.spec.learner.tls.enabled:
        return
    if role == "learner":
        items, args = (
            ["tls.crt", "tls.key"],
            ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"],
        )
    else:
        items, args = ["ca.crt"], ["--tls-ca", f"{TLS_DIR}/ca.crt"]
    pod_spec["volumes"].append(
        {
            "name": "tls",
            "secret": {
                "secretName": tls_secret_name(exp.metadata.name),
                "items": [{"key": key, "path": key} for key in items],
                "defaultMode": 0o440,
            },
        }
    )
    container["volumeMounts"].append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    container["command"] = [*container["command"], *args]


def ca_secret_name(experiment_name: str) -> str:
    """The Secret holding the learner's CA under cert-manager (``tls.crt``, ``tls.key``)."""
    return f"{experiment_name}-learner-ca"


def render_certificate(exp: Experiment, owner=None, namespace=None) -> list[dict[str, Any]]:
    """The learner's certificate as cert-manager objects, in the order to apply them: a
    self-signed root Issuer, a CA Certificate of this Experiment's own (ten years, its key
    never rotated), an Issuer signing with that CA, and the learner's leaf Certificate for
    its Service names, which cert-manager writes (and renews, with a new key each time) into
    :func:`tls_secret_name`'s Secret. The Secret's ``ca.crt`` is then the CA's, the same
    across renewals: the actors, which trust ``ca.crt`` alone, keep verifying a renewed
    leaf; with the leaf self-signed, each renewal changed the anchor under running actors.
    Empty when TLS is off."""
    if not exp.spec.learner.tls.enabled:
        return []
    name = tls_secret_name(exp.metadata.name)
    ca = ca_secret_name(exp.metadata.name)
    root = f"{name}-root"
    ns = namespace or exp.metadata.namespace or "default"

    def issuer_ref(issuer: str) -> dict[str, str]:
        return {"group": CERT_MANAGER_GROUP, "kind": "Issuer", "name": issuer}

    def obj(kind: str, obj_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": f"{CERT_MANAGER_GROUP}/v1",
            "kind": kind,
            "metadata": _meta(exp, obj_name, "learner", owner, namespace),
            "spec": spec,
        }

    secret_template = {"labels": _labels(exp, "learner")}
    return [
        obj("Issuer", root, {"selfSigned": {}}),
        obj(
            "Certificate",
            ca,
            {
                "isCA": True,
                "commonName": f"{names(exp.metadata.name).service} CA",
                "secretName": ca,
                "duration": "87600h",
                "renewBefore": "720h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"},
                "secretTemplate": secret_template,
                "issuerRef": issuer_ref(root),
            },
        ),
        obj("Issuer", ca, {"ca": {"secretName": ca}}),
        obj(
            "Certificate",
            name,
            {
                "secretName": name,
                "dnsNames": learner_dns_names(exp.metadata.name, ns),
                "duration": "8760h",
                "renewBefore": "720h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                "usages": ["server auth", "digital signature", "key encipherment"],
                "secretTemplate": secret_template,
                "issuerRef": issuer_ref(ca),
            },
        ),
    ]


def render_tls_secret(
    exp: Experiment, data: Mapping[str, bytes], owner=None, namespace=None
) -> dict[str, Any]:
    """The learner's certificate as a Secret the operator writes itself (no cert-manager)."""
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": _meta(exp, tls_secret_name(exp.metadata.name), "learner", owner, namespace),
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def render(
    exp: Experiment,
    owner: Mapping[str, Any] | None = None,
    namespace: str | None = None,
    finished: bool = False,
    admitted: bool = True,
    images: ImageDefaults = RELEASE_IMAGES,
    usage: LearnerUsage | None = None,
) -> list[dict[str, Any]]:
    """Every object that runs ``exp``, in the order to create them (config first).

    Args:
      exp: a validated Experiment.
      owner: an owner reference (see :func:`owner_reference`) put on every object.
      namespace: put in every object's metadata when given (else ``exp.metadata.namespace``).
      finished: the learner Job has completed or failed: no actors are rendered to run.
      admitted: whether Kueue admitted the learner (see :func:`admitted`); no actors before.
      images: where the images the spec does not name come from (:func:`image_defaults`).
      usage: what earlier learner Jobs used of the backoff limit and the deadline.
    """
    ns = namespace or exp.metadata.namespace
    volume = [render_run_volume(exp, owner, ns)] if needs_run_volume(exp) else []
    return [
        render_config_map(exp, owner, ns),
        *volume,
        render_service(exp, owner, ns),
        render_network_policy(exp, owner, ns),
        render_disruption_budget(exp, owner, ns),
        render_learner_job(exp, owner, ns, images, usage),
        render_actors(exp, owner, ns, finished, admitted, images),
    ]


# --------------------------------------------------------------------------------------------
# The learner's status endpoint
# --------------------------------------------------------------------------------------------


def learner_status_url(namespace: str, experiment_name: str, metrics_port: int) -> str:
    """The in-cluster URL of a learner's status endpoint (through its Service)."""
    return f"http://{names(experiment_name).service}.{namespace}.svc:{metrics_port}/status"


# --------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------


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


def images_status(images: ImageDefaults) -> dict[str, str]:
    """``status.images``: the image defaults an Experiment was made with."""
    return {"registry": images.registry, "release": images.release}


def now_rfc3339(now: datetime.datetime | None = None) -> str:
    """A Kubernetes timestamp (UTC, whole seconds)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> None:
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
    cond = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
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


def invalid_status(
    previous: Mapping[str, Any] | None, generation: int | None, error: ConfigError, now: str
) -> dict[str, Any]:
    """Status of an Experiment whose spec does not validate: Failed / ValidationFailed."""
    conditions = [dict(c) for c in (previous or {}).get("conditions") or []]
    message = "; ".join(f"{path}: {reason}" for path, reason in error.problems)
    set_condition(conditions, "Valid", False, "ValidationFailed", message, generation, now)
    set_condition(conditions, "Ready", False, "ValidationFailed", message, generation, now)
    return {"phase": "Failed", "conditions": conditions, "observedGeneration": generation}


def compute_status(
    exp: Experiment,
    *,
    generation: int | None,
    previous: Mapping[str, Any] | None,
    job: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    learner: LearnerStatus | None,
    learner_error: str | None = None,
    refused: list[str] | tuple[str, ...] = (),
    now: str | None = None,
    learner_pods: list[Mapping[str, Any]] | tuple = (),
    replacing: bool = False,
    images: ImageDefaults | None = None,
    forbidden: str | None = None,
) -> dict[str, Any]:
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
      learner_pods: the learner's pods as listed (a running learner container makes the phase
        Running before its pod is ready; a failure's reason and message come from
        the last one that failed).
      replacing: the learner Job runs an older spec and is being replaced.
      images: the image defaults the children were rendered with, recorded in
        ``status.images`` (:func:`image_defaults` reads them back).
      forbidden: the API server's message when it refused (403) a call applying the
        children: condition SpecApplied=False, reason Forbidden.

    Returns:
      A status (the keys this function owns; cost is added by the operator).
    """
    now = now or now_rfc3339()
    prev = dict(previous or {})
    conditions = [dict(c) for c in prev.get("conditions") or []]
    set_condition(conditions, "Valid", True, "Validated", "The spec is valid.", generation, now)
    if refused:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "ImmutableFieldChanged",
            f"{', '.join(refused)} cannot change once an experiment has started "
            f"(its checkpoints belong to the old value); revert the change or "
            f"create a new Experiment",
            generation,
            now,
        )
    elif forbidden:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "Forbidden",
            f"The operator may not make this Experiment's children: {forbidden} Grant its "
            f"role what it lacks (the operator chart's rbac.create renders every rule it "
            f"needs); it retries at every poll.",
            generation,
            now,
        )
    elif replacing:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "ReplacingLearner",
            "The learner Job runs an older spec: it is being replaced, and its new "
            "pod resumes from the checkpoint.",
            generation,
            now,
        )
    elif job is not None and job_finished(job) and _job_hash(job) not in (None, learner_hash(exp)):
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "LearnerFinished",
            "The learner finished before this spec: a finished experiment is not run "
            "again; create a new Experiment to train more.",
            generation,
            now,
        )
    else:
        set_condition(
            conditions,
            "SpecApplied",
            True,
            "Applied",
            "The children match the spec.",
            generation,
            now,
        )
    job_status = (job or {}).get("status") or {}
    dep_status = (deployment or {}).get("status") or {}
    complete = _job_condition(job, "Complete")
    failed = _job_condition(job, "Failed")
    cleaned_up = job is None and finished_before(prev)
    queued = job is not None and not admitted(exp, job) and not exp.spec.suspend
    desired = actor_replicas(exp, bool(complete or failed or cleaned_up), job is None or not queued)
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
    elif learner_ready or learner_started(learner_pods):
        phase = "Running"
    else:
        phase = "Pending"

    if cleaned_up:
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Finished",
            "The learner finished; its Job was deleted after ttlSecondsAfterFinished.",
            generation,
            now,
        )
    elif job is None:
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Creating",
            "The learner Job does not exist yet.",
            generation,
            now,
        )
    elif learner_ready:
        set_condition(
            conditions,
            "LearnerReady",
            True,
            "PodReady",
            "The learner pod is ready.",
            generation,
            now,
        )
    elif (
        unschedulable := learner_unschedulable(learner_pods)
    ) is not None and not exp.spec.suspend:
        # The scheduler's own words: no node has the accelerator, the capacity, the labels.
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Unschedulable",
            f"The learner pod cannot be scheduled: {unschedulable}",
            generation,
            now,
        )
    else:
        active = int(job_status.get("active") or 0)
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Suspended"
            if exp.spec.suspend
            else "Queued"
            if queued
            else ("PodNotReady" if active else "NoPod"),
            "The learner is suspended."
            if exp.spec.suspend
            else f"Waiting for Kueue to admit the learner in queue "
            f"{exp.spec.queue_name}; the actors start once it is."
            if queued
            else (
                f"{active} learner pod(s), none ready." if active else "No learner pod is running."
            ),
            generation,
            now,
        )
    if desired == 0:
        actors_ok = ready_actors == 0
        set_condition(
            conditions,
            "ActorsReady",
            actors_ok,
            "ScaledToZero" if actors_ok else "ScalingDown",
            "No actors are wanted now."
            if actors_ok
            else f"{ready_actors} actor pod(s) still running.",
            generation,
            now,
        )
    else:
        actors_ok = ready_actors >= desired
        set_condition(
            conditions,
            "ActorsReady",
            actors_ok,
            "AllReady" if actors_ok else "NotAllReady",
            f"{ready_actors} of {desired} actor pods ready.",
            generation,
            now,
        )

    idle = learner.seconds_without_env_steps if learner is not None else None
    limit = exp.spec.budget.no_progress_seconds
    if (
        learner is not None
        and learner.state != "finished"
        and limit
        and idle is not None
        and idle >= limit
    ):
        # The same condition `seedrl train` fails a local run on (spec.budget.noProgressSeconds).
        refusals = (
            f" {learner.refused_streams} actor stream(s) refused, the last: {learner.last_refusal}"
            if learner.refused_streams
            else " No actor stream was refused: are the actor pods running?"
        )
        set_condition(
            conditions,
            "Progressing",
            False,
            "NoProgress",
            f"No env steps for {idle:.0f} s (spec.budget.noProgressSeconds = {limit:g}).{refusals}",
            generation,
            now,
        )
    elif learner is not None and learner.state == "running":
        set_condition(
            conditions,
            "Progressing",
            True,
            "Training",
            f"{learner.env_steps} env steps, {learner.learner_steps} learner steps "
            f"with {learner.actors} actor stream(s).",
            generation,
            now,
        )
    elif learner is not None and learner.state == "waiting_for_actors":
        set_condition(
            conditions,
            "Progressing",
            False,
            "WaitingForActors",
            "The learner waits for its first actor.",
            generation,
            now,
        )
    elif learner is not None:
        set_condition(
            conditions,
            "Progressing",
            False,
            "LearnerFinished",
            f"The learner finished ({learner.stop_reason or 'no reason given'}).",
            generation,
            now,
        )
    elif phase == "Running":
        set_condition(
            conditions,
            "Progressing",
            None,
            "StatusUnavailable",
            learner_error or "The learner's status endpoint did not answer.",
            generation,
            now,
        )
    else:
        set_condition(
            conditions,
            "Progressing",
            False,
            phase,
            f"The experiment is {phase.lower()}.",
            generation,
            now,
        )

    set_condition(
        conditions,
        "Suspended",
        exp.spec.suspend,
        "SpecSuspended" if exp.spec.suspend else "NotSuspended",
        "spec.suspend is true: the learner checkpointed and stopped; actors are at zero."
        if exp.spec.suspend
        else "The experiment is not suspended.",
        generation,
        now,
    )
    if complete:
        set_condition(
            conditions,
            "Complete",
            True,
            complete.get("reason") or "Completed",
            complete.get("message") or "The learner reached its budget.",
            generation,
            now,
        )
    if failed:
        reason, message = failure_reason(failed, learner_pods)
        set_condition(conditions, "Failed", True, reason, message, generation, now)
    ready = phase == "Running" and learner_ready and actors_ok
    set_condition(
        conditions,
        "Ready",
        ready,
        "Ready" if ready else phase,
        "Learner and actors are ready." if ready else f"Phase {phase}.",
        generation,
        now,
    )

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": generation,
        "replicas": ready_actors,
        "selector": ",".join(
            f"{k}={v}" for k, v in selector_labels(exp.metadata.name, "actor").items()
        ),
        "actors": {
            "desired": desired,
            "ready": ready_actors,
            "connected": learner.actors if learner else 0,
        },
    }
    if not refused:
        status["appliedImmutable"] = immutable_part(exp)
    if images is not None:
        status["images"] = images_status(images)
    status["learnerUsage"] = advance_usage(prev.get("learnerUsage"), job, now)
    start = prev.get("startTime") or job_status.get("startTime")
    if start:
        status["startTime"] = start
    if phase in ("Succeeded", "Failed"):
        status["completionTime"] = (
            prev.get("completionTime")
            or job_status.get("completionTime")
            or (failed or {}).get("lastTransitionTime")
            or now
        )
    if learner is not None:
        status.update(learner_with_frames(exp, learner).to_experiment_status())
    return status


def learner_with_frames(exp: Experiment, learner: LearnerStatus) -> LearnerStatus:
    """``learner``, with its env frames counted from its steps when it reported none.

    A learner image older than the operator (an Experiment running through an operator
    upgrade) reports only ``env_steps``; without frames its cost per million frames would read
    n/a to the end, termination message included. Steps without frames cannot come from a
    learner that counts frames (every step is at least one frame).
    """
    if learner.env_frames or not learner.env_steps:
        return learner
    return dataclasses.replace(learner, env_frames=learner.env_steps * exp.spec.env.frames_per_step)
