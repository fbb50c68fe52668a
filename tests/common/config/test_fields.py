"""The declarations (common/config/fields.py's param): every field documented, defaults within
their bounds, keys in camelCase."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from seedrl.common.config import Experiment, Metadata, field_key, parse_experiment, to_document


def _dataclasses_from(root: type) -> list[type]:
    seen: list[type] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for tp in typing.get_type_hints(cls).values():
            for candidate in (tp, *typing.get_args(tp)):
                if dataclasses.is_dataclass(candidate):
                    todo.append(candidate)
    return seen


ALL_FIELDS = [(cls, f) for cls in _dataclasses_from(Experiment) for f in dataclasses.fields(cls)]


def test_every_section_is_reached():
    names = {cls.__name__ for cls in _dataclasses_from(Experiment)}
    assert names == {
        "Experiment",
        "Metadata",
        "Spec",
        "EnvConfig",
        "AtariConfig",
        "FootballConfig",
        "AgentConfig",
        "NetworkConfig",
        "VTraceConfig",
        "R2D2Config",
        "PPOConfig",
        "LearnerConfig",
        "TLSConfig",
        "OptimizerConfig",
        "DevicesConfig",
        "ActorsConfig",
        "CheckpointConfig",
        "BudgetConfig",
        "ResourcesConfig",
        "AcceleratorConfig",
        "TPUConfig",
        "GPUConfig",
        "PlacementConfig",
        "TolerationConfig",
    }


@pytest.mark.parametrize(
    "cls, f", ALL_FIELDS, ids=[f"{c.__name__}.{f.name}" for c, f in ALL_FIELDS]
)
def test_every_field_has_doc(cls, f):
    assert isinstance(f.metadata.get("doc"), str) and f.metadata["doc"].strip()


def test_only_the_name_is_required():
    required = [
        f"{cls.__name__}.{f.name}"
        for cls, f in ALL_FIELDS
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    # Experiment.metadata has no default only because the name inside it has none.
    assert sorted(required) == ["Experiment.metadata", "Metadata.name"]


def test_every_numeric_default_satisfies_its_bounds():
    exp = Experiment(metadata=Metadata(name="exp"))
    assert parse_experiment(to_document(exp)) == exp
    for _, f in ALL_FIELDS:
        if f.default is dataclasses.MISSING or not isinstance(f.default, (int, float)):
            continue
        if isinstance(f.default, bool):
            continue
        m = f.metadata
        assert math.isfinite(f.default)
        assert m["ge"] is None or f.default >= m["ge"], f.name
        assert m["gt"] is None or f.default > m["gt"], f.name
        assert m["le"] is None or f.default <= m["le"], f.name


def test_field_key_is_camel_case_or_explicit():
    keys = {f.name: field_key(f) for _, f in ALL_FIELDS}
    assert keys["api_version"] == "apiVersion"
    assert keys["lambda_"] == "lambda"
    assert keys["clip_pg_rho_threshold"] == "clipPgRhoThreshold"
    assert keys["id"] == "id"
