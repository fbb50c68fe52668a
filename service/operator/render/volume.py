"""The learner's run directory as a PersistentVolumeClaim, for an Experiment whose checkpoints
have no ``spec.checkpoint.uri`` to go to."""

from __future__ import annotations

from typing import Any

from seedrl.common.config import Experiment
from seedrl.service.operator.render.common import names, object_meta


def needs_run_volume(exp: Experiment) -> bool:
    """Whether the learner's run directory needs a PersistentVolumeClaim: with no
    ``spec.checkpoint.uri`` its checkpoints live there and must outlive each pod."""
    return not exp.spec.checkpoint.uri


#: The uid of the Experiment whose run directory a claim holds (the one that made it, or the
#: later one that resumed from it with ``spec.checkpoint.resumeFrom``).
ANNOTATION_RUN_OF = "seedrl.dev/run-of"


def run_volume_claim(exp: Experiment) -> str:
    """The name of the learner's run-volume claim: ``spec.checkpoint.resumeFrom``, else
    ``<name>-learner-run``."""
    return exp.spec.checkpoint.resume_from or names(exp.metadata.name).run_volume


def render_run_volume(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The learner's run directory (status, metrics, checkpoints) as a PersistentVolumeClaim,
    for an Experiment without ``spec.checkpoint.uri``: each learner pod is a new pod, and an
    emptyDir would lose the checkpoints with the old one.

    With ``spec.checkpoint.volumeRetention: Retain`` (the default) the claim has no owner
    reference: deleting the Experiment (``kubectl delete``, ``helm uninstall``) leaves it and
    its checkpoints, since the garbage collector would delete an owned claim and GKE's
    default StorageClass (reclaim policy Delete) its disk. A later Experiment resumes from it
    only by naming it (:class:`~seedrl.service.operator.run_volume.RunVolumes`): the claim
    records whose run it holds (:data:`ANNOTATION_RUN_OF`)."""
    checkpoint = exp.spec.checkpoint
    kept = checkpoint.volume_retention == "Retain"
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": checkpoint.volume_size}},
    }
    if checkpoint.volume_storage_class_name:
        spec["storageClassName"] = checkpoint.volume_storage_class_name
    meta = object_meta(exp, run_volume_claim(exp), "learner", None if kept else owner, namespace)
    if owner is not None:
        meta.setdefault("annotations", {})[ANNOTATION_RUN_OF] = owner["uid"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
