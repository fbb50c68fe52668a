"""Behaviour tests of the Experiment document (common/config/)."""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from pathlib import Path

import pytest

from seedrl.common.config import (
    API_VERSION,
    KIND,
    MAX_YAML_BYTES,
    TPU_GENERATIONS,
    ConfigError,
    Experiment,
    Metadata,
    TPUConfig,
    apply_overrides,
    dump_experiment,
    field_key,
    load_experiment,
    load_yaml,
    parse_experiment,
    read_yaml_file,
    set_path,
    to_document,
    tpu_chips,
    tpu_problems,
)

EXAMPLE = Path(__file__).parents[2] / "examples" / "cartpole-vtrace.yaml"


def doc(**spec) -> dict:
    """A minimal valid document, with the given spec sections."""
    out = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}}
    if spec:
        out["spec"] = spec
    return out


def with_path(dotted: str, value) -> dict:
    """A minimal document with one field set at a dotted path."""
    d = doc()
    set_path(d, dotted, value)
    return d


def problems_of(document) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as e:
        parse_experiment(document)
    assert e.value.problems, "ConfigError without problems"
    return e.value.problems


def only_problem(document) -> tuple[str, str]:
    problems = problems_of(document)
    assert len(problems) == 1, problems
    return problems[0]


def assert_one(document, path: str, *fragments: str) -> None:
    got_path, reason = only_problem(document)
    assert got_path == path
    for fragment in fragments:
        assert fragment in reason, (fragment, reason)


# --------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------


def test_below_bound_message_is_exact():
    with pytest.raises(ConfigError) as e:
        parse_experiment(with_path("spec.learner.unrollLength", 0))
    assert e.value.problems == [("spec.learner.unrollLength", "must be >= 2, got 0")]
    assert str(e.value) == "spec.learner.unrollLength: must be >= 2, got 0"
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        ("spec.actors.envsPerActor", 5000, "must be <= 4096, got 5000"),
        ("spec.learner.port", 70000, "must be <= 65535, got 70000"),
        ("spec.learner.optimizer.momentum", 1.0, "must be <= 0.999, got 1"),
        ("spec.agent.vtrace.discount", 1.5, "must be <= 1, got 1.5"),
        ("spec.agent.vtrace.discount", 0, "must be > 0, got 0"),
        ("spec.agent.vtrace.discount", -0.5, "must be > 0, got -0.5"),
        ("spec.learner.optimizer.learningRate", 0, "must be > 0, got 0"),
        ("spec.agent.vtrace.clipRhoThreshold", 0.0, "must be > 0, got 0"),
        ("spec.agent.vtrace.lambda", -0.1, "must be >= 0, got -0.1"),
        ("spec.seed", -1, "must be >= 0, got -1"),
        ("spec.actors.replicas", 0, "must be >= 1, got 0"),
        ("spec.env.maxEpisodeSteps", 0, "must be >= 1, got 0"),
        ("spec.budget.maxSeconds", -1, "must be >= 0, got -1"),
    ],
)
def test_out_of_bounds(path, value, fragment):
    assert only_problem(with_path(path, value)) == (path, fragment)


@pytest.mark.parametrize(
    "path, value, attr, expected",
    [
        ("spec.learner.unrollLength", 2, ("learner", "unroll_length"), 2),
        ("spec.actors.envsPerActor", 4096, ("actors", "envs_per_actor"), 4096),
        ("spec.agent.vtrace.discount", 1.0, ("agent", "vtrace", "discount"), 1.0),
        ("spec.agent.vtrace.lambda", 0, ("agent", "vtrace", "lambda_"), 0.0),
        ("spec.checkpoint.intervalSteps", 0, ("checkpoint", "interval_steps"), 0),
        ("spec.env.maxEpisodeSteps", None, ("env", "max_episode_steps"), None),
    ],
)
def test_values_on_the_bound_are_accepted(path, value, attr, expected):
    node = parse_experiment(with_path(path, value)).spec
    for a in attr:
        node = getattr(node, a)
    assert node == expected
    assert type(node) is type(expected)


@pytest.mark.parametrize(
    "override, path, reason",
    [
        (
            "spec.budget.maxEnvSteps=1e30",
            "spec.budget.maxEnvSteps",
            "must be an integer within int64 (-2^63 to 2^63-1), got 1e+30",
        ),
        (f"spec.seed={2**64}", "spec.seed", f"within int64 (-2^63 to 2^63-1), got {2**64}"),
        (f"spec.seed={2**63}", "spec.seed", f"within int64 (-2^63 to 2^63-1), got {2**63}"),
        (
            f"spec.learner.terminationGracePeriodSeconds={-(2**63) - 1}",
            "spec.learner.terminationGracePeriodSeconds",
            "within int64",
        ),
        (
            "spec.agent.network.hiddenSizes=[100000000]",
            "spec.agent.network.hiddenSizes[0]",
            "must be <= 8192, got 100000000",
        ),
        (
            "spec.agent.network.hiddenSizes=[" + ", ".join(["8"] * 17) + "]",
            "spec.agent.network.hiddenSizes",
            "must have at most 16 item(s), got 17",
        ),
        ("spec.agent.network.denseSize=8193", "spec.agent.network.denseSize", "<= 8192"),
        ("spec.agent.network.lstmSize=4097", "spec.agent.network.lstmSize", "<= 4096, got 4097"),
        (
            "spec.agent.network.resnetChannels=[16, 513]",
            "spec.agent.network.resnetChannels[1]",
            "must be <= 512, got 513",
        ),
        (
            "spec.agent.network.resnetChannels=[" + ", ".join(["16"] * 9) + "]",
            "spec.agent.network.resnetChannels",
            "must have at most 8 item(s), got 9",
        ),
    ],
)
def test_integers_past_int64_and_absurd_network_sizes_are_refused(override, path, reason):
    # Issue 27, item 8: each was accepted, then overflowed the CRD's int64 or the learner's
    # memory.
    got_path, got_reason = only_problem(apply_overrides(doc(), [override]))
    assert got_path == path and reason in got_reason, got_reason


@pytest.mark.parametrize(
    "path, value, attr",
    [
        ("spec.seed", 2**63 - 1, ("seed",)),
        ("spec.budget.maxEnvSteps", 2**63 - 1, ("budget", "max_env_steps")),
        ("spec.budget.maxEnvSteps", 1e18, ("budget", "max_env_steps")),
        ("spec.agent.network.hiddenSizes", [8192] * 16, ("agent", "network", "hidden_sizes")),
        ("spec.agent.network.lstmSize", 4096, ("agent", "network", "lstm_size")),
        ("spec.agent.network.denseSize", 8192, ("agent", "network", "dense_size")),
        ("spec.agent.network.resnetChannels", [512] * 8, ("agent", "network", "resnet_channels")),
    ],
)
def test_the_largest_integers_and_network_sizes_are_accepted(path, value, attr):
    node = parse_experiment(with_path(path, value)).spec
    for a in attr:
        node = getattr(node, a)
    expected = int(value) if isinstance(value, float) else value  # 1e18 is an integer
    assert node == expected and type(node) is type(expected)


# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        ("spec.learner.batchSize", "16", "must be an integer, got str '16'"),
        ("spec.learner.batchSize", True, "must be an integer, got bool True"),
        ("spec.learner.batchSize", 2.5, "must be an integer, got float 2.5"),
        ("spec.env.maxEpisodeSteps", False, "must be an integer, got bool False"),
        ("spec.agent.vtrace.discount", "0.99", "must be a number, got str '0.99'"),
        ("spec.agent.vtrace.entropyCost", True, "must be a number, got bool True"),
        ("spec.budget.targetReturn", "high", "must be a number, got str 'high'"),
        ("spec.agent.vtrace.bootstrapOnTruncation", 1, "must be true or false, got int 1"),
        ("spec.agent.vtrace.bootstrapOnTruncation", "true", "must be true or false, got str"),
        ("spec.env.id", 5, "must be a string, got int 5"),
        ("spec.learner", [1, 2], "must be a mapping, got list [1, 2]"),
        ("spec.env.options", ["a"], "must be a mapping, got list"),
        ("metadata.labels", "app", "must be a mapping, got str 'app'"),
        ("spec.agent.network.hiddenSizes", {"a": 1}, "must be a list, got dict"),
        ("spec.agent.network.hiddenSizes", 64, "must be a list, got int 64"),
        ("spec.env.imports", "mypkg", "must be a list, got str 'mypkg'"),
    ],
)
def test_wrong_types(path, value, fragment):
    assert_one(with_path(path, value), path, fragment)


def test_spec_that_is_not_a_mapping():
    assert_one(doc() | {"spec": "fast"}, "spec", "must be a mapping, got str 'fast'")


def test_document_that_is_not_a_mapping():
    assert_one(["not", "a", "mapping"], "<document>", "must be a mapping")


def test_non_string_list_item_names_the_item():
    assert_one(
        with_path("spec.env.imports", ["ok", 3]),
        "spec.env.imports[1]",
        "must be a string, got int 3",
    )


def test_non_string_label_value_names_the_label():
    assert_one(
        with_path("metadata.labels", {"app": 1}),
        "metadata.labels.app",
        "must be a string, got int 1",
    )


def test_non_integer_list_item_names_the_item():
    assert_one(
        with_path("spec.agent.network.hiddenSizes", [64, "wide"]),
        "spec.agent.network.hiddenSizes[1]",
        "must be an integer",
    )


def test_int_accepted_for_float_and_converted():
    exp = parse_experiment(with_path("spec.agent.vtrace.discount", 1))
    assert exp.spec.agent.vtrace.discount == 1.0
    assert type(exp.spec.agent.vtrace.discount) is float
    exp = parse_experiment(with_path("spec.budget.targetReturn", 475))
    assert type(exp.spec.budget.target_return) is float


def test_integral_float_accepted_for_int_and_converted():
    exp = parse_experiment(with_path("spec.learner.unrollLength", 2.0))
    assert exp.spec.learner.unroll_length == 2
    assert type(exp.spec.learner.unroll_length) is int
    exp = parse_experiment(with_path("spec.agent.network.hiddenSizes", [32.0, 16]))
    assert exp.spec.agent.network.hidden_sizes == [32, 16]
    assert all(type(x) is int for x in exp.spec.agent.network.hidden_sizes)


@pytest.mark.parametrize("value", [True, False])
def test_bool_accepted_for_bool(value):
    exp = parse_experiment(with_path("spec.agent.vtrace.bootstrapOnTruncation", value))
    assert exp.spec.agent.vtrace.bootstrap_on_truncation is value
    exp = parse_experiment(with_path("spec.learner.optimizer.linearDecay", value))
    assert exp.spec.learner.optimizer.linear_decay is value


def test_null_section_means_defaults():
    exp = parse_experiment(doc() | {"spec": {"learner": None}})
    assert exp.spec.learner == Experiment(metadata=Metadata(name="exp")).spec.learner


# --------------------------------------------------------------------------------------------
# Unknown fields
# --------------------------------------------------------------------------------------------


def test_unknown_top_level_field_lists_known_fields():
    assert_one(
        doc() | {"foo": 1}, "foo", "unknown field", "known fields: apiVersion, kind, metadata, spec"
    )


def test_unknown_top_level_near_miss_suggests():
    assert_one(doc() | {"specs": {}}, "specs", "unknown field; did you mean spec?")


def test_unknown_metadata_field():
    d = doc()
    d["metadata"]["nmae"] = "x"
    assert_one(d, "metadata.nmae", "unknown field; did you mean name?")


def test_unknown_nested_field_suggests_near_miss():
    assert_one(
        with_path("spec.learner.unrolLength", 20),
        "spec.learner.unrolLength",
        "unknown field; did you mean unrollLength?",
    )


def test_unknown_deeply_nested_field():
    assert_one(
        with_path("spec.agent.network.widths", [1]), "spec.agent.network.widths", "unknown field"
    )


def test_snake_case_key_is_unknown_and_suggests_camel_case():
    path, reason = only_problem(with_path("spec.learner.unroll_length", 20))
    assert path == "spec.learner.unroll_length"
    assert reason.startswith("unknown field")
    assert "unrollLength" in reason


def test_python_attribute_name_lambda_underscore_is_not_a_key():
    path, reason = only_problem(with_path("spec.agent.vtrace.lambda_", 0.9))
    assert path == "spec.agent.vtrace.lambda_"
    assert "unknown field" in reason


# --------------------------------------------------------------------------------------------
# Choices, patterns, required fields, apiVersion / kind
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        ("spec.agent.name", "dqn", "must be one of vtrace, r2d2, ppo; got 'dqn'"),
        (
            "spec.agent.network.name",
            "cnn",
            "must be one of mlp, nature_cnn, impala_resnet, football_smm; got 'cnn'",
        ),
        ("spec.agent.network.activation", "gelu", "must be one of relu, tanh; got 'gelu'"),
        (
            "spec.learner.optimizer.name",
            "adagrad",
            "must be one of adam, rmsprop, sgd; got 'adagrad'",
        ),
        (
            "spec.agent.vtrace.rewardClipping",
            "clip",
            "must be one of none, abs_one, soft_asymmetric; got 'clip'",
        ),
        ("apiVersion", "v1", f"must be one of {API_VERSION}; got 'v1'"),
        ("kind", "Job", "must be one of Experiment; got 'Job'"),
    ],
)
def test_choices(path, value, fragment):
    assert only_problem(with_path(path, value)) == (path, fragment)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_each_choice_accepted(activation):
    exp = parse_experiment(with_path("spec.agent.network.activation", activation))
    assert exp.spec.agent.network.activation == activation


