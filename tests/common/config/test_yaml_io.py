"""YAML loading (common/config/yaml_io.py): YAML 1.2 floats, and documents refused for their
size, depth or aliases."""

from __future__ import annotations

import pytest

from seedrl.common.config import (
    MAX_YAML_BYTES,
    ConfigError,
    load_experiment,
    load_yaml,
    parse_experiment,
    read_yaml_file,
)


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


def test_load_yaml_default_source_name():
    with pytest.raises(ConfigError) as e:
        load_yaml("a: [")
    assert e.value.problems[0][0] == "<string>"


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
