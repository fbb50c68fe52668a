"""The learner: a Job with one pod (``completions: 1``, ``restartPolicy: Never``) whose
``podFailurePolicy`` follows the learner's exit codes (:mod:`seedrl.common.exit_codes`): 0 only
when the Experiment is finished, so the Job completes only then; a pod disrupted (condition
DisruptionTarget: drained, evicted, preempted) or stopped early (exit STOPPED after its final
checkpoint) is replaced without counting; a bad configuration, an unusable checkpoint location
or a missing accelerator fails the Job at once; any other failure (a crash, OOMKilled) counts
against ``spec.backoffLimit``. The learner serves the env spec the env-spec Job derived
(:mod:`.env_spec`), mounted from its ConfigMap: no user env code runs in the learner's pod.
Each new pod resumes from the latest checkpoint. The cluster autoscaler's
safe-to-evict annotation keeps the autoscaler from taking its node away (the PodDisruptionBudget
of :mod:`.disruption_budget` keeps off the other voluntary disruptions), and a learner stays off
Spot nodes unless ``spec.learner.spot`` asks for them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from seedrl.common.config import (
    RELEASE_IMAGES,
    Experiment,
    ImageDefaults,
    learner_image,
    to_document,
)
from seedrl.common.exit_codes import PERMANENT, RETRY_FREELY, ExitCode
from seedrl.service.operator.render.common import (
    ANNOTATION_LEARNER_HASH,
    ANNOTATION_SAFE_TO_EVICT,
    CONFIG_FILE,
    ENV_SPEC_FILE,
    ENV_SPEC_VOLUME,
    LABEL_KUEUE_QUEUE,
    LABEL_PREEMPTIBLE,
    LABEL_SPOT,
    RUN_DIR,
    SHARED_DIR,
    SPOT_GRACE_SECONDS,
    TERMINATION_LOG,
    digest,
    names,
    object_meta,
    pod_labels,
)
from seedrl.service.operator.render.pod import (
    SPOT_TOLERATION,
    accelerator_placement,
    apply_placement,
    base_pod_spec,
    container_env,
    container_mounts,
    container_resources,
    container_security_context,
    probes,
)
from seedrl.service.operator.render.tls import add_tls
from seedrl.service.operator.usage import LearnerUsage


#: The Job condition of a pod stopped by a disruption (eviction, preemption, node shutdown).
DISRUPTION_TARGET = "DisruptionTarget"


#: What a learner's /tmp holds besides a checkpoint's extra state (R2D2's replay): the staged
#: variables and optimiser slots of one checkpoint (the largest built-in network's are under
#: 100 MB) and TensorFlow's and matplotlib's caches (HOME is /tmp).
LEARNER_SCRATCH_BYTES = 2 * 2**30


def learner_scratch_bytes(exp: Experiment) -> int:
    """The most a learner pod's /tmp holds: every checkpoint is staged there before it is
    published (:meth:`seedrl.learner.checkpoint.Checkpointer.save`), one at a time, and R2D2
    stages its replay with it when the replay is at most ``replayCheckpointMaxGb``."""
    extra = 0
    if exp.spec.agent.name == "r2d2":
        extra = int(exp.spec.agent.r2d2.replay_checkpoint_max_gb * 1e9)
    return LEARNER_SCRATCH_BYTES + extra


def _mebibytes(count: int) -> str:
    return f"{-(-count // 2**20)}Mi"


def bound_learner_scratch(exp: Experiment, container: dict[str, Any], pod_spec: dict[str, Any]):
    """Bounds the learner pod's /tmp emptyDir (``sizeLimit``) and asks the scheduler for that
    much node disk (an ``ephemeral-storage`` request), in place: without them a large staged
    checkpoint fills the node's disk, and the kubelet's eviction under disk pressure takes
    pods using more than they requested first ("Node-pressure Eviction"), the learner then
    among them. ``spec.learner.resources.ephemeralStorage``, when set, is the request, the
    limit and the bound. A learner queued through Kueue gets the bound only: Kueue admits no
    Workload that requests a resource its ClusterQueue does not cover, and ClusterQueues
    rarely cover ephemeral storage."""
    own = exp.spec.learner.resources.ephemeral_storage
    size = own or _mebibytes(learner_scratch_bytes(exp))
    for volume in pod_spec["volumes"]:
        if volume["name"] == "tmp":
            volume["emptyDir"] = {"sizeLimit": size}
    if not exp.spec.queue_name:
        container["resources"]["requests"].setdefault("ephemeral-storage", size)


#: The permanent exit codes a learner can exit with (REFUSED and ENV_FAILED are an actor's).
LEARNER_PERMANENT = tuple(
    sorted(c for c in PERMANENT if c not in (ExitCode.REFUSED, ExitCode.ENV_FAILED))
)


#: Fields of the resolved spec that nothing in the learner's pod reads (``spec`` paths): the
#: actors' own pods (their resources, placement, Spot, service account, metrics port and
#: worker processes: the learner reads only their count, envs and streams, and its init
#: container only their image), the run volume's claim (made once, mounted by name), the
#: finished Job's TTL (patched onto the running Job instead) and the operator's own progress
#: check. They still reach the ConfigMap, which the actors read too: a learner pod started
#: later reads them and ignores them, and the learner validates the whole Experiment it is
#: given, cross-section rules included. An edit of one never replaces the learner.
LEARNER_UNREAD = (
    ("actors", "resources"),
    ("actors", "placement"),
    ("actors", "spot"),
    ("actors", "serviceAccountName"),
    ("actors", "metricsPort"),
    ("actors", "processesPerActor"),
    ("checkpoint", "volumeSize"),
    ("checkpoint", "volumeStorageClassName"),
    ("checkpoint", "volumeRetention"),
    ("ttlSecondsAfterFinished",),
    ("budget", "noProgressSeconds"),
)


def learner_hash(exp: Experiment) -> str:
    """A digest of what the learner Job runs: the whole resolved Experiment but its labels
    and annotations, ``spec.suspend`` (a suspend is applied to the running Job),
    :data:`LEARNER_UNREAD` and ``spec.actors.replicas`` (scaling is the actors' business),
    unless the agent's exploration schedule is defined over the actor count (R2D2's per-actor
    epsilons and evaluation actors): then a new count needs a learner that knows it. A Job
    whose digest differs is replaced, and its new pod resumes from the checkpoint."""
    return digest(learner_document(exp))


def learner_document(exp: Experiment) -> dict[str, Any]:
    """What :func:`learner_hash` digests: compared as data (``0 == 0.0``), it tells whether
    two Experiments ask the learner for the same, whatever their numbers' spelling."""
    document = _hashed_document(exp)
    for path in LEARNER_UNREAD:
        section = document["spec"]
        for key in path[:-1]:
            section = section[key]
        section.pop(path[-1], None)
    # Naming the claim the Experiment has anyway (resuming from a claim of its own name) is
    # no change to the learner; another claim is.
    checkpoint = document["spec"].get("checkpoint") or {}
    if checkpoint.get("resumeFrom") in ("", names(exp.metadata.name).run_volume):
        checkpoint.pop("resumeFrom", None)
    return document