@pytest.mark.parametrize("name", ["My-Exp", "my_exp", "-exp", "exp-", "exp.1", ""])
def test_name_pattern(name):
    d = doc()
    d["metadata"]["name"] = name
    assert_one(d, "metadata.name", "must match", repr(name))


@pytest.mark.parametrize("name", ["a", "exp-1", "0", "a" * 63])
def test_good_names(name):
    d = doc()
    d["metadata"]["name"] = name
    assert parse_experiment(d).metadata.name == name


def test_name_too_long():
    d = doc()
    d["metadata"]["name"] = "a" * 64
    assert only_problem(d) == ("metadata.name", "must be at most 63 characters, got 64")


def test_namespace_pattern():
    d = doc()
    d["metadata"]["namespace"] = "Team_A"
    assert_one(d, "metadata.namespace", "must match")


def test_required_name_missing():
    d = doc()
    d["metadata"] = {"labels": {"a": "b"}}
    assert only_problem(d) == ("metadata.name", "required field is missing")


def test_null_metadata_reports_missing_name():
    assert only_problem(doc() | {"metadata": None}) == (
        "metadata.name",
        "required field is missing",
    )


def test_missing_metadata_reported():
    path, reason = only_problem({"apiVersion": API_VERSION, "kind": KIND})
    assert path == "metadata"
    assert reason == "required field is missing"


def test_api_version_and_kind_may_be_omitted():
    exp = parse_experiment({"metadata": {"name": "exp"}})
    assert exp.api_version == API_VERSION
    assert exp.kind == KIND


# --------------------------------------------------------------------------------------------
# Lists, non-finite numbers, options
# --------------------------------------------------------------------------------------------


def test_list_item_out_of_bound_names_index():
    assert only_problem(with_path("spec.agent.network.hiddenSizes", [64, 0])) == (
        "spec.agent.network.hiddenSizes[1]",
        "must be >= 1, got 0",
    )


def test_several_bad_list_items_each_reported():
    problems = problems_of(with_path("spec.agent.network.hiddenSizes", [0, 64, -3]))
    assert [p for p, _ in problems] == [
        "spec.agent.network.hiddenSizes[0]",
        "spec.agent.network.hiddenSizes[2]",
    ]


def test_empty_list_below_min_items():
    assert only_problem(with_path("spec.agent.network.hiddenSizes", [])) == (
        "spec.agent.network.hiddenSizes",
        "must have at least 1 item(s), got 0",
    )


@pytest.mark.parametrize(
    "path, text",
    [
        ("spec.agent.vtrace.discount", ".nan"),
        ("spec.learner.optimizer.learningRate", ".inf"),
        ("spec.budget.targetReturn", ".nan"),
        ("spec.budget.targetReturn", "-.inf"),
        ("spec.budget.maxSeconds", ".inf"),
    ],
)
def test_non_finite_numbers_rejected(path, text):
    d = apply_overrides(doc(), [f"{path}={text}"])
    problems = problems_of(d)
    assert all(p == path for p, _ in problems), problems
    assert any("must be a finite number" in reason for _, reason in problems), problems


def test_non_finite_from_yaml_file_text():
    text = (
        "metadata: {name: exp}\n"
        "spec:\n  agent:\n    vtrace:\n      entropyCost: .nan\n"
        "  learner:\n    inferenceMaxWaitMs: .inf\n"
    )
    problems = problems_of(load_yaml(text))
    paths = [p for p, _ in problems]
    assert "spec.agent.vtrace.entropyCost" in paths
    assert "spec.learner.inferenceMaxWaitMs" in paths
    assert ("spec.agent.vtrace.entropyCost", "must be a finite number, got nan") in problems


@pytest.mark.parametrize(
    "path, text",
    [
        ("spec.learner.batchSize", ".nan"),
        ("spec.learner.batchSize", ".inf"),
    ],
)
def test_non_finite_for_int_rejected(path, text):
    assert_one(apply_overrides(doc(), [f"{path}={text}"]), path, "must be an integer")


def test_options_accept_nested_plain_data():
    options = {
        "render_mode": None,
        "sutton_barto_reward": True,
        "gravity": 9.8,
        "nested": {"a": [1, 2.5, "x", False, None, {"b": []}]},
    }
    exp = parse_experiment(with_path("spec.env.options", copy.deepcopy(options)))
    assert exp.spec.env.options == options


def test_options_reject_non_string_keys():
    d = load_yaml("metadata: {name: exp}\nspec:\n  env:\n    options:\n      1: one\n")
    assert_one(d, "spec.env.options", "keys must be strings", "int 1")


def test_options_reject_non_string_keys_nested():
    d = with_path("spec.env.options", {"outer": {2: "two"}})
    assert_one(d, "spec.env.options.outer", "must be plain data")


def test_options_reject_non_plain_values():
    d = load_yaml("metadata: {name: exp}\nspec:\n  env:\n    options:\n      when: 2020-01-01\n")
    assert_one(d, "spec.env.options.when", "must be plain data", "date")


# --------------------------------------------------------------------------------------------
# Cross-field rules
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri", ["s3://bucket/x", "http://host/x", "gs://", "gs://b/x", "gs://Upper/x"]
)
def test_unsupported_checkpoint_uri_rejected(uri):
    assert_one(
        with_path("spec.checkpoint.uri", uri), "spec.checkpoint.uri", "must match", repr(uri)
    )


@pytest.mark.parametrize(
    "uri",
    ["", "/tmp/ckpt", "runs/x", "file:///tmp/ckpt", "gs://my-bucket", "gs://my-bucket/runs/exp-1"],
)
def test_supported_checkpoint_uri_accepted(uri):
    assert parse_experiment(with_path("spec.checkpoint.uri", uri)).spec.checkpoint.uri == uri


def test_linear_decay_needs_env_step_budget():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 0)
    assert_one(d, "spec.learner.optimizer.linearDecay", "maxEnvSteps > 0")


def test_linear_decay_with_budget_accepted_and_no_decay_without_budget_accepted():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 10)
    assert parse_experiment(d).spec.learner.optimizer.linear_decay is True
    d = with_path("spec.budget.maxEnvSteps", 0)
    assert parse_experiment(d).spec.budget.max_env_steps == 0


def test_both_cross_field_problems_reported_together():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 0)
    set_path(d, "spec.agent.name", "ppo")
    set_path(d, "spec.learner.batchSize", 2)
    assert sorted(p for p, _ in problems_of(d)) == [
        "spec.agent.ppo.minibatches",
        "spec.learner.optimizer.linearDecay",
    ]


# --------------------------------------------------------------------------------------------
# Several problems at once
# --------------------------------------------------------------------------------------------


