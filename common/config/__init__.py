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

import dataclasses
import difflib
import re
import typing
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

import yaml

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


def cel_rules(cls: type) -> list[dict[str, str]]:
    """The CEL rules (``x-kubernetes-validations``) the CRD carries on the section that
    dataclass ``cls`` declares: the cross-field rules of :func:`parse_experiment` that the API
    server can check too."""
    return tpu_cel_rules() if cls is AcceleratorConfig else []


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
