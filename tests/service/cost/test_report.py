"""The written report: the lines the CLI prints, and the schema the CRD's status.cost has."""

import pytest

from seedrl.service import cost
from seedrl.service.cost import PodRecord, Resources
from support.cost_data import ACTOR, H, PRICES, T0, TPU_LEARNER


def test_the_cost_line_and_the_report():
    records = [
        PodRecord("learner@1", "learner", Resources(4, 16), False, ((T0, T0 + 312),)),
        PodRecord("actor-0@1", "actor", Resources(1, 2), False, ((T0, T0 + 300),)),
        PodRecord("actor-1@1", "actor", Resources(1, 2), False, ((T0, T0 + 300),)),
    ]
    now = T0 + 312
    report = cost.compute_cost(
        records,
        PRICES,
        env_frames=1_000_000,
        now=now,
        description=cost.describe_records(records, now),
    )
    # learner 312 s x (4 x 0.04 + 16 x 0.005) $/h = 0.0208; actors 600 s x 0.05 $/h = 0.008333
    assert report.total_usd == pytest.approx(0.0208 + 0.05 / 6)
    line = cost.format_cost_line(report.to_status())
    assert line == (
        "cost: $0.0291 estimated (learner 1 x cpu 4 vCPU/16 GiB 0:05:12, "
        "actors 2 x cpu 1 vCPU/2 GiB 0:10:00) = $0.0291 per million frames "
        "[prices test-region 2026-11-01, table test-1]"
    )
    text = cost.format_report(report.to_status())
    assert "learner" in text and "actor" in text and "test-1" in text


def test_status_and_records_validate_against_the_schema_offered_to_the_crd():
    import jsonschema

    def to_json_schema(node):  # OpenAPI's nullable is a type list in JSON Schema
        if isinstance(node, dict):
            out = {k: to_json_schema(v) for k, v in node.items() if k != "nullable"}
            if node.get("nullable"):
                out["type"] = [node["type"], "null"]
            return out
        return node

    schema = cost.status_schema()
    records = [
        PodRecord("l", "learner", TPU_LEARNER, False, ((T0, None),)),
        PodRecord("a", "actor", ACTOR, True, ((T0, T0 + H),)),
    ]
    status = cost.compute_cost(records, PRICES, now=T0 + H).to_status()
    jsonschema.validate(status, to_json_schema(schema["cost"]))
    jsonschema.validate([r.to_dict() for r in records], to_json_schema(schema["records"]))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"totalUsd": "lots"}, to_json_schema(schema["cost"]))


def test_format_duration_counts_whole_seconds():
    assert cost.format_duration(3725.9) == "1:02:05" and cost.format_duration(-3) == "0:00:00"


def test_the_breakdown_has_one_entry_per_role():
    from dataclasses import fields

    from seedrl.service.cost.report import Breakdown

    assert tuple(f.name for f in fields(Breakdown)) == cost.ROLES