def test_all_problems_reported_in_document_order():
    d = {
        "apiVersion": "v2",
        "kind": KIND,
        "metadata": {"name": "Bad_Name"},
        "spec": {
            "seed": -1,
            "env": {"imports": [1]},
            "agent": {"name": "dqn", "network": {"hiddenSizes": [64, 0]}},
            "learner": {"unrollLength": 0, "optimizer": {"learningRate": 0}},
            "actors": {"envsPerActor": 5000},
            "budget": {"maxEnvSteps": "many"},
        },
    }
    with pytest.raises(ConfigError) as e:
        parse_experiment(d)
    assert [p for p, _ in e.value.problems] == [
        "apiVersion",
        "metadata.name",
        "spec.seed",
        "spec.env.imports[0]",
        "spec.agent.name",
        "spec.agent.network.hiddenSizes[1]",
        "spec.learner.unrollLength",
        "spec.learner.optimizer.learningRate",
        "spec.actors.envsPerActor",
        "spec.budget.maxEnvSteps",
    ]
    lines = str(e.value).splitlines()
    assert len(lines) == len(e.value.problems)
    assert "spec.learner.unrollLength: must be >= 2, got 0" in lines


def test_type_and_unknown_problems_in_sibling_sections_all_reported():
    d = with_path("spec.learner.unrolLength", 20)
    set_path(d, "spec.actors.replicas", "two")
    set_path(d, "spec.budget.returnWindow", 0)
    paths = [p for p, _ in problems_of(d)]
    assert paths == ["spec.learner.unrolLength", "spec.actors.replicas", "spec.budget.returnWindow"]


# --------------------------------------------------------------------------------------------
# Defaults and round trips
# --------------------------------------------------------------------------------------------


def test_only_name_gives_every_default():
    exp = parse_experiment({"metadata": {"name": "exp"}})
    assert exp == Experiment(metadata=Metadata(name="exp"))
    assert exp.api_version == "seedrl.dev/v1alpha1"
    assert exp.kind == "Experiment"
    assert exp.metadata.namespace is None
    assert exp.metadata.labels == {}
    assert exp.spec.seed == 0
    assert exp.spec.env.id == "CartPole-v1"
    assert exp.spec.env.options == {} and exp.spec.env.imports == []
    assert exp.spec.env.max_episode_steps is None
    assert exp.spec.agent.name == "vtrace"
    assert exp.spec.agent.network.hidden_sizes == [64, 64]
    assert exp.spec.agent.network.activation == "tanh"
    assert exp.spec.agent.vtrace.discount == 0.99
    assert exp.spec.agent.vtrace.lambda_ == 1.0
    assert exp.spec.agent.vtrace.reward_clipping == "none"
    assert exp.spec.learner.unroll_length == 20
    assert exp.spec.learner.batch_size == 16
    assert exp.spec.learner.optimizer.name == "adam"
    assert exp.spec.learner.optimizer.learning_rate == 1e-3
    assert exp.spec.learner.optimizer.linear_decay is False
    assert exp.spec.learner.port == 8686
    assert exp.spec.actors.replicas == 2
    assert exp.spec.actors.envs_per_actor == 8
    assert exp.spec.checkpoint.uri == ""
    assert exp.spec.checkpoint.keep == 3
    assert exp.spec.budget.max_env_steps == 1_000_000
    assert exp.spec.budget.target_return is None


def test_default_lists_are_not_shared():
    a = parse_experiment({"metadata": {"name": "a"}})
    b = parse_experiment({"metadata": {"name": "b"}})
    assert a.spec.agent.network.hidden_sizes is not b.spec.agent.network.hidden_sizes
    assert a.spec.env.options is not b.spec.env.options


def _customised() -> Experiment:
    d = load_yaml(EXAMPLE.read_text(encoding="utf-8"))
    apply_overrides(
        d,
        [
            "metadata.namespace=team-a",
            "metadata.labels={app: seedrl}",
            "spec.env.options={gravity: 9.8, nested: {a: [1, null]}}",
            "spec.env.imports=[mypkg.envs]",
            "spec.env.maxEpisodeSteps=200",
            "spec.agent.vtrace.lambda=0.95",
            "spec.agent.vtrace.rewardClipping=abs_one",
            "spec.learner.optimizer.epsilon=1.0e-6",
            "spec.checkpoint.uri=file:///tmp/ckpt",
        ],
    )
    return parse_experiment(d)


@pytest.mark.parametrize(
    "make",
    [
        lambda: parse_experiment({"metadata": {"name": "exp"}}),
        _customised,
    ],
    ids=["defaults", "customised"],
)
def test_to_document_round_trip(make):
    exp = make()
    document = to_document(exp)
    assert parse_experiment(document) == exp
    # to_document gives fresh plain data, not the experiment's own containers.
    document["spec"]["agent"]["network"]["hiddenSizes"].append(1)
    assert parse_experiment(to_document(exp)) == exp


@pytest.mark.parametrize(
    "make",
    [
        lambda: parse_experiment({"metadata": {"name": "exp"}}),
        _customised,
    ],
    ids=["defaults", "customised"],
)
def test_dump_round_trip(make):
    exp = make()
    text = dump_experiment(exp)
    assert parse_experiment(load_yaml(text)) == exp


def test_small_float_round_trips_through_dump():
    d = apply_overrides(doc(), ["spec.learner.optimizer.epsilon=1.0e-12"])
    exp = parse_experiment(d)
    assert parse_experiment(load_yaml(dump_experiment(exp))) == exp


def test_exponent_notation_without_dot_is_a_number():
    # `learningRate: 3e-4` is how most people write a learning rate, and Kubernetes (YAML 1.2
    # / JSON number rules) reads it as a number, so the same file must load locally too.
    text = (
        "metadata: {name: exp}\nspec:\n  learner:\n    optimizer:\n"
        "      learningRate: 3e-4\n      epsilon: 1e-7\n"
    )
    exp = parse_experiment(load_yaml(text))
    assert exp.spec.learner.optimizer.learning_rate == 3e-4
    assert exp.spec.learner.optimizer.epsilon == 1e-7


def test_customised_values_survive():
    exp = _customised()
    assert exp.metadata.namespace == "team-a"
    assert exp.spec.agent.vtrace.lambda_ == 0.95
    assert exp.spec.env.options == {"gravity": 9.8, "nested": {"a": [1, None]}}
    assert exp.spec.learner.optimizer.epsilon == 1e-6


