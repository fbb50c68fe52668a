"""A document into a valid Experiment: :func:`parse_experiment`, the one place.

It fills the defaults that depend on another field (``default_by``), parses with :mod:`.parse`,
then checks the rules that involve more than one field (:func:`_check_cross_fields`); those the
API server can check too are also given to the CRD as CEL (:func:`cel_rules`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Hashable, Sequence
from typing import Any

from seedrl.common.config.accelerator import AcceleratorConfig
from seedrl.common.config.actors import envs_per_stream
from seedrl.common.config.env import envpool_problems
from seedrl.common.config.experiment import Experiment
from seedrl.common.config.fields import ConfigError, field_key
from seedrl.common.config.parse import INVALID, parse_dataclass
from seedrl.common.config.placement import placement_problems
from seedrl.common.config.tpu import tpu_cel_rules, tpu_problems


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
    agent_name = exp.spec.agent.name
    section = getattr(exp.spec.agent, agent_name, None)
    # Each agent's section states its own rules across fields (see its module).
    problems.extend(section.problems(exp.spec))
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
    exp = parse_dataclass(Experiment, document, "", problems)
    if not problems and exp is not INVALID:
        _check_cross_fields(exp, problems)
    if problems:
        raise ConfigError(problems)
    return exp
