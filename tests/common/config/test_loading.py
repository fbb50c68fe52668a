"""Defaults and round trips, --set overrides and load_experiment (common/config/loading.py)."""

from __future__ import annotations

import pytest

from seedrl.common.config import (
    ConfigError,
    Experiment,
    Metadata,
    apply_overrides,
    dump_experiment,
    load_experiment,
    load_yaml,
    parse_experiment,
    set_path,
    to_document,
)
from support.experiment_docs import EXAMPLE, assert_one, doc, only_problem


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