def test_document_keys_are_camel_case():
    document = to_document(parse_experiment({"metadata": {"name": "exp"}}))
    assert list(document) == ["apiVersion", "kind", "metadata", "spec"]
    assert list(document["spec"]) == [
        "seed",
        "env",
        "agent",
        "learner",
        "actors",
        "checkpoint",
        "budget",
        "serviceAccountName",
        "suspend",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "queueName",
    ]
    assert "unrollLength" in document["spec"]["learner"]
    assert "inferenceMaxWaitMs" in document["spec"]["learner"]
    assert "maxEpisodeSteps" in document["spec"]["env"]
    vtrace = document["spec"]["agent"]["vtrace"]
    assert vtrace["lambda"] == 1.0
    assert "lambda_" not in vtrace
    assert "clipPgRhoThreshold" in vtrace

    def all_keys(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                if k != "options":
                    yield from all_keys(v)

    assert not [k for k in all_keys(document) if "_" in k]


def test_dump_is_yaml_with_camel_case_keys():
    text = dump_experiment(parse_experiment({"metadata": {"name": "exp"}}))
    assert text.startswith("apiVersion: seedrl.dev/v1alpha1\nkind: Experiment\n")
    assert "unrollLength: 20" in text
    assert "lambda: 1.0" in text
    assert "_" not in "".join(line.split(":")[0] for line in text.splitlines())


# --------------------------------------------------------------------------------------------
# Overrides
# --------------------------------------------------------------------------------------------


def test_overrides_parse_values_as_yaml():
    d = apply_overrides(
        doc(),
        [
            "spec.budget.maxEnvSteps=20000",
            "spec.budget.targetReturn=475.5",
            "spec.agent.network.hiddenSizes=[32, 32]",
            "metadata.name=other",
            "spec.learner.optimizer.linearDecay=true",
        ],
    )
    assert d["spec"]["budget"]["maxEnvSteps"] == 20000
    assert type(d["spec"]["budget"]["maxEnvSteps"]) is int
    assert d["spec"]["budget"]["targetReturn"] == 475.5
    assert d["spec"]["agent"]["network"]["hiddenSizes"] == [32, 32]
    assert d["metadata"]["name"] == "other"
    exp = parse_experiment(d)
    assert exp.spec.budget.max_env_steps == 20000
    assert exp.spec.budget.target_return == 475.5
    assert exp.spec.agent.network.hidden_sizes == [32, 32]
    assert exp.metadata.name == "other"
    assert exp.spec.learner.optimizer.linear_decay is True


def test_override_replaces_existing_value_and_keeps_siblings():
    d = doc(learner={"unrollLength": 10, "batchSize": 4})
    apply_overrides(d, ["spec.learner.unrollLength=30"])
    assert d["spec"]["learner"] == {"unrollLength": 30, "batchSize": 4}


def test_later_override_wins():
    d = apply_overrides(doc(), ["spec.seed=1", "spec.seed=2"])
    assert d["spec"]["seed"] == 2


def test_override_creates_missing_mappings():
    d = {"metadata": {"name": "exp"}}
    apply_overrides(d, ["spec.agent.vtrace.discount=0.9"])
    assert d["spec"] == {"agent": {"vtrace": {"discount": 0.9}}}
    assert parse_experiment(d).spec.agent.vtrace.discount == 0.9


def test_override_replaces_null_with_mapping():
    d = doc() | {"spec": None}
    apply_overrides(d, ["spec.seed=3"])
    assert d["spec"] == {"seed": 3}


def test_override_value_with_equals_sign_and_empty_value():
    d = apply_overrides(doc(), ["metadata.annotations={note: 'a=b'}", "spec.checkpoint.uri="])
    assert d["metadata"]["annotations"] == {"note": "a=b"}
    assert d["spec"]["checkpoint"]["uri"] == ""


def test_override_with_spaces_around_path():
    d = apply_overrides(doc(), [" spec.seed = 5"])
    assert d["spec"]["seed"] == 5


def test_override_without_equals_rejected():
    with pytest.raises(ConfigError) as e:
        apply_overrides(doc(), ["spec.seed"])
    assert e.value.problems == [("spec.seed", "override must be written path=value")]


@pytest.mark.parametrize("item", ["=3", "spec..seed=3", ".seed=3", "spec.=3"])
def test_override_with_malformed_path_rejected(item):
    with pytest.raises(ConfigError) as e:
        apply_overrides(doc(), [item])
    assert "override path must look like a.b.c" in e.value.problems[0][1]


def test_override_with_invalid_yaml_value_rejected():
    with pytest.raises(ConfigError) as e:
        apply_overrides(doc(), ["spec.agent.network.hiddenSizes=[1, 2"])
    path, reason = e.value.problems[0]
    assert path == "spec.agent.network.hiddenSizes"
    assert "not valid YAML" in reason


def test_override_into_non_mapping_names_path():
    d = doc(seed=1)
    with pytest.raises(ConfigError) as e:
        apply_overrides(d, ["spec.seed.value=3"])
    path, reason = e.value.problems[0]
    assert path == "spec.seed"
    assert "non-mapping" in reason


def test_set_path_into_list_names_path():
    d = doc(agent={"network": {"hiddenSizes": [1, 2]}})
    with pytest.raises(ConfigError) as e:
        set_path(d, "spec.agent.network.hiddenSizes.x", 3)
    assert e.value.problems[0][0] == "spec.agent.network.hiddenSizes"


def test_set_path_creates_and_sets():
    d: dict = {}
    set_path(d, "a.b.c", [1])
    set_path(d, "a.d", "x")
    assert d == {"a": {"b": {"c": [1]}, "d": "x"}}


def test_override_producing_invalid_value_reported_by_parse():
    d = apply_overrides(doc(), ["spec.learner.unrollLength=1"])
    assert only_problem(d) == ("spec.learner.unrollLength", "must be >= 2, got 1")
    d = apply_overrides(doc(), ["spec.actors.replicas=many"])
    assert_one(d, "spec.actors.replicas", "must be an integer", "'many'")
    d = apply_overrides(doc(), ["spec.learner.unrolLength=30"])
    assert_one(d, "spec.learner.unrolLength", "did you mean unrollLength?")


# --------------------------------------------------------------------------------------------
# load_experiment / load_yaml
# --------------------------------------------------------------------------------------------


def test_load_experiment_from_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("metadata:\n  name: from-file\nspec:\n  seed: 7\n", encoding="utf-8")
    exp = load_experiment(str(path))
    assert exp.metadata.name == "from-file"
    assert exp.spec.seed == 7


def test_load_experiment_applies_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("metadata:\n  name: from-file\nspec:\n  seed: 7\n", encoding="utf-8")
    exp = load_experiment(str(path), ["spec.seed=8", "spec.learner.batchSize=4"])
    assert exp.spec.seed == 8
    assert exp.spec.learner.batch_size == 4


def test_load_experiment_reports_invalid_fields(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "metadata:\n  name: x\nspec:\n  learner:\n    unrollLength: 0\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError) as e:
        load_experiment(str(path))
    assert e.value.problems == [("spec.learner.unrollLength", "must be >= 2, got 0")]


def test_load_experiment_missing_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError) as e:
        load_experiment(missing)
    path, reason = e.value.problems[0]
    assert path == missing
    assert reason.startswith("cannot read")
    assert missing in str(e.value)


def test_load_experiment_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("metadata: {name: x\nspec: [\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(str(path))
    got_path, reason = e.value.problems[0]
    assert got_path == str(path)
    assert "not valid YAML" in reason


def test_load_experiment_two_documents(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text("metadata: {name: a}\n---\nmetadata: {name: b}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(str(path))
    assert e.value.problems == [(str(path), "must hold exactly one YAML document, found 2")]


def test_load_experiment_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(str(path))
    assert e.value.problems == [(str(path), "must hold exactly one YAML document, found 0")]


def test_load_experiment_non_mapping_document(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(str(path))
    assert e.value.problems[0][0] == "<document>"


def test_load_yaml_default_source_name():
    with pytest.raises(ConfigError) as e:
        load_yaml("a: [")
    assert e.value.problems[0][0] == "<string>"


def test_shipped_example_loads():
    exp = load_experiment(str(EXAMPLE))
    assert exp.metadata.name == "cartpole-vtrace"
    assert exp.spec.seed == 1
    assert exp.spec.actors.envs_per_actor == 16
    assert exp.spec.learner.optimizer.linear_decay is True
    assert exp.spec.budget.target_return == 475.0
    assert exp.spec.budget.max_seconds == 600.0
    assert parse_experiment(load_yaml(dump_experiment(exp))) == exp


@pytest.mark.parametrize("path", sorted(EXAMPLE.parent.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads_and_round_trips(path):
    exp = load_experiment(str(path))
    assert exp.metadata.name == path.stem
    assert parse_experiment(load_yaml(dump_experiment(exp))) == exp


def test_ppo_minibatches_must_divide_the_batch():
    assert only_problem(
        doc(agent={"name": "ppo", "ppo": {"minibatches": 3}}, learner={"batchSize": 16})
    ) == ("spec.agent.ppo.minibatches", "must divide spec.learner.batchSize (16), got 3")


def test_vtrace_minibatches_must_divide_the_batch():
    assert only_problem(
        doc(agent={"name": "vtrace", "vtrace": {"minibatches": 3}}, learner={"batchSize": 16})
    ) == ("spec.agent.vtrace.minibatches", "must divide spec.learner.batchSize (16), got 3")


def test_r2d2_sequences_are_the_papers_trained_steps_after_a_burn_in_prefix():
    r2 = parse_experiment(doc(agent={"name": "r2d2"})).spec.agent.r2d2
    assert (r2.train_length, r2.burn_in, r2.sequence_period) == (80, 40, 40)


def test_r2d2_sequence_rules():
    problems = dict(
        problems_of(doc(agent={"name": "r2d2", "r2d2": {"trainLength": 20, "sequencePeriod": 21}}))
    )
    assert problems["spec.agent.r2d2.sequencePeriod"].startswith(
        "must be at most spec.agent.r2d2.trainLength (20)"
    )
    # A burn-in may be longer than the trained steps, and those fewer than n: the last
    # steps of a sequence use shorter returns.
    r2d2 = {"trainLength": 2, "burnIn": 10, "nStep": 5, "sequencePeriod": 1}
    parse_experiment(doc(agent={"name": "r2d2", "r2d2": r2d2}))
    # The old sequenceLength counted the burn-in: read as the trained steps it would train
    # another shape, so it is refused with what replaces it.
    path, reason = only_problem(doc(agent={"name": "r2d2", "r2d2": {"sequenceLength": 80}}))
    assert path == "spec.agent.r2d2.sequenceLength"
    assert reason.startswith("unknown field") and "trainLength S - B" in reason


def test_a_budget_that_ends_before_the_replay_fills_is_refused():
    # 39,999 env steps make at most 999 sequences of one every 40 steps; learning needs 1,000.
    path, reason = only_problem(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 39_999}))
    assert path == "spec.agent.r2d2.minReplaySize"
    assert "999 sequences" in reason and "spec.budget.maxEnvSteps (39999)" in reason
    assert "spec.agent.r2d2.sequencePeriod (40)" in reason and "got 1000" in reason
    parse_experiment(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 40_000}))
    parse_experiment(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 0}))  # no limit


def test_r2d2_alone_is_recurrent_with_the_papers_optimizer():
    exp = parse_experiment(doc(agent={"name": "r2d2"}))
    assert exp.spec.agent.network.lstm_size == 512
    optimizer = exp.spec.learner.optimizer
    assert (optimizer.name, optimizer.learning_rate, optimizer.epsilon) == ("adam", 1e-4, 1e-3)
    # The other agents keep theirs.
    for name in ("vtrace", "ppo"):
        exp = parse_experiment(doc(agent={"name": name}))
        assert exp.spec.agent.network.lstm_size == 0
        assert (exp.spec.learner.optimizer.learning_rate, exp.spec.learner.optimizer.epsilon) == (
            1e-3,
            1e-7,
        )


def test_a_replay_that_cannot_reach_its_minimum_is_refused():
    # The learner would wait for minReplaySize sequences forever while the actors ran on.
    r2d2 = {"replayCapacity": 500, "minReplaySize": 1000}
    path, reason = only_problem(doc(agent={"name": "r2d2", "r2d2": r2d2}))
    assert path == "spec.agent.r2d2.minReplaySize"
    assert "spec.agent.r2d2.replayCapacity (500)" in reason and "got 1000" in reason
    parse_experiment(doc(agent={"name": "r2d2", "r2d2": {"replayCapacity": 1000}}))
    # Another agent ignores the section.
    parse_experiment(doc(agent={"name": "vtrace", "r2d2": r2d2}))


def test_agent_dependent_defaults_yield_to_what_the_document_says():
    document = doc(
        agent={"name": "r2d2", "network": {"lstmSize": 0}},
        learner={"optimizer": {"name": "rmsprop", "learningRate": 3e-4}},
    )
    before = copy.deepcopy(document)
    exp = parse_experiment(document)
    assert document == before  # resolving defaults changes nothing of the caller's
    assert exp.spec.agent.network.lstm_size == 0
    optimizer = exp.spec.learner.optimizer
    assert (optimizer.name, optimizer.learning_rate, optimizer.epsilon) == ("rmsprop", 3e-4, 1e-3)
    # null stands for the agent's default, as leaving the field out does.
    exp = parse_experiment(
        doc(agent={"name": "r2d2", "network": {"lstmSize": None}}, learner={"optimizer": None})
    )
    assert exp.spec.agent.network.lstm_size == 512
    assert exp.spec.learner.optimizer.learning_rate == 1e-4
    # A dumped Experiment states the resolved values, so it reads back the same whatever the
    # agent's defaults become.
    dumped = load_yaml(dump_experiment(exp))
    assert dumped["spec"]["agent"]["network"]["lstmSize"] == 512
    assert parse_experiment(dumped) == exp


def test_the_batchppo_preset_clips_observations_at_batchppos_5():
    def clip_of(**ppo):
        return parse_experiment(
            doc(agent={"name": "ppo", "ppo": ppo})
        ).spec.agent.ppo.observation_clip

    assert clip_of() == 10.0 and clip_of(preset="clip") == 10.0
    assert clip_of(preset="batchppo") == 5.0
    assert clip_of(preset="batchppo", observationClip=8) == 8.0
    assert clip_of(preset="batchppo", observationClip=None) == 5.0


def test_agent_dependent_defaults_leave_bad_documents_to_the_parser():
    problems = dict(problems_of(doc(agent={"name": "r2d2", "network": 5})))
    assert problems["spec.agent.network"].startswith("must be a mapping")
    problems = dict(problems_of(doc(agent={"name": ["r2d2"]})))
    assert problems["spec.agent.name"].startswith("must be a string")


def test_atari_and_football_sections():
    exp = parse_experiment(
        doc(env={"id": "ALE/Breakout-v5", "atari": {"frameStack": 1, "fullActionSpace": True}})
    )
    assert exp.spec.env.atari.frame_stack == 1 and exp.spec.env.atari.noop_max == 30
    problems = problems_of(
        doc(
            env={
                "atari": {"stickyActionProbability": 1.5},
                "football": {"representation": "pixels"},
            }
        )
    )
    assert dict(problems) == {
        "spec.env.atari.stickyActionProbability": "must be <= 1, got 1.5",
        "spec.env.football.representation": "must be one of simple115v2, extracted; got 'pixels'",
    }


def test_env_backend_envpool_must_be_able_to_step_the_env():
    assert parse_experiment(doc(env={"id": "ALE/Pong-v5"})).spec.env.backend == "auto"
    parse_experiment(doc(env={"id": "ALE/Pong-v5", "backend": "envpool", "options": {"mode": 1}}))
    assert dict(problems_of(doc(env={"id": "CartPole-v1", "backend": "envpool"}))) == {
        "spec.env.backend": "envpool steps only Atari games (ALE/...), not CartPole-v1"
    }
    problems = problems_of(
        doc(
            env={
                "id": "ALE/Pong-v5",
                "backend": "envpool",
                "atari": {"noopMax": 0, "frameSkip": 1},
                "options": {"render_mode": "rgb_array"},
            }
        )
    )
    assert dict(problems) == {
        "spec.env.atari.noopMax": "envpool needs noopMax >= 1, got 0",
        "spec.env.atari.frameSkip": "envpool needs frameSkip >= 2, got 1",
        "spec.env.options": "envpool takes only mode, difficulty, not render_mode",
    }
    # auto falls back to gymnasium where envpool cannot serve: no problem to report.
    parse_experiment(doc(env={"id": "ALE/Pong-v5", "atari": {"noopMax": 0}}))
    assert dict(problems_of(doc(env={"backend": "cpp"})))["spec.env.backend"].startswith(
        "must be one of auto, gymnasium, envpool"
    )


# --------------------------------------------------------------------------------------------
# Declarations: docs and defaults
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Cluster fields (read by the operator, ignored by the local launcher)
# --------------------------------------------------------------------------------------------


def test_cluster_defaults():
    spec = parse_experiment(doc()).spec
    assert spec.learner.accelerator.kind == "cpu"
    assert spec.learner.metrics_port == 9090
    assert spec.learner.resources.cpu == "4" and spec.learner.resources.memory == "16Gi"
    assert spec.actors.resources.cpu == "1" and not spec.actors.spot
    assert spec.service_account_name == "" and spec.suspend is False
    assert spec.active_deadline_seconds is None and spec.ttl_seconds_after_finished is None
    assert spec.backoff_limit == 6 and spec.queue_name == ""


def test_cluster_fields_parse():
    spec = parse_experiment(
        doc(
            learner={
                "accelerator": {"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"}},
                "resources": {"cpu": "8", "memory": "64Gi", "cpuLimit": "16"},
                "image": "europe-docker.pkg.dev/p/r/learner:v1@sha256:ab",
            },
            actors={"spot": True, "resources": {"cpu": "500m", "memory": "1.5Gi"}},
            serviceAccountName="seedrl-wi",
            suspend=True,
            activeDeadlineSeconds=3600,
            backoffLimit=2,
            ttlSecondsAfterFinished=0,
            queueName="team-a",
        )
    ).spec
    assert spec.learner.accelerator.tpu.topology == "2x4"
    assert spec.learner.resources.cpu_limit == "16"
    assert spec.actors.spot and spec.actors.resources.cpu == "500m"
    assert spec.suspend and spec.active_deadline_seconds == 3600 and spec.queue_name == "team-a"


