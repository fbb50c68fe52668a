"""The central learner (``spec.learner``): its limits on actor streams, batching, the
optimizer, how it uses its devices, TLS, its image (:func:`learner_image`) and its pod.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from seedrl.common.config.accelerator import AcceleratorConfig
from seedrl.common.config.cluster import LEARNER_IMAGES, RELEASE_IMAGES, ImageDefaults
from seedrl.common.config.fields import IMAGE_PATTERN, param
from seedrl.common.config.placement import PlacementConfig, ResourcesConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """The optimizer of the training step (``spec.learner.optimizer``)."""

    name: str = param(
        "adam", "Optimizer, one of: adam, rmsprop, sgd.", choices=("adam", "rmsprop", "sgd")
    )
    learning_rate: float = param(
        1e-3,
        "Step size. Left out (or null): 1e-4 for r2d2 (the R2D2 paper's Adam), 1e-3 for "
        "vtrace and ppo.",
        gt=0.0,
        default_by=("spec.agent.name", {"r2d2": 1e-4}),
    )
    epsilon: float = param(
        1e-7,
        "Numerical-stability epsilon of adam and rmsprop. Left out (or null): 1e-3 for r2d2 "
        "(the R2D2 paper's Adam epsilon), 1e-7 (Keras') for vtrace and ppo.",
        gt=0.0,
        default_by=("spec.agent.name", {"r2d2": 1e-3}),
    )
    momentum: float = param(0.0, "Momentum of rmsprop and sgd.", ge=0.0, le=0.999)
    rho: float = param(
        0.9,
        "Decay of rmsprop's running mean of squared gradients (Keras' and TensorFlow's "
        "default 0.9; IMPALA used 0.99).",
        ge=0.0,
        le=0.9999,
    )
    grad_clip_norm: float = param(40.0, "Clip gradients to this global norm; 0 disables.", ge=0.0)
    linear_decay: bool = param(
        False, "Decay the learning rate linearly to zero over spec.budget.maxEnvSteps."
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DevicesConfig:
    """How the learner uses the devices of its machine (``spec.learner.devices``): SEED's split
    of a TPU host's cores into inference cores and training cores, for TPUs, GPUs or CPUs.

    Training replicas share each batch (split along the batch axis) and all-reduce the mean
    gradient, so an update equals the one-device update on the whole batch. Inference batches
    go round-robin over the inference devices.
    """

    strategy: str = param(
        "auto",
        "'auto' (a TPU VM's cores with TPUStrategy, several GPUs with MirroredStrategy, "
        "else the default one-device strategy), or one of 'default', 'mirrored', 'tpu' "
        "to insist; a strategy whose devices are missing is an error.",
        choices=("auto", "default", "mirrored", "tpu"),
    )
    inference_devices: float = param(
        0,
        "Devices that only serve inference: a count (1, 2, ...) or, below 1, a fraction of "
        "the devices found (0.25: a quarter, at least one). 0 shares the training devices: "
        "inference then goes round-robin over them.",
        ge=0.0,
    )
    training_devices: int = param(
        0,
        "Devices that train (one replica each); 0 takes every device not reserved for inference.",
        ge=0,
    )
    logical_cpu_devices: int = param(
        0,
        "Split the host CPU into this many logical devices when there is no accelerator, "
        "to test and measure the multi-device paths on CPU; 0 keeps one CPU device.",
        ge=0,
        le=64,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TLSConfig:
    """TLS on the gRPC stream between actors and learner (``spec.learner.tls``), in a cluster.

    The operator provisions the learner's certificate (a cert-manager Certificate where the
    cluster has cert-manager, else a self-signed CA and leaf of its own in a Secret), mounts it
    into the learner and the CA alone into the actors, which verify the learner's Service name.
    ``seedrl train`` streams over a unix socket on one machine and uses no TLS."""

    enabled: bool = param(
        True,
        "Serve the learner's gRPC port over TLS in a cluster; a plaintext actor is then refused.",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerConfig:
    """The central learner: batched inference and training (``spec.learner``)."""

    max_envs_per_actor: Optional[int] = param(
        None,
        "Most envs one actor stream may declare in its hello; null: exactly as many as one "
        "stream of this Experiment's actors steps (envsPerActor / streamsPerActor, rounded "
        "up), so that no stream passes for more envs than the run's own actors have. A "
        "larger hello, or one whose steps would exceed the learner's message limit, is "
        "refused before the learner allocates anything for it. Set it to serve actors "
        "configured apart from this Experiment.",
        ge=1,
        le=65536,
    )
    max_streams: int = param(
        1024,
        "Most actor streams the learner serves at once, and most it holds open waiting for "
        "their hello; a stream past either is refused with RESOURCE_EXHAUSTED (actors retry). "
        "Must fit the Experiment's own actors (replicas x streamsPerActor).",
        ge=1,
        le=65536,
    )
    max_total_envs: int = param(
        16384,
        "Most envs over all open actor streams; a hello that would pass it is refused with "
        "RESOURCE_EXHAUSTED (actors retry). It bounds the learner's per-env buffers to about "
        "maxTotalEnvs x (unrollLength + 1) x the bytes of one stored step (observation, "
        "action, reward, agent outputs). Must fit the Experiment's own actors (replicas x "
        "envsPerActor).",
        ge=1,
        le=1_048_576,
    )
    hello_timeout_seconds: float = param(
        10.0,
        "A stream that sends no hello within this many seconds of opening is closed "
        "(DEADLINE_EXCEEDED, counted as a refusal).",
        gt=0.0,
        le=3600.0,
    )
    step_timeout_seconds: float = param(
        60.0,
        "A stream that sends no step within this many seconds of the learner's answer to "
        "its previous one is closed (DEADLINE_EXCEEDED, counted as a refusal; a live actor "
        "reconnects). Raise it for envs whose step or reset of all of a stream's envs can "
        "take longer. A stream silent for over a second already stops holding inference "
        "batches open.",
        gt=0.0,
        le=86400.0,
    )
    inference_batch_size: int = param(
        64,
        "Most environment steps evaluated in one inference call, summed over all actor streams.",
        ge=1,
    )
    inference_max_wait_ms: float = param(
        2.0,
        "How long the batcher waits to fill a batch; a partial batch runs after this.",
        ge=0.0,
        le=10_000.0,
    )
    unroll_length: int = param(
        20,
        "Steps per trajectory unroll T (the learner stores T+1, "
        "overlapping consecutive unrolls by one step).",
        ge=2,
    )
    batch_size: int = param(16, "Unrolls per training step.", ge=1)
    queue_capacity: int = param(
        64, "Unrolls waiting for training; when full, inference waits (bounds policy lag).", ge=1
    )
    devices: DevicesConfig = param(
        doc="Which devices run inference and training.", factory=DevicesConfig
    )
    optimizer: OptimizerConfig = param(doc="Optimizer settings.", factory=OptimizerConfig)
    port: int = param(
        8686,
        "TCP port of the learner's gRPC service in a cluster; the local "
        "launcher uses a unix socket instead.",
        ge=1,
        le=65535,
    )
    metrics_port: int = param(
        9090,
        "TCP port of the learner's HTTP endpoint in a cluster: "
        "GET /metrics (Prometheus) and GET /status (JSON "
        "progress, read by the operator).",
        ge=1,
        le=65535,
    )
    accelerator: AcceleratorConfig = param(
        doc="The learner's accelerator in a cluster.", factory=AcceleratorConfig
    )
    tls: TLSConfig = param(doc="TLS between actors and learner in a cluster.", factory=TLSConfig)
    image: str = param(
        "",
        "Container image of the learner in a cluster; empty: this release's learner image "
        "for accelerator.kind ("
        + ", ".join(f"{kind} {image}" for kind, image in LEARNER_IMAGES.items())
        + "), since only the "
        "gpu and tpu builds reach those devices.",
        pattern=f"({IMAGE_PATTERN})?",
        pattern_hint="an image reference, or empty",
        max_len=512,
    )
    resources: ResourcesConfig = param(
        doc="The learner container's resources in a cluster.",
        factory=lambda: ResourcesConfig(cpu="4", memory="16Gi"),
    )
    termination_grace_period_seconds: int = param(
        300,
        "How long a stopping learner may take to write its final checkpoint (it "
        "checkpoints on SIGTERM) before it is killed: the pod's grace period in a cluster, "
        "the launcher's wait locally; at most 15 with spot (GKE gives a preempted pod "
        "no more). The learner gives up on the checkpoint 5 s before and exits 1, so the "
        "run resumes from the previous one.",
        ge=10,
    )
    placement: PlacementConfig = param(
        doc="Where the learner pod may run in a cluster.", factory=PlacementConfig
    )
    spot: bool = param(
        False,
        "Run the learner on GKE Spot VMs (node label cloud.google.com/gke-spot). By "
        "default it is kept off them (a required node affinity): a preemption gives a "
        "pod at most 15 s, too little for a final checkpoint of a large learner, so each "
        "one loses the training since the last periodic checkpoint.",
    )


def learner_image(learner: LearnerConfig, defaults: ImageDefaults = RELEASE_IMAGES) -> str:
    """The learner's container image: ``spec.learner.image`` when set, else the release's
    image for the accelerator it is scheduled on (:data:`LEARNER_IMAGES` for this release)."""
    return learner.image or defaults.learner(learner.accelerator.kind)
