"""What every child of an Experiment shares: the children's names, their labels, owner
references and metadata, and the paths, labels and annotations the pods, the operator and the
cluster agree on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping

from seedrl.common.config import API_VERSION, KIND, Experiment


CONFIG_DIR = "/etc/seedrl"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
RUN_DIR = "/var/run/seedrl"
#: Where the learner writes its final status (the container's terminationMessagePath).
TERMINATION_LOG = "/dev/termination-log"
#: Where the learner pod mounts its env spec ConfigMap (releases before 0.2 shared an emptyDir
#: there between an init container and the learner).
SHARED_DIR = "/shared"
#: The learner pod's volume of the env spec ConfigMap.
ENV_SPEC_VOLUME = "shared"
#: The key of the env spec in its ConfigMap (:attr:`Names.env_spec`).
ENV_SPEC_KEY = "env_spec.json"
#: The env spec the learner serves (``--env-spec``): derived from the Experiment with the actor
#: image's code by the env-spec Job (:mod:`.env_spec`), under the actors' identity, and put
#: in a ConfigMap by the operator, as ``seedrl train`` derives it locally.
ENV_SPEC_FILE = f"{SHARED_DIR}/{ENV_SPEC_KEY}"
#: The env-spec Job's container (and the learner pod's init container in releases before 0.2).
ENV_SPEC_CONTAINER = "env-spec"
#: The env-spec Job's pods' role label (``seedrl.dev/role``).
ENV_SPEC_ROLE = "env-spec"
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
#: On a learner Job an earlier release made and this one kept (it runs the same spec): this
#: release's :func:`learner_hash` of it. :data:`ANNOTATION_LEARNER_HASH` keeps the earlier
#: release's, so that a rollback to that release keeps the Job too.
ANNOTATION_ADOPTED_HASH = "seedrl.dev/learner-hash-adopted"
#: The cluster autoscaler does not remove a node that runs a pod with this annotation "false".
ANNOTATION_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
#: GKE's label of Spot VM nodes.
LABEL_SPOT = "cloud.google.com/gke-spot"
#: GKE's label of the older preemptible VM nodes (24 h at most, the same 15 s notice).
LABEL_PREEMPTIBLE = "cloud.google.com/gke-preemptible"
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: A preempted GKE Spot VM gives non-system pods at most 15 s of graceful shutdown (the rest of
#: its 30 s notice goes to system pods); asking for more only means being killed mid-exit.
SPOT_GRACE_SECONDS = 15


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
    env_spec: str


def names(experiment_name: str) -> Names:
    """Children's names: ``<name>-config``, ``<name>-learner`` (Job, Service, NetworkPolicy),
    ``<name>-actors``, ``<name>-envspec`` (Job, ConfigMap). Experiment names are DNS labels
    of at most 63 characters; the suffixes keep Service and Job names (limit 63) valid up to a
    55-character Experiment name, which validation of the operator enforces through
    :func:`validate`."""
    return Names(
        config=f"{experiment_name}-config",
        learner=f"{experiment_name}-learner",
        service=f"{experiment_name}-learner",
        actors=f"{experiment_name}-actors",
        network_policy=f"{experiment_name}-learner",
        disruption_budget=f"{experiment_name}-learner",
        run_volume=f"{experiment_name}-learner-run",
        # A Job's name is at most 63 characters (its pods' job-name label): 55 + 8.
        env_spec=f"{experiment_name}-envspec",
    )


def selector_labels(experiment_name: str, role: str) -> dict[str, str]:
    """The labels that select one role's pods (stable: they are in immutable selectors)."""
    return {LABEL_EXPERIMENT: experiment_name, LABEL_ROLE: role}


def child_labels(exp: Experiment, role: str | None = None) -> dict[str, str]:
    """The labels of a child object: the Experiment's own, then the operator's."""
    return {**exp.metadata.labels, **pod_labels(exp, role)}


def pod_labels(exp: Experiment, role: str | None = None) -> dict[str, str]:
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


def object_meta(
    exp: Experiment,
    name: str,
    role: str | None,
    owner: Mapping[str, Any] | None,
    namespace: str | None,
) -> dict[str, Any]:
    """The metadata of a child: its name, :func:`child_labels`, and the namespace and owner
    reference when given."""
    meta: dict[str, Any] = {"name": name, "labels": child_labels(exp, role)}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def digest(document: Any) -> str:
    """A short digest of a JSON document (its keys sorted), for the hashes children carry."""
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]
