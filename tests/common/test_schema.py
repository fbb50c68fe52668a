"""The schemas generated from the config dataclasses (common/schema.py)."""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path

import jsonschema
import pytest
import yaml

from seedrl.common import config
from seedrl.common.schema import dataclass_schema, experiment_schema, spec_schema, to_json_schema

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "k8s" / "examples").glob("*.yaml")
)


def _validator(closed=True):
    schema = to_json_schema(experiment_schema(), closed=closed)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _walk(node, path=""):
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_every_node_is_structural_and_described():
    # Kubernetes refuses a CRD whose schema has a node without a type.
    for path, node in _walk(spec_schema()):
        assert "type" in node, path
        if path and not path.endswith("[]"):
            assert node.get("description"), path


def test_every_config_field_appears_with_its_key():
    def check(cls, schema):
        hints = typing.get_type_hints(cls)
        assert list(schema["properties"]) == [config.field_key(f) for f in dataclasses.fields(cls)]
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                check(hints[f.name], schema["properties"][config.field_key(f)])

    check(config.Spec, spec_schema())


def test_constraints_are_carried_over():
    learner = spec_schema()["properties"]["learner"]["properties"]
    assert learner["unrollLength"] == {
        **learner["unrollLength"],
        "type": "integer",
        "minimum": 2,
        "default": 20,
    }
    assert learner["port"]["maximum"] == 65535
    vtrace = spec_schema()["properties"]["agent"]["properties"]["vtrace"]["properties"]
    assert vtrace["discount"]["exclusiveMinimum"] is True and vtrace["discount"]["minimum"] == 0
    assert vtrace["rewardClipping"]["enum"] == ["none", "abs_one", "soft_asymmetric"]
    net = spec_schema()["properties"]["agent"]["properties"]["network"]["properties"]
    assert net["hiddenSizes"]["minItems"] == 1 and net["hiddenSizes"]["items"]["minimum"] == 1
    env = spec_schema()["properties"]["env"]["properties"]
    assert env["maxEpisodeSteps"]["nullable"] is True and "default" not in env["maxEpisodeSteps"]
    assert env["options"]["x-kubernetes-preserve-unknown-fields"] is True
    assert env["atari"]["default"] == {}


def test_metadata_name_is_required_with_its_pattern():
    meta = dataclass_schema(config.Metadata)
    assert meta["required"] == ["name"]
    assert meta["properties"]["name"]["pattern"].startswith("^")
    assert meta["properties"]["labels"]["additionalProperties"] == {"type": "string"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path):
    _validator().validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(
    "dotted, value, field",
    [
        ("spec.learner.unrollLength", 1, "unrollLength"),
        ("spec.agent.vtrace.discount", 0, "discount"),
        ("spec.agent.name", "dqn", "name"),
        ("spec.env.maxEpisodeSteps", "ten", "maxEpisodeSteps"),
        ("spec.actors.replicas", 0, "replicas"),
        ("spec.learner.typo", 1, "typo"),
    ],
)
def test_bad_documents_are_rejected_naming_the_field(dotted, value, field):
    doc = {"apiVersion": config.API_VERSION, "kind": config.KIND, "metadata": {"name": "x"}}
    config.set_path(doc, dotted, value)
    errors = list(_validator().iter_errors(doc))
    assert errors
    where = [".".join(map(str, e.absolute_path)) + " " + e.message for e in errors]
    assert any(field in w for w in where), where


def test_null_is_accepted_where_the_config_allows_it():
    doc = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "metadata": {"name": "x"},
        "spec": {"env": {"maxEpisodeSteps": None}, "budget": {"targetReturn": None}},
    }
    _validator().validate(doc)
    config.parse_experiment(doc)


def test_conversion_leaves_its_input_alone():
    schema = spec_schema()
    before = repr(schema)
    to_json_schema(schema, closed=True)
    assert repr(schema) == before


def _server_defaults(schema, value):
    """Fills in defaults as the Kubernetes API server does for a structural schema."""
    if schema.get("type") != "object" or not isinstance(value, dict):
        return value
    out = dict(value)
    for key, prop in schema.get("properties", {}).items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
        if key in out:
            out[key] = _server_defaults(prop, out[key])
    return out


def _without_nulls(node):
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def _leaves(node, path=""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}")
    else:
        yield path, node


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_server_side_defaults_equal_the_resolved_experiment(path):
    # What the API server stores for a document must be what parse_experiment resolves it to;
    # e.g. the learner's resources default to 4 CPUs, not to ResourcesConfig's own 1. Only
    # defaults that depend on another field (R2D2's LSTM and optimizer) are left out, for the
    # operator's parse to fill in.
    document = yaml.safe_load(path.read_text())
    schema = experiment_schema()
    stored = _server_defaults(schema, document)
    resolved = config.to_document(config.parse_experiment(document))
    stored_leaves = dict(_leaves(_without_nulls(stored["spec"])))
    resolved_leaves = dict(_leaves(_without_nulls(resolved["spec"])))
    dependent = {
        "." + ".".join(p[1:]) for p, _ in config.dependent_default_fields(config.Experiment)
    }
    assert set(resolved_leaves) - set(stored_leaves) <= dependent
    assert {k: resolved_leaves[k] for k in stored_leaves} == stored_leaves
    assert config.parse_experiment(stored) == config.parse_experiment(document)


