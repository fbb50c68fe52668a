"""The CRD's CEL rules (x-kubernetes-validations), run by a real CEL runtime (cel-python).

No API server runs here, so the rules the API server would evaluate on ``kubectl apply`` are
compiled and evaluated as it would: on the object at the rule's level (``self``), after the
schema's defaults. They must refuse what ``seedrl validate`` refuses, with the valid choices in
the message, and accept everything it accepts.
"""

from __future__ import annotations

import copy
from pathlib import Path

import celpy
import pytest
import yaml

from seedrl.common.config import TPU_GENERATIONS, ConfigError, parse_experiment
from seedrl.service.operator import crd
from seedrl.service.operator.reconcile import MAX_NAME_LENGTH

ROOT = Path(__file__).resolve().parents[3]


def _schema() -> dict:
    return crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _accelerator_schema() -> dict:
    return _schema()["properties"]["spec"]["properties"]["learner"]["properties"]["accelerator"]


def _with_defaults(schema: dict, value):
    """``value`` with the schema's defaults filled in, as the API server does before it runs
    the rules (structural defaulting: missing properties get their defaults, recursively)."""
    if schema.get("type") != "object" or not isinstance(value, dict):
        return value
    out = dict(value)
    for key, sub in schema.get("properties", {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = _with_defaults(sub, out[key])
    return out


class Rules:
    """The compiled rules of one schema node."""

    def __init__(self, schema: dict):
        self.schema = schema
        env = celpy.Environment()
        self.rules = [
            (rule, env.program(env.compile(rule["rule"])))
            for rule in schema["x-kubernetes-validations"]
        ]

    def failures(self, value: dict) -> list[dict]:
        """The rules ``value`` breaks (each rule with its message), after defaulting."""
        activation = {"self": celpy.json_to_cel(_with_defaults(self.schema, value))}
        out = []
        for rule, program in self.rules:
            result = program.evaluate(activation)
            assert isinstance(result, celpy.celtypes.BoolType), (rule["rule"], result)
            if not result:
                out.append(rule)
        return out


@pytest.fixture(scope="module")
def accelerator_rules() -> Rules:
    return Rules(_accelerator_schema())


# What tests/common/config/test_tpu.py refuses, by (type, topology): every shape a user could type
# that no single-host node pool schedules.
UNSCHEDULABLE = [
    ("tpu-v4-podslice", "2x2x2"),
    ("tpu-v4-podslice", "2x2x4"),
    ("tpu-v4-podslice", "4x4x4"),
    ("tpu-v4-podslice", "2x2"),
    ("tpu-v5p-slice", "2x2x2"),
    ("tpu-v5p-slice", "2x4x4"),
    ("tpu-v5p-slice", "8x8x8"),
    ("tpu-v5-lite-podslice", "2x2x1"),
    ("tpu-v5-lite-podslice", "4x4"),
    ("tpu-v5-lite-podslice", "1x2"),
    ("tpu-v5-lite-podslice", "16x16"),
    ("tpu-v6e-slice", "4x4"),
    ("tpu-v6e-slice", "2x2x1"),
    ("tpu-v3-podslice", "2x2"),
    ("tpu-v7x", "2x2x1"),
]


@pytest.mark.parametrize("tpu_type,topology", UNSCHEDULABLE)
def test_cel_refuses_each_unschedulable_tpu_shape_with_the_valid_choices(
    accelerator_rules, tpu_type, topology
):
    value = {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}
    failed = accelerator_rules.failures(value)
    assert len(failed) == 1, failed
    generation = TPU_GENERATIONS.get(tpu_type)
    if generation is None:
        assert failed[0]["fieldPath"] == ".tpu.type"
        for name in TPU_GENERATIONS:
            assert name in failed[0]["message"]
    else:
        assert failed[0]["fieldPath"] == ".tpu.topology"
        assert failed[0]["message"].endswith(
            f"single-host {generation.name} topologies: "
            + ", ".join(generation.single_host_topologies)
        )
    # seedrl validate refuses the same document, on the same field.
    with pytest.raises(ConfigError) as err:
        parse_experiment({"metadata": {"name": "x"}, "spec": {"learner": {"accelerator": value}}})
    assert [path for path, _ in err.value.problems] == [
        "spec.learner.accelerator" + failed[0]["fieldPath"]
    ]


@pytest.mark.parametrize(
    "tpu_type,topology",
    [
        (name, topology)
        for name, g in TPU_GENERATIONS.items()
        for topology in g.single_host_topologies
    ],
)
def test_cel_accepts_every_single_host_tpu_shape(accelerator_rules, tpu_type, topology):
    assert (
        accelerator_rules.failures({"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}})
        == []
    )


@pytest.mark.parametrize(
    "value",
    [
        {},  # everything defaulted: a CPU learner
        {"kind": "tpu"},  # the default TPU section (v5e 2x2)
        {"kind": "cpu", "tpu": {"type": "tpu-v3-podslice", "topology": "8x8x8"}},
        {"kind": "gpu", "tpu": {"type": "tpu-v5p-slice", "topology": "2x2x2"}},
    ],
)
def test_cel_leaves_alone_what_is_not_a_tpu_learner_or_is_defaulted(accelerator_rules, value):
    assert accelerator_rules.failures(value) == []
    parse_experiment({"metadata": {"name": "x"}, "spec": {"learner": {"accelerator": value}}})


def test_the_rules_fail_when_they_should(accelerator_rules):
    # The runtime really evaluates them: a rule that is always true would pass the tests
    # above for the accepted cases only.
    assert accelerator_rules.failures(
        {"kind": "tpu", "tpu": {"type": "tpu-v5p-slice", "topology": "2x2x2"}}
    )


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "k8s" / "examples").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_every_example_passes_the_cel_rules(accelerator_rules, path):
    document = yaml.safe_load(path.read_text())
    accelerator = ((document.get("spec") or {}).get("learner") or {}).get("accelerator") or {}
    assert accelerator_rules.failures(accelerator) == []


def _nodes(node, path=""):
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")


def test_no_nullable_field_has_an_enum_that_would_refuse_its_null():
    # Issue 43: the API server checks a null against an enum and no null passes one, so
    # spec.agent.ppo.objective: null (its documented "the preset's") was refused on apply.
    for path, node in _nodes(_schema()):
        assert not (node.get("nullable") and "enum" in node), path
    objective = _schema()["properties"]["spec"]["properties"]["agent"]["properties"]["ppo"]
    objective = objective["properties"]["objective"]
    assert objective["pattern"] == "^(?:clip|kl_penalty|both)$" and objective["nullable"]


def test_the_crd_admits_only_names_the_operator_can_run():
    # Issue 43: the server alone admits any DNS subdomain of 253 characters; the operator ran
    # only DNS labels short enough for <name>-learner and marked the others Failed.
    name = _schema()["properties"]["metadata"]["properties"]["name"]
    assert name["maxLength"] == MAX_NAME_LENGTH == 55
    assert name["pattern"] == "^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"