def legacy_learner_hash(exp: Experiment) -> str:
    """The :func:`learner_hash` of releases before :data:`LEARNER_UNREAD`, which digested
    those fields too: a Job made by such a release that runs ``exp`` has it, and is kept (its
    annotation is rewritten) rather than replaced by an operator upgrade."""
    return digest(_hashed_document(exp))


def earlier_learner_hash(document: Mapping[str, Any]) -> str:
    """The :func:`legacy_learner_hash` an earlier release computed for the resolved
    Experiment ``document`` it wrote (its ConfigMap's ``config.yaml``): the same rules on its
    own fields."""
    return digest(_learner_document(copy.deepcopy(dict(document))))


def _hashed_document(exp: Experiment) -> dict[str, Any]:
    return _learner_document(to_document(exp))


def _learner_document(document: dict[str, Any]) -> dict[str, Any]:
    # Labels and annotations are bookkeeping (kubectl label, Argo CD, the chart's labels):
    # the learner reads neither, and replacing a TPU learner for them wastes its hours.
    document["metadata"].pop("labels", None)
    document["metadata"].pop("annotations", None)
    document["spec"]["suspend"] = False
    if (document["spec"].get("agent") or {}).get("name") != "r2d2":
        (document["spec"].get("actors") or {}).pop("replicas", None)
    return document


def learner_accelerator_args(exp: Experiment) -> list[str]:
    """The learner's arguments that say what it was scheduled on: with a GPU or TPU it exits
    NO_ACCELERATOR at once if it finds none, instead of training on the node's CPU."""
    return ["--accelerator", exp.spec.learner.accelerator.kind]


def learner_grace_seconds(exp: Experiment) -> int:
    """The learner pod's ``terminationGracePeriodSeconds``: ``spec.learner.
    terminationGracePeriodSeconds``, but at most :data:`SPOT_GRACE_SECONDS` on Spot, where
    GKE's preemption gives no more whatever the pod asks; the learner then budgets its final
    checkpoint for the 15 s it will get (it reads this value from its config)."""
    grace = exp.spec.learner.termination_grace_period_seconds
    return min(grace, SPOT_GRACE_SECONDS) if exp.spec.learner.spot else grace


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
        ]
    }


def _learner_placement(exp: Experiment, pod_spec: dict[str, Any]) -> None:
    """Node selectors, tolerations, the Spot rule and the user's placement of the learner
    pod, in place."""
    node_selector, tolerations, _ = accelerator_placement(exp)
    node_terms: list[dict[str, Any]] = []
    if exp.spec.learner.spot:
        node_selector = {**node_selector, LABEL_SPOT: "true"}
        tolerations = [*tolerations, SPOT_TOLERATION]
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
    _, _, extra = accelerator_placement(exp)
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
        "env": container_env(exp),
        "resources": container_resources(learner.resources, extra),
        "volumeMounts": [
            *container_mounts(),
            {"name": ENV_SPEC_VOLUME, "mountPath": SHARED_DIR, "readOnly": True},
        ],
        "securityContext": container_security_context(),
        # Ready once it serves the actors' streams (after restoring its checkpoint). The actors
        # reach it through its Service only once it is: probed every second, not every 5 s
        # (every learner start, preemptions' included, waited up to 5 s with none streaming).
        **probes("metrics", "/readyz", period=1),
        # The learner's final status once it stops (its /status is then gone); when it wrote
        # none (an early failure), the end of its log, which says why.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = base_pod_spec(exp, container, "Never", learner_grace_seconds(exp), "learner")
    pod_spec["volumes"].append({"name": ENV_SPEC_VOLUME, "configMap": {"name": n.env_spec}})
    bound_learner_scratch(exp, container, pod_spec)
    add_tls(exp, "learner", container, pod_spec)
    _learner_placement(exp, pod_spec)
    template_meta = {
        "labels": pod_labels(exp, "learner"),
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
    meta = object_meta(exp, n.learner, "learner", owner, namespace)
    meta["annotations"] = {ANNOTATION_LEARNER_HASH: learner_hash(exp)}
    if spec.queue_name:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue_name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}