@pytest.mark.parametrize(
    "dotted, value, fragment",
    [
        ("spec.learner.resources.memory", "lots", "Kubernetes quantity"),
        ("spec.learner.resources.cpu", 4, "must be a string"),
        ("spec.learner.accelerator.kind", "fpga", "must be one of cpu, gpu, tpu"),
        ("spec.learner.accelerator.tpu.topology", "2by2", "e.g. 2x4"),
        ("spec.learner.accelerator.tpu.type", "v5e", "GKE TPU accelerator"),
        ("spec.learner.accelerator.gpu.count", 0, "must be >= 1"),
        ("spec.learner.image", "has space", "image reference"),
        ("spec.serviceAccountName", "Bad_Name", "DNS subdomain"),
        ("spec.activeDeadlineSeconds", 0, "must be >= 1"),
        ("spec.queueName", "Q", "must match"),
    ],
)
def test_bad_cluster_fields_name_the_field(dotted, value, fragment):
    assert_one(with_path(dotted, value), dotted, fragment)


#: Every TPU shape a user could type that no single-host node pool schedules, with the field
#: refused and what the message must say (it always lists the valid choices).
UNSCHEDULABLE_TPUS = [
    (
        "tpu-v4-podslice",
        "2x2x2",
        "topology",
        "v4 2x2x2 spans 2 hosts; single-host v4 topologies: 2x2x1",
    ),
    (
        "tpu-v4-podslice",
        "2x2x4",
        "topology",
        "v4 2x2x4 spans 4 hosts; single-host v4 topologies: 2x2x1",
    ),
    ("tpu-v4-podslice", "4x4x4", "topology", "spans 16 hosts; single-host v4 topologies: 2x2x1"),
    (
        "tpu-v4-podslice",
        "2x2",
        "topology",
        "v4 2x2 is not a v4 slice shape (3 dimensions); single-host v4 topologies: 2x2x1",
    ),
    (
        "tpu-v5p-slice",
        "2x2x2",
        "topology",
        "v5p 2x2x2 spans 2 hosts; single-host v5p topologies: 2x2x1",
    ),
    (
        "tpu-v5p-slice",
        "2x4x4",
        "topology",
        "v5p 2x4x4 spans 8 hosts; single-host v5p topologies: 2x2x1",
    ),
    (
        "tpu-v5-lite-podslice",
        "2x2x1",
        "topology",
        "v5e 2x2x1 is not a v5e slice shape (2 dimensions); "
        "single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v5-lite-podslice",
        "4x4",
        "topology",
        "v5e 4x4 spans 2 hosts; single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v5-lite-podslice",
        "1x2",
        "topology",
        "v5e 1x2 is not a single-host slice; single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v6e-slice",
        "4x4",
        "topology",
        "v6e 4x4 spans 2 hosts; single-host v6e topologies: 1x1, 2x2, 2x4",
    ),
    ("tpu-v6e-slice", "8x16", "topology", "spans 16 hosts; single-host v6e topologies"),
    (
        "tpu-v3-podslice",
        "2x2",
        "type",
        "unknown TPU accelerator 'tpu-v3-podslice'; one of: tpu-v4-podslice (v4), "
        "tpu-v5-lite-podslice (v5e), tpu-v5p-slice (v5p), tpu-v6e-slice (v6e)",
    ),
    ("tpu-v7x", "2x2x1", "type", "unknown TPU accelerator 'tpu-v7x'; one of:"),
]
SCHEDULABLE_TPUS = [
    (name, topology) for name, g in TPU_GENERATIONS.items() for topology in g.single_host_topologies
]


