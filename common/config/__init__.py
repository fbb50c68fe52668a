"""The Experiment document: typed dataclasses, YAML loading, overrides and validation.

One Experiment document drives every way of running seedrl: `seedrl train FILE` on one machine
and, later, `kubectl apply` through the operator. It is Kubernetes-shaped (``apiVersion``,
``kind``, ``metadata``, ``spec`` and camelCase keys) so the same file works in both places.

Every field is declared once, in this package, with its default, its docstring and its
constraints (the ``param`` helper stores them in the dataclass field metadata). Parsing and
validation happen in exactly one place, :func:`parse_experiment`, which collects every problem it
finds and raises one :class:`ConfigError` naming each field path and the reason, e.g.
``spec.learner.unrollLength: must be >= 2, got 0``. Unknown keys are rejected.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Optional, TypeVar

import yaml

from seedrl.common.config.fields import (
    _DNS_LABEL,
    _IMAGE,
    _QUANTITY,
    _QUANTITY_HINT,
    INT64_MAX,
    INT64_MIN,
    ConfigError,
    field_key,
    param,
)
from seedrl.common.config.cluster import (
    ACTOR_IMAGE,
    API_VERSION,
    GROUP,
    IMAGE_REGISTRY,
    KIND,
    LEARNER_IMAGES,
    PLURAL,
    RELEASE,
    RELEASE_IMAGES,
    SINGULAR,
    VERSION,
    ImageDefaults,
)
from seedrl.common.config.tpu import (
    TPU_GENERATIONS,
    tpu_cel_rules,
    tpu_chips,
    tpu_problems,
    TPUConfig,
    TPUGeneration,
)
from seedrl.common.config.accelerator import (
    ACCELERATORS,
    AcceleratorConfig,
    GPUConfig,
)
from seedrl.common.config.env import (
    ATARI_PREFIX,
    ENV_BACKENDS,
    ENVPOOL_OPTIONS,
    AtariConfig,
    EnvConfig,
    envpool_problems,
    FootballConfig,
)
from seedrl.common.config.network import (
    MAX_CONV_CHANNELS,
    MAX_CONV_STACKS,
    MAX_HIDDEN_LAYERS,
    MAX_LAYER_WIDTH,
    MAX_LSTM_SIZE,
    NETWORKS,
    PRECISIONS,
    NetworkConfig,
)
from seedrl.common.config.vtrace import (
    VTraceConfig,
)
from seedrl.common.config.r2d2 import (
    R2D2Config,
)
from seedrl.common.config.ppo import (
    PPOConfig,
)
from seedrl.common.config.agent import (
    AGENTS,
    AgentConfig,
)

T = TypeVar("T")

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "ConfigError",
    "field_key",
    "param",
    "ACTOR_IMAGE",
    "API_VERSION",
    "GROUP",
    "IMAGE_REGISTRY",
    "KIND",
    "LEARNER_IMAGES",
    "PLURAL",
    "RELEASE",
    "RELEASE_IMAGES",
    "SINGULAR",
    "VERSION",
    "ImageDefaults",
    "TPU_GENERATIONS",
    "tpu_cel_rules",
    "tpu_chips",
    "tpu_problems",
    "TPUConfig",
    "TPUGeneration",
    "ACCELERATORS",
    "AcceleratorConfig",
    "GPUConfig",
    "ATARI_PREFIX",
    "ENV_BACKENDS",
    "ENVPOOL_OPTIONS",
    "AtariConfig",
    "EnvConfig",
    "envpool_problems",
    "FootballConfig",
    "MAX_CONV_CHANNELS",
    "MAX_CONV_STACKS",
    "MAX_HIDDEN_LAYERS",
    "MAX_LAYER_WIDTH",
    "MAX_LSTM_SIZE",
    "NETWORKS",
    "PRECISIONS",
    "NetworkConfig",
    "VTraceConfig",
    "R2D2Config",
    "PPOConfig",
    "AGENTS",
    "AgentConfig",
    "AFFINITY_KEYS",
    "placement_problems",
    "PlacementConfig",
    "ResourcesConfig",
    "TolerationConfig",
    "DevicesConfig",
    "learner_image",
    "LearnerConfig",
    "OptimizerConfig",
    "TLSConfig",
    "actor_image",
    "ActorsConfig",
    "envs_per_stream",
    "VOLUME_RETENTION",
    "CheckpointConfig",
    "BudgetConfig",
    "Experiment",
    "Metadata",
    "Spec",
    "stream_envs_limit",
    "parse_document",
    "parse_section",
    "cel_rules",
    "dependent_default_fields",
    "parse_experiment",
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "load_yaml",
    "read_yaml_file",
    "apply_overrides",
    "dump_experiment",
    "load_experiment",
    "set_path",
    "to_document",
]


#: What happens to the learner's run volume when its Experiment is deleted
#: (``spec.checkpoint.volumeRetention``), in the words of a StatefulSet's
#: persistentVolumeClaimRetentionPolicy.
VOLUME_RETENTION = ("Retain", "Delete")


# --------------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------------


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
class ResourcesConfig:
    """Compute resources of one pod's container in a cluster (Kubernetes quantities); the local
    launcher ignores them. Memory is requested and limited alike (a pod that outgrows it is
    stopped rather than starving its neighbours); CPU is limited only when cpuLimit is set."""

    cpu: str = param(
        "1",
        "CPU request, e.g. '500m' or '4'.",
        pattern=_QUANTITY,
        pattern_hint=_QUANTITY_HINT,
        max_len=32,
    )
    memory: str = param(
        "2Gi",
        "Memory request and limit, e.g. '16Gi'.",
        pattern=_QUANTITY,
        pattern_hint=_QUANTITY_HINT,
        max_len=32,
    )
    cpu_limit: str = param(
        "",
        "CPU limit; empty sets none, so the container may use idle cores.",
        pattern=f"({_QUANTITY})?",
        pattern_hint=_QUANTITY_HINT,
        max_len=32,
    )
    ephemeral_storage: str = param(
        "",
        "Ephemeral storage request and limit (logs, scratch); empty sets none.",
        pattern=f"({_QUANTITY})?",
        pattern_hint=_QUANTITY_HINT,
        max_len=32,
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
class TolerationConfig:
    """One Kubernetes toleration of a role's pods (``spec.learner.placement.tolerations[]``,
    ``spec.actors.placement.tolerations[]``): the pods may run on nodes with a matching taint.
    """

    key: str = param(
        "",
        "The taint key; empty with operator Exists tolerates every taint.",
        pattern=r"([A-Za-z0-9][-A-Za-z0-9_./]*)?",
        pattern_hint="a label key such as team or example.com/dedicated",
        max_len=316,
    )
    operator: str = param(
        "Equal", "Equal (the taint's value must be value) or Exists.", choices=("Equal", "Exists")
    )
    value: str = param("", "The taint value, with operator Equal.", max_len=63)
    effect: str = param(
        "",
        "The taint effect to tolerate: NoSchedule, PreferNoSchedule, NoExecute; empty: all.",
        choices=("", "NoSchedule", "PreferNoSchedule", "NoExecute"),
    )
    toleration_seconds: Optional[int] = param(
        None,
        "With effect NoExecute: how long the pod stays once the taint appears; null: forever.",
        ge=0,
    )


#: The keys of a pod's ``affinity`` (``spec.*.placement.affinity``).
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlacementConfig:
    """Where a role's pods may run in a cluster (``spec.learner.placement``,
    ``spec.actors.placement``), merged with what the operator adds itself: its node selectors
    (TPU and GPU labels, Spot) win over yours on the same key, its tolerations come first, and
    its required node affinity (the learner kept off Spot and preemptible nodes) is added to
    every term of yours. The local launcher ignores it."""

    node_selector: dict[str, str] = param(
        doc="Node labels the pods require, e.g. {cloud.google.com/gke-nodepool: rl-pool}.",
        factory=dict,
    )
    tolerations: list[TolerationConfig] = param(
        doc="Taints the pods tolerate (team-tainted pools, reservations).", factory=list
    )
    affinity: dict[str, Any] = param(
        doc="A Kubernetes Affinity (nodeAffinity, podAffinity, podAntiAffinity), as in a pod spec.",
        factory=dict,
    )
    priority_class_name: str = param(
        "",
        "PriorityClass of the pods; empty uses the cluster's default.",
        pattern=f"({_DNS_LABEL}(\\.{_DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    image_pull_secrets: list[str] = param(
        doc="Names of Secrets in the Experiment's namespace to pull the images with.",
        factory=list,
        pattern=f"{_DNS_LABEL}(\\.{_DNS_LABEL})*",
        pattern_hint="a Secret name (a DNS subdomain)",
        max_len=253,
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
        pattern=f"({_IMAGE})?",
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorsConfig:
    """The actors that step environments (``spec.actors``)."""

    replicas: int = param(2, "Actor processes (pods in a cluster), one gRPC stream each.", ge=1)
    envs_per_actor: int = param(
        8,
        "Environments stepped by each actor; one message carries one step of all of them.",
        ge=1,
        le=4096,
    )
    streams_per_actor: int = param(
        1,
        "gRPC streams each actor keeps in flight, each with its share of the envs: while the "
        "learner answers one stream, the actor steps the envs of another. Helps when env "
        "steps are slow next to a round trip; for CartPole, 2 measured slower than 1.",
        ge=1,
        le=64,
    )
    processes_per_actor: int = param(
        0,
        "Worker processes that step each actor's environments in parallel, exchanging "
        "arrays through shared memory; 0 steps them inside the actor process (best for "
        "environments much cheaper than a process wake-up, like CartPole).",
        ge=0,
        le=256,
    )
    image: str = param(
        "",
        f"Container image of the actors in a cluster; empty: the release's actor image "
        f"({ACTOR_IMAGE} for this release, from the operator's registry), the same release "
        f"as the learner's.",
        pattern=f"({_IMAGE})?",
        pattern_hint="an image reference, or empty",
        max_len=512,
    )
    resources: ResourcesConfig = param(
        doc="Each actor container's resources in a cluster.", factory=ResourcesConfig
    )
    placement: PlacementConfig = param(
        doc="Where the actor pods may run in a cluster.", factory=PlacementConfig
    )
    spot: bool = param(
        False,
        "Run actors on GKE Spot VMs (node label cloud.google.com/gke-"
        "spot): much cheaper, and a preempted actor only costs its "
        "in-flight unrolls.",
    )
    service_account_name: str = param(
        "",
        "Kubernetes service account of the actor pods; empty uses the namespace's default. "
        "Never spec.serviceAccountName (the learner's): actors run environment code and "
        "need no cloud credentials, so with Workload Identity they must not get the "
        "learner's access to the checkpoint bucket.",
        pattern=f"({_DNS_LABEL}(\\.{_DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    metrics_port: int = param(
        9091,
        "TCP port of each actor's HTTP endpoint in a cluster: GET "
        "/metrics (Prometheus). The local launcher picks free "
        "ports instead.",
        ge=1,
        le=65535,
    )


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
        pattern=_QUANTITY,
        pattern_hint=_QUANTITY_HINT,
        max_len=32,
    )
    volume_storage_class_name: str = param(
        "",
        "In a cluster with an empty uri: the StorageClass of that PersistentVolumeClaim; "
        "empty uses the cluster's default (on GKE a zonal persistent disk: the learner's "
        "replacement pods are then scheduled in the disk's zone).",
        pattern=f"({_DNS_LABEL}(\\.{_DNS_LABEL})*)?",
        pattern_hint="a StorageClass name (a DNS subdomain), or empty",
        max_len=253,
    )
    volume_retention: str = param(
        "Retain",
        "In a cluster with an empty uri: what happens to that PersistentVolumeClaim, and so "
        "to the checkpoints on it, when the Experiment is deleted (kubectl delete, helm "
        "uninstall). Retain keeps it (it carries no owner reference): an Experiment of the "
        "same name and namespace resumes from it, and `kubectl delete pvc <name>-learner-run` "
        "deletes it on purpose. Delete lets the garbage collector delete it with the "
        "Experiment.",
        choices=VOLUME_RETENTION,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """When training stops (``spec.budget``); the first limit reached wins."""

    max_env_steps: int = param(
        1_000_000, "Stop after this many environment steps over all actors; 0 means no limit.", ge=0
    )
    max_seconds: float = param(0.0, "Stop after this much training time; 0 means no limit.", ge=0.0)
    target_return: Optional[float] = param(
        None,
        "Stop once the mean return of the last returnWindow episodes reaches this (the "
        "evaluation actors' episodes when the agent has any); null means never.",
    )
    return_window: int = param(100, "Episodes averaged for the mean return and targetReturn.", ge=1)
    no_progress_seconds: float = param(
        600.0,
        "A run with no env step for this long (from its start, or since its last env "
        "step) cannot make progress: `seedrl train` stops it and exits non-zero with "
        "the reason, and in a cluster the Experiment's Progressing condition turns "
        "False (reason NoProgress). 0 never gives up.",
        ge=0.0,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """What to train and with which resources (``spec``)."""

    seed: int = param(
        0,
        "Seed of the environments and the learner's sampling: 0 to 2^63-1 (an int64, as the "
        "CRD stores it; the learner's and the actors' generators take any of them).",
        ge=0,
        le=INT64_MAX,
    )
    env: EnvConfig = param(doc="The environment.", factory=EnvConfig)
    agent: AgentConfig = param(doc="The agent and its network.", factory=AgentConfig)
    learner: LearnerConfig = param(doc="The learner.", factory=LearnerConfig)
    actors: ActorsConfig = param(doc="The actors.", factory=ActorsConfig)
    checkpoint: CheckpointConfig = param(doc="Checkpoints.", factory=CheckpointConfig)
    budget: BudgetConfig = param(doc="When to stop.", factory=BudgetConfig)
    # Cluster-only fields: the operator reads them, the local launcher ignores them.
    service_account_name: str = param(
        "",
        "Kubernetes service account of the learner pod, e.g. one bound to a Google "
        "service account through Workload Identity for gs:// checkpoints; empty uses the "
        "namespace's default. The actors do not run as it (spec.actors.serviceAccountName).",
        pattern=f"({_DNS_LABEL}(\\.{_DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    suspend: bool = param(
        False,
        "Suspend the experiment: the learner checkpoints and stops "
        "and the actors scale to zero; false resumes from the "
        "checkpoint.",
    )
    active_deadline_seconds: Optional[int] = param(
        None, "Fail the learner once it has run this long in the cluster; null: no deadline.", ge=1
    )
    backoff_limit: int = param(
        6,
        "Learner restarts (each resuming from the last checkpoint) "
        "before the experiment is marked Failed.",
        ge=0,
    )
    ttl_seconds_after_finished: Optional[int] = param(
        None, "Delete the finished learner Job this long after it ends; null keeps it.", ge=0
    )
    queue_name: str = param(
        "",
        "Kueue LocalQueue to admit the experiment through (label "
        "kueue.x-k8s.io/queue-name on the learner Job); empty: no "
        "queue.",
        pattern=f"({_DNS_LABEL})?",
        max_len=63,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Metadata:
    """Kubernetes object metadata (``metadata``)."""

    name: str = param(
        doc="Experiment name: a DNS-1123 label (lowercase letters, digits and "
        "'-'). Required, with no default, because it names the run directory "
        "and every Kubernetes object of the experiment.",
        pattern=_DNS_LABEL,
        max_len=63,
    )
    namespace: Optional[str] = param(
        None, "Kubernetes namespace; ignored by the local launcher.", pattern=_DNS_LABEL, max_len=63
    )
    labels: dict[str, str] = param(doc="Kubernetes labels, copied onto every object.", factory=dict)
    annotations: dict[str, str] = param(doc="Kubernetes annotations.", factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Experiment:
    """A whole Experiment document."""

    api_version: str = param(
        API_VERSION, "Schema version of this document.", choices=(API_VERSION,)
    )
    kind: str = param(KIND, "Always Experiment.", choices=(KIND,))
    metadata: Metadata = param(doc="Name and Kubernetes metadata.")
    spec: Spec = param(doc="What to train and how.", factory=Spec)


# --------------------------------------------------------------------------------------------
# Parsing and validation: the one place
# --------------------------------------------------------------------------------------------


#: Fields an earlier release had, by (section class, key): what to write instead. Each is
#: refused (its meaning changed, so reading it silently would train something else), with this.
_RETIRED = {
    ("R2D2Config", "sequenceLength"): (
        "; it counted the burn-in: now trainLength counts the trained steps and burnIn "
        "precedes them, so sequenceLength S with burnIn B is trainLength S - B and "
        "sequencePeriod S - B"
    ),
}


class _Invalid:
    """Marks a value that failed parsing, so that parsing can go on and report everything."""


_INVALID = _Invalid()


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _fmt(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def _check_constraints(
    value: Any, meta: Mapping[str, Any], path: str, problems: list[tuple[str, str]]
) -> None:
    if isinstance(value, list):
        if meta.get("min_items") is not None and len(value) < meta["min_items"]:
            problems.append(
                (path, f"must have at least {meta['min_items']} item(s), got {len(value)}")
            )
        if meta.get("max_items") is not None and len(value) > meta["max_items"]:
            problems.append(
                (path, f"must have at most {meta['max_items']} item(s), got {len(value)}")
            )
        for i, item in enumerate(value):
            _check_scalar(item, meta, f"{path}[{i}]", problems)
        return
    _check_scalar(value, meta, path, problems)


def _check_scalar(
    value: Any, meta: Mapping[str, Any], path: str, problems: list[tuple[str, str]]
) -> None:
    if value is None or isinstance(value, (dict, list)):
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        problems.append((path, f"must be one of {', '.join(map(str, choices))}; got {value!r}"))
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if meta.get("ge") is not None and value < meta["ge"]:
            problems.append((path, f"must be >= {_fmt(meta['ge'])}, got {_fmt(value)}"))
        if meta.get("gt") is not None and value <= meta["gt"]:
            problems.append((path, f"must be > {_fmt(meta['gt'])}, got {_fmt(value)}"))
        if meta.get("le") is not None and value > meta["le"]:
            problems.append((path, f"must be <= {_fmt(meta['le'])}, got {_fmt(value)}"))
        if value != value or value in (float("inf"), float("-inf")):
            problems.append((path, f"must be a finite number, got {value}"))
    if isinstance(value, str):
        if meta.get("max_len") is not None and len(value) > meta["max_len"]:
            problems.append(
                (path, f"must be at most {meta['max_len']} characters, got {len(value)}")
            )
        elif meta.get("pattern") and not re.fullmatch(meta["pattern"], value):
            hint = meta.get("pattern_hint") or "lowercase letters, digits and '-'"
            problems.append((path, f"must match {meta['pattern']} ({hint}), got {value!r}"))


def _is_json_like(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, list):
        return all(_is_json_like(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_like(v) for k, v in value.items())
    return False


def _parse_value(tp: Any, value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """Converts one document value to the declared type, recording problems instead of raising."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if value is None:
            return None
        return _parse_value(inner[0], value, path, problems)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _parse_dataclass(tp, value, path, problems)
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append((path, f"must be true or false, got {_describe(value)}"))
        return _INVALID
    if tp is int:
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ):
            problems.append((path, f"must be an integer, got {_describe(value)}"))
            return _INVALID
        if not INT64_MIN <= value <= INT64_MAX:
            # The learner's counters and the CRD are int64: a larger value would overflow them.
            problems.append(
                (path, f"must be an integer within int64 (-2^63 to 2^63-1), got {_fmt(value)}")
            )
            return _INVALID
        return int(value)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        problems.append((path, f"must be a number, got {_describe(value)}"))
        return _INVALID
    if tp is str:
        if isinstance(value, str):
            return value
        problems.append((path, f"must be a string, got {_describe(value)}"))
        return _INVALID
    if origin is list:
        if not isinstance(value, list):
            problems.append((path, f"must be a list, got {_describe(value)}"))
            return _INVALID
        items = [_parse_value(args[0], v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        return _INVALID if any(i is _INVALID for i in items) else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.append((path, f"must be a mapping, got {_describe(value)}"))
            return _INVALID
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                problems.append((path, f"keys must be strings, got {_describe(k)}"))
                return _INVALID
            if args[1] is Any:
                if not _is_json_like(v):
                    problems.append(
                        (
                            f"{path}.{k}",
                            f"must be plain data (numbers, strings, "
                            f"booleans, lists, mappings), got "
                            f"{_describe(v)}",
                        )
                    )
                    return _INVALID
                out[k] = v
            else:
                out[k] = _parse_value(args[1], v, f"{path}.{k}", problems)
        return out
    raise TypeError(f"unsupported config type {tp!r} at {path}")  # a bug in this module


def _parse_dataclass(cls: type, value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.append((path or "<document>", f"must be a mapping, got {_describe(value)}"))
        return _INVALID
    hints = typing.get_type_hints(cls)
    fields = {field_key(f): f for f in dataclasses.fields(cls)}
    prefix = f"{path}." if path else ""
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = (
                f"; did you mean {close[0]}?" if close else f"; known fields: {', '.join(fields)}"
            )
            hint = _RETIRED.get((cls.__name__, key), hint)
            problems.append((f"{prefix}{key}", "unknown field" + hint))
    kwargs = {}
    ok = True
    for key, f in fields.items():
        fpath = f"{prefix}{key}"
        # A dependent default's null means "the default" (parse_experiment resolves it).
        if key not in value or (value[key] is None and f.metadata.get("default_by")):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append((fpath, "required field is missing"))
                ok = False
            continue
        parsed = _parse_value(hints[f.name], value[key], fpath, problems)
        if parsed is _INVALID:
            ok = False
            continue
        _check_constraints(parsed, f.metadata, fpath, problems)
        kwargs[f.name] = parsed
    return cls(**kwargs) if ok else _INVALID


def learner_image(learner: LearnerConfig, defaults: ImageDefaults = RELEASE_IMAGES) -> str:
    """The learner's container image: ``spec.learner.image`` when set, else the release's
    image for the accelerator it is scheduled on (:data:`LEARNER_IMAGES` for this release)."""
    return learner.image or defaults.learner(learner.accelerator.kind)


def actor_image(actors: ActorsConfig, defaults: ImageDefaults = RELEASE_IMAGES) -> str:
    """The actors' container image: ``spec.actors.image`` when set, else the release's."""
    return actors.image or defaults.actors()


def cel_rules(cls: type) -> list[dict[str, str]]:
    """The CEL rules (``x-kubernetes-validations``) the CRD carries on the section that
    dataclass ``cls`` declares: the cross-field rules of :func:`parse_experiment` that the API
    server can check too."""
    return tpu_cel_rules() if cls is AcceleratorConfig else []


def placement_problems(placement: PlacementConfig, path: str) -> list[tuple[str, str]]:
    """What is wrong with one role's placement that its field types cannot say: the
    affinity's keys, and tolerations whose parts contradict each other."""
    problems = []
    for key in placement.affinity:
        if key not in AFFINITY_KEYS:
            problems.append(
                (f"{path}.affinity.{key}", f"unknown field; known: {', '.join(AFFINITY_KEYS)}")
            )
        elif not isinstance(placement.affinity[key], dict):
            problems.append((f"{path}.affinity.{key}", "must be a mapping"))
    for i, tol in enumerate(placement.tolerations):
        where = f"{path}.tolerations[{i}]"
        if tol.operator == "Exists" and tol.value:
            problems.append((f"{where}.value", "must be empty with operator Exists"))
        if not tol.key and tol.operator != "Exists":
            problems.append((f"{where}.operator", "must be Exists when key is empty"))
        if tol.toleration_seconds is not None and tol.effect != "NoExecute":
            problems.append((f"{where}.tolerationSeconds", "needs effect NoExecute"))
    return problems


def envs_per_stream(actors: ActorsConfig) -> int:
    """The most envs one stream of an actor steps: its envs split over its streams, the
    larger share first (``envsPerActor / streamsPerActor``, rounded up)."""
    return -(-actors.envs_per_actor // max(1, min(actors.streams_per_actor, actors.envs_per_actor)))


def stream_envs_limit(spec: Spec) -> int:
    """The most envs the learner accepts in one stream's hello: ``spec.learner.maxEnvsPerActor``,
    or, when that is null, what one stream of the Experiment's own actors steps."""
    cap = spec.learner.max_envs_per_actor
    return envs_per_stream(spec.actors) if cap is None else cap


def _check_cross_fields(exp: Experiment, problems: list[tuple[str, str]]) -> None:
    """Rules that involve more than one field."""
    learner = exp.spec.learner
    if learner.metrics_port == learner.port:
        problems.append(
            ("spec.learner.metricsPort", f"must differ from spec.learner.port ({learner.port})")
        )
    if learner.accelerator.kind == "tpu":
        problems.extend(tpu_problems(learner.accelerator.tpu))
    if exp.spec.env.atari.terminal_on_life_loss and exp.spec.env.atari.life_loss_terminal:
        problems.append(
            (
                "spec.env.atari.lifeLossTerminal",
                "choose one of lifeLossTerminal and terminalOnLifeLoss",
            )
        )
    if exp.spec.env.backend == "envpool":
        problems.extend(envpool_problems(exp.spec.env))
    if exp.spec.agent.name in ("ppo", "vtrace"):
        minibatches = getattr(exp.spec.agent, exp.spec.agent.name).minibatches
        if exp.spec.learner.batch_size % minibatches:
            problems.append(
                (
                    f"spec.agent.{exp.spec.agent.name}.minibatches",
                    f"must divide spec.learner.batchSize ({exp.spec.learner.batch_size}), "
                    f"got {minibatches}",
                )
            )
    if exp.spec.agent.name == "r2d2":
        r2 = exp.spec.agent.r2d2
        if r2.sequence_period > r2.train_length:
            problems.append(
                (
                    "spec.agent.r2d2.sequencePeriod",
                    f"must be at most spec.agent.r2d2.trainLength ({r2.train_length}), or the "
                    f"steps between sequences would never be trained on, got "
                    f"{r2.sequence_period}",
                )
            )
        if r2.min_replay_size > r2.replay_capacity:
            problems.append(
                (
                    "spec.agent.r2d2.minReplaySize",
                    f"must be at most spec.agent.r2d2.replayCapacity ({r2.replay_capacity}): "
                    f"the replay never holds more, so learning would never start, got "
                    f"{r2.min_replay_size}",
                )
            )
        # A sequence needs sequencePeriod new steps of its env (the first, more), so the
        # budget's env steps make at most maxEnvSteps / sequencePeriod of them, and the run
        # would end before it learned anything.
        budget = exp.spec.budget.max_env_steps
        if budget and budget // r2.sequence_period < r2.min_replay_size:
            problems.append(
                (
                    "spec.agent.r2d2.minReplaySize",
                    f"must be at most the {budget // r2.sequence_period} sequences that "
                    f"spec.budget.maxEnvSteps ({budget}) env steps make at one every "
                    f"spec.agent.r2d2.sequencePeriod ({r2.sequence_period}) steps, or the "
                    f"budget would end before learning starts, got {r2.min_replay_size}",
                )
            )
    agent_name = exp.spec.agent.name
    section = getattr(exp.spec.agent, agent_name, None)
    evaluators = getattr(section, "evaluation_actors", 0)
    if evaluators >= exp.spec.actors.replicas:
        problems.append(
            (
                f"spec.agent.{agent_name}.evaluationActors",
                f"must be below spec.actors.replicas ({exp.spec.actors.replicas}): some "
                f"actors must explore and train, got {evaluators}",
            )
        )
    devices = exp.spec.learner.devices
    if devices.inference_devices > 1 and not float(devices.inference_devices).is_integer():
        problems.append(
            (
                "spec.learner.devices.inferenceDevices",
                f"must be a whole count or a fraction below 1, got {devices.inference_devices:g}",
            )
        )
    if devices.strategy == "default" and devices.training_devices > 1:
        problems.append(
            (
                "spec.learner.devices.trainingDevices",
                f"the default strategy trains on one device, got "
                f"{devices.training_devices}; use strategy mirrored or tpu",
            )
        )
    actors = exp.spec.actors
    per_stream = envs_per_stream(actors)
    if learner.max_envs_per_actor is not None and per_stream > learner.max_envs_per_actor:
        problems.append(
            (
                "spec.learner.maxEnvsPerActor",
                f"must be at least the envs of one actor stream (envsPerActor / "
                f"streamsPerActor = {per_stream}), got {learner.max_envs_per_actor}",
            )
        )
    streams = actors.replicas * min(actors.streams_per_actor, actors.envs_per_actor)
    if streams > learner.max_streams:
        problems.append(
            (
                "spec.learner.maxStreams",
                f"must be at least the Experiment's own actor streams (replicas x "
                f"streamsPerActor = {streams}), got {learner.max_streams}",
            )
        )
    total_envs = actors.replicas * actors.envs_per_actor
    if total_envs > learner.max_total_envs:
        problems.append(
            (
                "spec.learner.maxTotalEnvs",
                f"must be at least the Experiment's own envs (replicas x envsPerActor = "
                f"{total_envs}), got {learner.max_total_envs}",
            )
        )
    for role, section in (("learner", exp.spec.learner), ("actors", exp.spec.actors)):
        problems.extend(placement_problems(section.placement, f"spec.{role}.placement"))
    if exp.spec.learner.optimizer.linear_decay and exp.spec.budget.max_env_steps == 0:
        problems.append(
            (
                "spec.learner.optimizer.linearDecay",
                "needs spec.budget.maxEnvSteps > 0 to decay over",
            )
        )


def dependent_default_fields(
    cls: type, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], dataclasses.Field]]:
    """The document paths (as keys) and fields of every field under ``cls`` declared with
    ``default_by``."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = (*prefix, field_key(f))
        if f.metadata.get("default_by"):
            out.append((path, f))
        elif isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name]):
            out.extend(dependent_default_fields(hints[f.name], path))
    return out


def _declared_default(cls: type, path: Sequence[str]) -> Any:
    """The declared default of the field at document ``path`` under ``cls``."""
    hints = typing.get_type_hints(cls)
    f = next(f for f in dataclasses.fields(cls) if field_key(f) == path[0])
    if len(path) > 1:
        return _declared_default(hints[f.name], path[1:])
    return f.default


def _fill_dependent_defaults(document: Any) -> Any:
    """``document`` with each ``default_by`` field that it leaves out (or null) set to the
    default for the value of the field it depends on. Mappings along a changed path are
    copied, never changed; a path through something other than a mapping is left alone
    (parsing reports it)."""
    if not isinstance(document, dict):
        return document
    for path, f in dependent_default_fields(Experiment):
        source, table = f.metadata["default_by"]
        nodes = [document]
        for key in path[:-1]:
            child = nodes[-1].get(key)
            if child is not None and not isinstance(child, dict):
                break
            nodes.append(child or {})
        else:
            if nodes[-1].get(path[-1]) is not None:
                continue
            decider: Any = document
            for key in source.split("."):
                decider = decider.get(key) if isinstance(decider, dict) else None
            if decider is None:
                decider = _declared_default(Experiment, source.split("."))
            value = table.get(decider, f.default) if isinstance(decider, Hashable) else f.default
            # Rebuild the path bottom-up from copies, so that the caller's document stays as
            # it was.
            for node, key in zip(reversed(nodes), reversed(path)):
                value = {**node, key: value}
            document = value
    return document


def parse_experiment(document: Any) -> Experiment:
    """Validates a parsed YAML/JSON document and returns the typed Experiment.

    Fields whose default depends on another field (``default_by``: R2D2's LSTM and
    optimizer, the PPO preset's observation clip) get it here when the document leaves them
    out.

    Raises:
      ConfigError: listing every problem as ``field.path: reason``.
    """
    problems: list[tuple[str, str]] = []
    document = _fill_dependent_defaults(document)
    exp = _parse_dataclass(Experiment, document, "", problems)
    if not problems and exp is not _INVALID:
        _check_cross_fields(exp, problems)
    if problems:
        raise ConfigError(problems)
    return exp


def parse_section(cls: type[T], value: Any, path: str, problems: list[tuple[str, str]]) -> T | None:
    """Parses ``value`` into ``cls``, any dataclass whose fields are declared with
    :func:`param` (an Experiment section, or another document such as the price table), with
    the Experiment's rules: camelCase keys, unknown keys refused, types and constraints checked.

    Appends ``(field path, reason)`` to ``problems`` rather than raising, so that a caller can
    add checks of its own before reporting everything at once; returns None when invalid.
    """
    out = _parse_dataclass(cls, value, path, problems)
    return None if out is _INVALID else out


def parse_document(cls: type[T], value: Any, path: str = "") -> T:
    """:func:`parse_section` that raises.

    Raises:
      ConfigError: naming every problem's field path.
    """
    problems: list[tuple[str, str]] = []
    out = parse_section(cls, value, path, problems)
    if problems or out is None:
        raise ConfigError(problems or [(path or "<document>", "invalid")])
    return out


#: Largest Experiment or price file read, in bytes: checked before parsing, so a huge file
#: costs nothing (a real Experiment is a few kilobytes).
MAX_YAML_BYTES = 1 << 20
#: Most values (scalars, lists, mappings) a document may expand to through YAML aliases: a
#: "billion laughs" document is a few hundred bytes that aliases expand exponentially, and
#: everything that walks the parsed document (validation, printing) pays for the expansion.
MAX_YAML_VALUES = 100_000
#: Deepest nesting of lists and mappings accepted (an Experiment nests about 6 deep).
MAX_YAML_DEPTH = 64


class _YAMLBomb(yaml.YAMLError):
    """A document refused for its shape (recursive, too deep, or expanding too far)."""


def _check_expansion(root: yaml.Node) -> None:
    """Refuses a composed document whose aliases recurse, nest too deep, or expand it beyond
    :data:`MAX_YAML_VALUES` values (or twice its distinct values, for a large plain document).

    Composition shares aliased nodes, so this walk is linear in the distinct nodes: each
    node's expanded size is computed once (as an exact integer, however large).
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        line = node.start_mark.line + 1
        if key in active:
            raise _YAMLBomb(f"line {line}: a recursive alias (a value that contains itself)")
        if depth > MAX_YAML_DEPTH:
            raise _YAMLBomb(f"line {line}: nested deeper than {MAX_YAML_DEPTH} levels")
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        active.add(key)
        total = 1 + sum(size(child, depth + 1) for child in children)
        active.discard(key)
        sizes[key] = total
        return total

    expanded = size(root, 0)
    if expanded > max(MAX_YAML_VALUES, 2 * len(sizes)):
        raise _YAMLBomb(
            f"aliases expand the document from {len(sizes)} to {expanded:.3g} "
            f"values, over the limit of {MAX_YAML_VALUES}; write the values out "
            f"instead"
        )


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats: ``3e-4`` is a number, as in kubectl.

    PyYAML follows YAML 1.1, where a float needs a dot (``3.0e-4``), so the usual way of writing
    a learning rate would otherwise arrive as a string. Aliases are allowed but bounded: each
    document is checked by :func:`_check_expansion` before it is turned into Python values.
    """

    def compose_document(self):
        node = super().compose_document()
        _check_expansion(node)
        return node


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _yaml_load_all(text: str) -> list[Any]:
    """Every document of ``text``.

    Raises:
      yaml.YAMLError: a syntax error, or a document refused for its shape; deep nesting that
        exhausts PyYAML's recursive parser is reported the same way.
    """
    if len(text) > MAX_YAML_BYTES:
        raise _YAMLBomb(f"{len(text)} characters, over the limit of {MAX_YAML_BYTES}")
    try:
        return list(yaml.load_all(text, Loader=_Loader))  # a SafeLoader subclass
    except RecursionError:
        raise _YAMLBomb("nested too deeply to parse") from None


def _one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line (PyYAML's own messages span several, with a caret drawing)."""
    if isinstance(exc, _YAMLBomb):
        return str(exc)
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def load_yaml(text: str, source: str = "<string>") -> Any:
    """Parses YAML text into plain data, turning syntax errors into a ConfigError.

    Raises:
      ConfigError: invalid YAML, more or fewer than one document, text over
        :data:`MAX_YAML_BYTES`, or aliases that recurse or expand past :data:`MAX_YAML_VALUES`.
    """
    try:
        docs = [d for d in _yaml_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError([(source, f"not valid YAML: {_one_line(exc)}")]) from None
    if len(docs) != 1:
        raise ConfigError([(source, f"must hold exactly one YAML document, found {len(docs)}")])
    return docs[0]


def read_yaml_file(path: str, what: str = "file") -> Any:
    """Reads and parses a YAML file of at most :data:`MAX_YAML_BYTES`, refusing a larger one
    before reading it whole.

    Raises:
      ConfigError: the file cannot be read, is too large, or is not valid YAML (see
        :func:`load_yaml`).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise ConfigError([(path, f"cannot read the {what}: {exc.strerror}")]) from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError([(path, f"the {what} is over {MAX_YAML_BYTES} bytes; refused unread")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([(path, f"not UTF-8 text: {exc.reason} at byte {exc.start}")]) from None
    return load_yaml(text, path)


def set_path(document: dict, dotted: str, value: Any) -> None:
    """Sets ``a.b.c`` in a plain nested dict, creating mappings on the way (like helm --set)."""
    parts = dotted.split(".")
    if not dotted or any(not p for p in parts):
        raise ConfigError([(dotted or "<override>", "override path must look like a.b.c")])
    node = document
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(
                [
                    (
                        ".".join(parts[: i + 1]),
                        f"cannot set a field inside a non-mapping value {nxt!r}",
                    )
                ]
            )
        node = nxt
    node[parts[-1]] = value


def apply_overrides(document: Any, overrides: Sequence[str]) -> Any:
    """Applies ``path=value`` overrides to a plain document; values are parsed as YAML."""
    if not isinstance(document, dict):
        return document
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError([(item, "override must be written path=value")])
        try:
            docs = _yaml_load_all(raw) if raw.strip() else [""]
            value = docs[0] if len(docs) == 1 else raw
        except yaml.YAMLError as exc:
            raise ConfigError(
                [(path, f"override value is not valid YAML: {_one_line(exc)}")]
            ) from None
        set_path(document, path.strip(), value)
    return document


def load_experiment(path: str, overrides: Sequence[str] = ()) -> Experiment:
    """Reads an Experiment YAML file, applies ``--set`` overrides and validates it."""
    document = apply_overrides(read_yaml_file(path, "Experiment"), overrides)
    return parse_experiment(document)


def to_document(obj: Any) -> Any:
    """Turns an Experiment (or any section of one) back into plain camelCase data."""
    if dataclasses.is_dataclass(obj):
        return {field_key(f): to_document(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_document(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_document(v) for k, v in obj.items()}
    return obj


def dump_experiment(exp: Experiment) -> str:
    """The resolved Experiment (every default filled in) as YAML text."""
    return yaml.safe_dump(to_document(exp), sort_keys=False)