def test_the_server_leaves_agent_dependent_defaults_to_the_operator():
    # A server-side default would pin what parse_experiment fills in by the agent: an r2d2
    # Experiment applied without lstmSize would be stored feed-forward, with vtrace's Adam.
    document = {"apiVersion": config.API_VERSION, "kind": config.KIND}
    document |= {"metadata": {"name": "x"}, "spec": {"agent": {"name": "r2d2"}}}
    stored = _server_defaults(experiment_schema(), document)
    _validator().validate(stored)
    exp = config.parse_experiment(stored)
    assert exp.spec.agent.network.lstm_size == 512
    assert exp.spec.learner.optimizer.learning_rate == 1e-4
    assert exp.spec.learner.optimizer.epsilon == 1e-3
    network = spec_schema()["properties"]["agent"]["properties"]["network"]["properties"]
    assert "default" not in network["lstmSize"] and network["lstmSize"]["nullable"]


def test_a_section_default_carries_what_differs_from_its_class():
    learner = spec_schema()["properties"]["learner"]["properties"]
    assert learner["resources"]["default"] == {"cpu": "4", "memory": "16Gi"}
    assert spec_schema()["properties"]["actors"]["properties"]["resources"]["default"] == {}


def test_network_sizes_are_bounded_in_the_schemas():
    # Issue 27, item 8: what parse_experiment refuses, the CRD and the chart refuse too.
    spec = spec_schema()["properties"]
    net = spec["agent"]["properties"]["network"]["properties"]
    assert net["hiddenSizes"]["items"]["maximum"] == config.MAX_LAYER_WIDTH
    assert net["hiddenSizes"]["maxItems"] == config.MAX_HIDDEN_LAYERS
    assert net["denseSize"]["maximum"] == config.MAX_LAYER_WIDTH
    assert net["lstmSize"]["maximum"] == config.MAX_LSTM_SIZE
    assert net["resnetChannels"]["items"]["maximum"] == config.MAX_CONV_CHANNELS
    assert net["resnetChannels"]["maxItems"] == config.MAX_CONV_STACKS


def test_integer_bounds_are_those_declared_and_exact_as_float64():
    # Issue 43: Kubernetes reads a bound as a float64 and refused the CRD whose integers all
    # had maximum 2^63-1 (read as 2^63, no int64). The int64 range is the type's (the API
    # server refuses an integer past it by itself); a schema states only declared bounds.
    spec = spec_schema()["properties"]
    assert "maximum" not in spec["seed"] and spec["seed"]["minimum"] == 0
    assert "maximum" not in spec["budget"]["properties"]["maxEnvSteps"]
    assert "minimum" not in spec["budget"]["properties"]["targetReturn"]
    for path, node in _walk(spec_schema()):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum"):
                if key in node:
                    bound = node[key]
                    assert isinstance(bound, int) and float(bound) == bound, (path, key)
                    assert -(2**63) <= bound <= 2**63 - 1, (path, key)


@pytest.mark.parametrize("bound", [2**63 - 1, 2**63, 2**53 + 1, 2.5, True])
def test_an_integer_bound_no_float64_holds_exactly_is_a_declaration_error(bound):
    @dataclasses.dataclass(frozen=True)
    class Section:
        count: int = config.param(1, "A count.", le=bound)

    with pytest.raises(TypeError, match="not an int64 that a float64 holds exactly"):
        dataclass_schema(Section)


def test_the_int64_range_is_still_refused_by_seedrl():
    # No schema states it, parse_experiment still does (the API server by the type).
    with pytest.raises(config.ConfigError, match="within int64"):
        config.parse_experiment({"metadata": {"name": "x"}, "spec": {"seed": 2**63}})
    exp = config.parse_experiment({"metadata": {"name": "x"}, "spec": {"seed": 2**63 - 1}})
    assert exp.spec.seed == 2**63 - 1


@pytest.mark.parametrize(
    "dotted, value",
    [
        ("spec.budget.maxEnvSteps", 10**30),
        ("spec.seed", 2**64),
        ("spec.agent.network.hiddenSizes", [100_000_000]),
        ("spec.agent.network.hiddenSizes", [8] * 17),
        ("spec.agent.network.lstmSize", 4097),
    ],
)
def test_values_parse_experiment_refuses_for_size_the_schema_refuses(dotted, value):
    doc = {"apiVersion": config.API_VERSION, "kind": config.KIND, "metadata": {"name": "x"}}
    config.set_path(doc, dotted, value)
    assert list(_validator().iter_errors(doc))
    with pytest.raises(config.ConfigError):
        config.parse_experiment(doc)
