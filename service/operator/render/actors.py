"""The actors: a Deployment of ``spec.actors.replicas`` pods (none while suspended, queued or
once the learner has finished)."""

from __future__ import annotations

from typing import Any

from seedrl.common.config import (
    RELEASE_IMAGES,
    Experiment,
    ImageDefaults,
    actor_image,
    to_document,
)
from seedrl.service.operator.render.common import (
    ANNOTATION_CONFIG_HASH,
    LABEL_KUEUE_QUEUE,
    LABEL_SPOT,
    SPOT_GRACE_SECONDS,
    digest,
    names,
    object_meta,
    pod_labels,
    selector_labels,
)
from seedrl.service.operator.render.pod import (
    actors_command,
    SPOT_TOLERATION,
    apply_placement,
    base_pod_spec,
    container_env,
    container_mounts,
    container_resources,
    container_security_context,
    probes,
)
from seedrl.service.operator.render.tls import add_tls


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
    return digest({"name": exp.metadata.name, "spec": part})


def actor_replicas(exp: Experiment, finished: bool = False, admitted: bool = True) -> int:
    """Actor pods to run: none while suspended, while the learner waits for Kueue's admission
    (they would run outside the quota, with no learner to stream to), or once the learner Job
    has finished (they would only retry a learner that is gone)."""
    if exp.spec.suspend or finished or not admitted:
        return 0
    return exp.spec.actors.replicas


def render_actors(
    exp: Experiment,
    owner=None,
    namespace=None,
    finished: bool = False,
    admitted: bool = True,
    images: ImageDefaults = RELEASE_IMAGES,
) -> dict[str, Any]:
    """The actors: a Deployment whose pods take their index from the learner (``--index auto``:
    the lowest free one)."""
    spec = exp.spec
    actors = spec.actors
    n = names(exp.metadata.name)
    container = {
        "name": "actor",
        "image": actor_image(actors, images),
        "imagePullPolicy": "IfNotPresent",
        # A Deployment's pods have no ordinal: with `--index auto` the learner assigns each
        # actor the lowest free index (unique among live actors, kept across reconnects).
        "command": actors_command(
            "--learner", f"{n.service}:{spec.learner.port}", "--index", "auto"
        ),
        "ports": [{"name": "metrics", "containerPort": actors.metrics_port, "protocol": "TCP"}],
        "env": container_env(exp),
        "resources": container_resources(actors.resources),
        "volumeMounts": container_mounts(),
        "securityContext": container_security_context(),
        # Ready while streaming to the learner.
        **probes("metrics", "/readyz"),
    }
    pod_spec = base_pod_spec(exp, container, "Always", SPOT_GRACE_SECONDS if actors.spot else 30)
    add_tls(exp, "actor", container, pod_spec)
    apply_placement(
        actors.placement,
        pod_spec,
        {LABEL_SPOT: "true"} if actors.spot else {},
        [SPOT_TOLERATION] if actors.spot else [],
        [],
    )
    template_meta = {
        "labels": pod_labels(exp, "actor"),
        "annotations": {ANNOTATION_CONFIG_HASH: actor_hash(exp)},
    }
    meta = object_meta(exp, n.actors, "actor", owner, namespace)
    if spec.queue_name:
        # Kueue's pod integration gates each actor pod of the queue (a Workload of its own)
        # until its quota is reserved, so the actors count against the quota as the learner
        # does; on the template, the pods are labelled without Kueue's Deployment integration.
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
