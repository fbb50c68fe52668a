"""What the learner runs on in a cluster (``spec.learner.accelerator``): CPUs, NVIDIA GPUs,
or a TPU slice (:mod:`.tpu`).
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.fields import param
from seedrl.common.config.tpu import TPUConfig


#: Accelerators the learner can ask for (``spec.learner.accelerator.kind``).
ACCELERATORS = ("cpu", "gpu", "tpu")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPUConfig:
    """NVIDIA GPUs on GKE for the learner (``spec.learner.accelerator.gpu``)."""

    type: str = param(
        "nvidia-l4",
        "GKE accelerator (node label cloud.google.com/gke-"
        "accelerator), e.g. nvidia-l4, nvidia-tesla-a100.",
        pattern=r"[a-z0-9]([-a-z0-9]*[a-z0-9])?",
        max_len=63,
    )
    count: int = param(1, "GPUs requested as nvidia.com/gpu.", ge=1, le=16)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AcceleratorConfig:
    """What the learner's inference and training run on in a cluster
    (``spec.learner.accelerator``); the local launcher uses whatever the machine has."""

    kind: str = param(
        "cpu",
        "One of: " + ", ".join(ACCELERATORS) + "; the tpu or gpu section below then applies.",
        choices=ACCELERATORS,
    )
    tpu: TPUConfig = param(doc="The TPU slice, when kind is tpu.", factory=TPUConfig)
    gpu: GPUConfig = param(doc="The GPUs, when kind is gpu.", factory=GPUConfig)
