"""Minimal Experiment documents and assertions on the problems parse_experiment reports,
shared by the tests of common/config/."""

from __future__ import annotations

from pathlib import Path

import pytest

from seedrl.common.config import API_VERSION, KIND, ConfigError, parse_experiment, set_path

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
