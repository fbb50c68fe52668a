"""Where and how often the learner checkpoints (``spec.checkpoint``), and, in a cluster,
the volume that holds its run directory when no uri is given.
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.fields import DNS_LABEL, QUANTITY_PATTERN, QUANTITY_HINT, param


#: What happens to the learner's run volume when its Experiment is deleted
#: (``spec.checkpoint.volumeRetention``), in the words of a StatefulSet's
#: persistentVolumeClaimRetentionPolicy.
VOLUME_RETENTION = ("Retain", "Delete")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Where and how often the learner checkpoints (``spec.checkpoint``)."""

    uri: str = param(
        "",
        "Checkpoint location: gs://bucket/prefix (Google Cloud Storage, credentials from "
        "Application Default Credentials / Workload Identity), a file:///path URI or a "
        "local path. Empty means runs/<name>/checkpoints under the local launcher and, in "
        "a cluster, a PersistentVolumeClaim of the learner's (volumeSize, "
        "volumeRetention).",
        pattern=r"gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9](/.*)?|file:///.*|[^:]*",
        max_len=1024,
    )
    interval_steps: int = param(1000, "Checkpoint every this many learner steps; 0 disables.", ge=0)
    interval_seconds: float = param(
        300.0, "Checkpoint at least this often in seconds; 0 disables.", ge=0.0
    )
    keep: int = param(3, "How many recent checkpoints to keep.", ge=1)
    volume_size: str = param(
        "10Gi",
        "In a cluster with an empty uri: the size of the PersistentVolumeClaim "
        "(volumeStorageClassName) that holds the learner's run directory, "
        "checkpoints included, so that a learner pod that is replaced (drained, "
        "crashed, preempted) resumes from them.",
        pattern=QUANTITY_PATTERN,
        pattern_hint=QUANTITY_HINT,
        max_len=32,
    )
    volume_storage_class_name: str = param(
        "",
        "In a cluster with an empty uri: the StorageClass of that PersistentVolumeClaim; "
        "empty uses the cluster's default (on GKE a zonal persistent disk: the learner's "
        "replacement pods are then scheduled in the disk's zone).",
        pattern=f"({DNS_LABEL}(\\.{DNS_LABEL})*)?",
        pattern_hint="a StorageClass name (a DNS subdomain), or empty",
        max_len=253,
    )
    volume_retention: str = param(
        "Retain",
        "In a cluster with an empty uri: what happens to that PersistentVolumeClaim, and so "
        "to the checkpoints on it, when the Experiment is deleted (kubectl delete, helm "
        "uninstall). Retain keeps it (it carries no owner reference) until `seedrl volumes "
        "delete` or `kubectl delete pvc` deletes it on purpose; a later Experiment resumes "
        "from it only by naming it in resumeFrom. Delete lets the garbage collector delete "
        "it with the Experiment. An edit takes effect on the running Experiment's claim.",
        choices=VOLUME_RETENTION,
    )
    resume_from: str = param(
        "",
        "In a cluster with an empty uri: a PersistentVolumeClaim that an earlier, deleted "
        "Experiment retained (`seedrl volumes` lists them), whose checkpoints this one "
        "resumes from; it becomes this Experiment's run volume. Empty: <name>-learner-run, "
        "made new. A claim an earlier Experiment left under that name is never taken "
        "without being named here: the Experiment waits with SpecApplied=False "
        "(RunVolumeHeld) saying so, and starts once it is named or deleted.",
        pattern=f"({DNS_LABEL}(\\.{DNS_LABEL})*)?",
        pattern_hint="a PersistentVolumeClaim name (a DNS subdomain), or empty",
        max_len=253,
    )