@pytest.mark.parametrize("tpu_type,topology,field,message", UNSCHEDULABLE_TPUS)
def test_unschedulable_tpu_shapes_are_refused_with_the_valid_choices(
    tpu_type, topology, field, message
):
    document = doc(
        learner={"accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}}
    )
    assert_one(document, f"spec.learner.accelerator.tpu.{field}", message)
    # The TPU section of a learner that is not on a TPU does not matter.
    document["spec"]["learner"]["accelerator"]["kind"] = "cpu"
    parse_experiment(document)


@pytest.mark.parametrize("tpu_type,topology", SCHEDULABLE_TPUS)
def test_every_single_host_tpu_shape_is_accepted(tpu_type, topology):
    exp = parse_experiment(
        doc(
            learner={
                "accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}
            }
        )
    )
    generation = TPU_GENERATIONS[tpu_type]
    assert tpu_chips(topology) <= generation.chips_per_host
    assert exp.spec.learner.accelerator.tpu.topology == topology


def test_the_tpu_table_is_what_gke_documents():
    # Chips per VM and the single-host shapes of "Plan TPUs in GKE": v4 and v5p VMs hold 4
    # chips, v5e and v6e VMs up to 8.
    assert {
        name: (g.name, g.chips_per_host, g.single_host_topologies)
        for name, g in TPU_GENERATIONS.items()
    } == {
        "tpu-v4-podslice": ("v4", 4, ("2x2x1",)),
        "tpu-v5-lite-podslice": ("v5e", 8, ("1x1", "2x2", "2x4")),
        "tpu-v5p-slice": ("v5p", 4, ("2x2x1",)),
        "tpu-v6e-slice": ("v6e", 8, ("1x1", "2x2", "2x4")),
    }
    # The default TPU section is schedulable.
    assert not tpu_problems(TPUConfig())


def test_metrics_port_must_differ_from_grpc_port():
    assert_one(doc(learner={"port": 9090}), "spec.learner.metricsPort", "must differ")


def test_atari_frames_count_the_frame_skip():
    pong = parse_experiment(
        {
            "metadata": {"name": "p"},
            "spec": {"env": {"id": "ALE/Pong-v5", "atari": {"frameSkip": 3}}},
        }
    )
    assert pong.spec.env.is_atari and pong.spec.env.frames_per_step == 3
    cartpole = parse_experiment({"metadata": {"name": "c"}})
    assert not cartpole.spec.env.is_atari and cartpole.spec.env.frames_per_step == 1


def test_the_custom_resource_coordinates_make_the_api_version():
    from seedrl.common.config import GROUP, PLURAL, SINGULAR, VERSION

    assert API_VERSION == f"{GROUP}/{VERSION}" == "seedrl.dev/v1alpha1"
    assert (PLURAL, SINGULAR, KIND) == ("experiments", "experiment", "Experiment")


# --------------------------------------------------------------------------------------------
# Bounded YAML: aliases, recursion, nesting and size
# --------------------------------------------------------------------------------------------

LAUGHS = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10) if i else 'lol, lol'}]\n" for i in range(9)
)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("r: &r [*r]\n", "line 1: a recursive alias"),
        ("a: &a {b: *a}\n", "a recursive alias"),
        (LAUGHS, "aliases expand the document from"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ("a: " + "[" * 100 + "]" * 100, "nested deeper than 64 levels"),
        ("a: [1, 2\n", "expected ',' or ']'"),
    ],
)
def test_hostile_yaml_is_refused_in_one_line(text, reason):
    with pytest.raises(ConfigError) as e:
        load_yaml(text, "f.yaml")
    ((path, message),) = e.value.problems
    assert path == "f.yaml" and reason in message
    assert "\n" not in message


