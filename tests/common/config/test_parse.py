"""How documents are parsed (common/config/parse.py), through parse_experiment: bounds,
types, unknown fields, choices and patterns, lists and non-finite numbers, and every problem
reported at once."""

from __future__ import annotations

import copy

import pytest

from seedrl.common.config import (
    API_VERSION,
    KIND,
    ConfigError,
    Experiment,
    Metadata,
    apply_overrides,
    load_yaml,
    parse_experiment,
    set_path,
)
from support.experiment_docs import assert_one, doc, only_problem, problems_of, with_path


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
# Null, as the API server reads it (issue 43: tests/cluster/test_experiment_schema.py found
# each difference against the real kube-apiserver)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, attribute",
    [
        ("spec.budget.maxEnvSteps", ("budget", "max_env_steps")),
        ("spec.learner.resources.cpu", ("learner", "resources", "cpu")),
        ("spec.agent.network.hiddenSizes", ("agent", "network", "hidden_sizes")),
        ("spec.env.options", ("env", "options")),
        ("spec.suspend", ("suspend",)),
    ],
)
def test_null_is_the_default_where_a_field_may_not_be_null(path, attribute):
    # The API server prunes such a null and fills in the default (`maxEnvSteps:` with nothing
    # after it is one); seedrl validate refused what kubectl apply takes.
    # The same document without the key (its section present, as the null leaves it).
    parent, key = path.rsplit(".", 1)
    absent = with_path(parent, {}) if parent != "spec" else doc()
    parsed = parse_experiment(with_path(path, None)).spec
    default = parse_experiment(absent).spec
    for name in attribute:
        parsed, default = getattr(parsed, name), getattr(default, name)
    assert parsed == default


def test_a_null_section_is_its_own_default_not_its_classs():
    # The server fills a pruned null section with the section's default: a learner of 4 CPUs
    # and 16Gi. seedrl read spec.learner.resources: null as the class's 1 CPU and 2Gi, so
    # `seedrl validate` showed another learner than the operator would run.
    resources = parse_experiment(with_path("spec.learner.resources", None)).spec.learner.resources
    assert (resources.cpu, resources.memory) == ("4", "16Gi")
    # A required section's null still names what it lacks.
    assert only_problem(doc() | {"metadata": None}) == (
        "metadata.name",
        "required field is missing",
    )


def test_null_stays_a_value_where_a_field_may_be_null():
    exp = parse_experiment(with_path("spec.budget.targetReturn", None))
    assert exp.spec.budget.target_return is None
    assert (
        parse_experiment(with_path("spec.agent.ppo.objective", None)).spec.agent.ppo.objective
        is None
    )


def test_a_null_entry_of_a_string_map_is_no_entry():
    # The server prunes {a: null} to {} in nodeSelector; seedrl refused it.
    selector = {"pool": "actors", "gone": None}
    exp = parse_experiment(with_path("spec.actors.placement.nodeSelector", selector))
    assert exp.spec.actors.placement.node_selector == {"pool": "actors"}


def test_a_null_item_of_a_list_of_objects_is_refused():
    # The server refuses tolerations: [null]; seedrl took the null for a toleration of defaults
    # (operator Equal, empty key), which matches no taint the user meant.
    assert only_problem(with_path("spec.learner.placement.tolerations", [None])) == (
        "spec.learner.placement.tolerations[0]",
        "must be a mapping, got NoneType None",
    )


def test_actor_replicas_fit_the_scale_subresources_int32():
    # The scale subresource (kubectl scale, HPAs) refuses replicas above 2^31-1; seedrl took
    # any int64.
    largest = problems_of(with_path("spec.actors.replicas", 2**31 - 1))
    assert "spec.actors.replicas" not in dict(largest)  # (the learner's stream caps object)
    path, reason = only_problem(with_path("spec.actors.replicas", 2**31))
    assert path == "spec.actors.replicas" and reason.startswith("must be <= 2147483647")
