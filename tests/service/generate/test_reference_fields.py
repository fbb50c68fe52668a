"""The field reference pages (service/generate/reference_fields.py): every field the CRD's
schema declares is on experiment.md or status.md, with what the schema says of it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from seedrl.common import config, learner_status
from seedrl.service.generate import reference_fields
from seedrl.service.operator import crd

SCHEMA = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _paths(node, path):
    """Every dotted path under a schema node, walked independently of the generator
    (``[]`` for the items of an array)."""
    out = []
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}"
        out.append(here)
        out += _paths(child, here)
        if child.get("type") == "array":
            out += _paths(child["items"], f"{here}[]")
    return out


def _row(page, path):
    """The table row of the field at ``path``, split into cells."""
    rows = [line for line in page.splitlines() if line.startswith(f"| `{path}` |")]
    assert len(rows) == 1, f"{path}: {len(rows)} rows"
    return [cell.strip() for cell in rows[0].strip("|").split(" | ")]


def test_every_field_of_the_crd_spec_is_on_the_experiment_page():
    page = reference_fields.experiment_page()
    paths = _paths(SCHEMA["properties"]["spec"], "spec")
    # The walk found the schema, down to the items of arrays, not an empty object.
    assert {"spec.agent.vtrace.discount", "spec.learner.placement.tolerations[].key"} <= set(paths)
    missing = [p for p in paths if f"| `{p}` |" not in page]
    assert not missing
    # A section is a heading of its own as well as a row of its parent's table.
    for section in ("spec.agent.vtrace", "spec.learner.accelerator.tpu", "spec.env.atari"):
        assert f"`{section}`\n" in page


def test_every_field_of_the_crd_status_is_on_the_status_page():
    page = reference_fields.status_page()
    paths = _paths(SCHEMA["properties"]["status"], "status")
    assert "status.conditions[].reason" in paths and "status.cost.breakdown.actor.cpuUsd" in paths
    assert [p for p in paths if f"| `{p}` |" not in page] == []


def test_every_key_of_the_learner_status_is_on_the_status_page():
    page = reference_fields.status_page()
    for f in dataclasses.fields(learner_status.LearnerStatus):
        assert f"| `{f.name}` |" in page
    assert "| `mean_return` | number or null | `null` | `status.meanReturn` |" in page


def test_a_row_has_the_type_default_bounds_and_doc():
    page = reference_fields.experiment_page()
    discount = _row(page, "spec.agent.vtrace.discount")
    assert discount[1:4] == ["number", "`0.99`", "> 0.0; ≤ 1.0"]
    assert discount[4] == "Discount factor gamma applied per environment step."
    assert _row(page, "spec.agent.name")[2:4] == [
        '`"vtrace"`',
        'one of `"vtrace"`, `"r2d2"`, `"ppo"`',
    ]
    assert _row(page, "metadata.name")[2] == "required"
    # A section's default is a default of its fields: the learner asks for 4 CPUs, an actor 1.
    assert _row(page, "spec.learner.resources.cpu")[2] == '`"4"`'
    assert _row(page, "spec.actors.resources.cpu")[2] == '`"1"`'
    # int64 bounds go without saying; a pipe in a pattern stays inside its cell.
    assert _row(page, "spec.budget.maxEnvSteps")[3] == "≥ 0"
    assert len(_row(page, "spec.learner.resources.memory")) == 5


@pytest.mark.parametrize("path, field", config.dependent_default_fields(config.Experiment))
def test_a_default_that_depends_on_another_field_is_given_case_by_case(path, field):
    source, table = field.metadata["default_by"]
    default = _row(reference_fields.experiment_page(), ".".join(path))[2]
    for value, default_for_value in table.items():
        assert (
            f"`{json.dumps(default_for_value)}` if `{source}` is `{json.dumps(value)}`" in default
        )
    assert default.endswith(f"else `{json.dumps(field.default)}`")