def test_bounded_aliases_and_large_plain_documents_still_load():
    assert load_yaml("x: &x {a: 1}\ny: {<<: *x, b: 2}\nz: [*x, *x]\n") == {
        "x": {"a": 1},
        "y": {"a": 1, "b": 2},
        "z": [{"a": 1}, {"a": 1}],
    }
    plain = "\n".join(f"k{i}: {i}" for i in range(60_000))  # no alias: size is what it is
    assert len(load_yaml(plain)) == 60_000


def test_a_file_over_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # 50 MB (sparse: nothing to write, nothing to read)
    with pytest.raises(ConfigError, match="over 1048576 bytes; refused unread"):
        read_yaml_file(str(path), "Experiment")
    with pytest.raises(ConfigError, match="over the limit"):
        load_yaml("#" * (MAX_YAML_BYTES + 1))


def test_an_experiment_bomb_under_any_field_is_refused(tmp_path):
    for where in (
        "metadata:\n  name: *l8\n",
        "metadata: {name: x}\nspec:\n  env:\n    options: {o: *l8}\n",
    ):
        path = tmp_path / "bomb.yaml"
        path.write_text(LAUGHS + where)
        with pytest.raises(ConfigError, match="aliases expand"):
            load_experiment(str(path))


def test_max_envs_per_actor_bounds_one_stream():
    exp = parse_experiment(
        {
            "metadata": {"name": "x"},
            "spec": {
                "actors": {"envsPerActor": 300, "streamsPerActor": 2},
                "learner": {"maxEnvsPerActor": 150},
            },
        }
    )
    assert exp.spec.learner.max_envs_per_actor == 150
    with pytest.raises(ConfigError) as e:
        parse_experiment(
            {
                "metadata": {"name": "x"},
                "spec": {
                    "actors": {"envsPerActor": 301, "streamsPerActor": 2},
                    "learner": {"maxEnvsPerActor": 150},
                },
            }
        )
    assert e.value.problems == [
        (
            "spec.learner.maxEnvsPerActor",
            "must be at least the envs of one actor stream (envsPerActor "
            "/ streamsPerActor = 151), got 150",
        )
    ]
