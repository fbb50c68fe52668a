"""JSON the project writes is valid JSON: non-finite numbers become null (common/finite_json.py)."""

import io
import json
import math

import numpy as np
import pytest

from seedrl.common import finite_json
from seedrl.common.learner_status import LearnerStatus
from seedrl.learner.run_files import RunFiles


def strict(text):
    def refuse(token):
        raise AssertionError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_at_any_depth():
    data = {
        "mean_return": math.inf,
        "metrics": {"loss": math.nan, "ok": 1.5},
        "returns": [1.0, -math.inf, np.float32("nan"), np.float64(2.0)],
        "array": np.array([np.inf, 3.0]),
        "count": np.int64(7),
        "name": "x",
        "n": None,
    }
    assert strict(finite_json.dumps(data)) == {
        "mean_return": None,
        "metrics": {"loss": None, "ok": 1.5},
        "returns": [1.0, None, None, 2.0],
        "array": [None, 3.0],
        "count": 7,
        "name": "x",
        "n": None,
    }
    out = io.StringIO()
    finite_json.dump({"x": math.nan}, out)
    assert strict(out.getvalue()) == {"x": None}


def test_what_cannot_be_json_still_raises():
    with pytest.raises(TypeError):
        finite_json.dumps({"x": object()})


def test_run_files_are_valid_json_whatever_the_numbers(tmp_path):
    files = RunFiles(str(tmp_path))
    files.write_status(LearnerStatus(state="running", mean_return=math.inf))
    files.append_metrics(LearnerStatus(state="running", metrics={"loss": math.nan}))
    files.write_summary({"mean_return_100": -math.inf})
    assert strict((tmp_path / "status.json").read_text())["mean_return"] is None
    assert strict((tmp_path / "metrics.jsonl").read_text())["metrics"]["loss"] is None
    assert strict((tmp_path / "summary.json").read_text()) == {"mean_return_100": None}
