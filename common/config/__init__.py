"""The Experiment document: typed dataclasses, YAML loading, overrides and validation.

One Experiment document drives every way of running seedrl: `seedrl train FILE` on one machine
and, later, `kubectl apply` through the operator. It is Kubernetes-shaped (``apiVersion``,
``kind``, ``metadata``, ``spec`` and camelCase keys) so the same file works in both places.

Every field is declared once, in this package, with its default, its docstring and its
constraints (the ``param`` helper stores them in the dataclass field metadata). Parsing and
validation happen in exactly one place, :func:`parse_experiment`, which collects every problem it
finds and raises one :class:`ConfigError` naming each field path and the reason, e.g.
``spec.learner.unrollLength: must be >= 2, got 0``. Unknown keys are rejected.

The modules, each importing only those above it:

- :mod:`.fields`: :func:`param`, :func:`field_key`, :class:`ConfigError`, shared bounds;
- :mod:`.cluster`: the custom resource's coordinates (``GROUP``, ``KIND``, ...) and images;
- :mod:`.tpu`, :mod:`.accelerator`: TPU generations and slices, the learner's accelerator;
- one module per section of the spec: :mod:`.env`, :mod:`.network`, :mod:`.vtrace`,
  :mod:`.r2d2`, :mod:`.ppo`, :mod:`.agent`, :mod:`.placement`, :mod:`.learner`,
  :mod:`.actors`, :mod:`.checkpoint`, :mod:`.budget`;
- :mod:`.experiment`: :class:`Spec`, :class:`Metadata`, :class:`Experiment`;
- :mod:`.parse`: the generic parser of ``param`` dataclasses (:func:`parse_document`);
- :mod:`.validate`: :func:`parse_experiment`, dependent defaults and cross-field checks;
- :mod:`.yaml_io`: safe YAML loading (:func:`load_yaml`, :func:`read_yaml_file`);
- :mod:`.loading`: ``--set`` overrides, :func:`load_experiment`, :func:`dump_experiment`.

This module re-exports their public names, so ``from seedrl.common.config import X`` works for
every one of them.
"""

from seedrl.common.config.fields import (
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
from seedrl.common.config.placement import (
    AFFINITY_KEYS,
    placement_problems,
    PlacementConfig,
    ResourcesConfig,
    TolerationConfig,
)
from seedrl.common.config.learner import (
    DevicesConfig,
    learner_image,
    LearnerConfig,
    OptimizerConfig,
    TLSConfig,
)
from seedrl.common.config.actors import (
    actor_image,
    ActorsConfig,
    envs_per_stream,
)
from seedrl.common.config.checkpoint import (
    VOLUME_RETENTION,
    CheckpointConfig,
)
from seedrl.common.config.budget import (
    BudgetConfig,
)
from seedrl.common.config.experiment import (
    Experiment,
    Metadata,
    Spec,
    stream_envs_limit,
)
from seedrl.common.config.parse import (
    parse_document,
    parse_section,
)
from seedrl.common.config.validate import (
    cel_rules,
    dependent_default_fields,
    parse_experiment,
)
from seedrl.common.config.yaml_io import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    load_yaml,
    read_yaml_file,
)
from seedrl.common.config.loading import (
    apply_overrides,
    dump_experiment,
    load_experiment,
    set_path,
    to_document,
)

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
