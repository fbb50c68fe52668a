"""The learner's status: its JSON, the parser every reader uses, and the operator's copy."""

import json
import math

import pytest

from seedrl.common.learner_status import STATES, LearnerStatus, experiment_status_fields

LEARNER_JSON = {
    "experiment": "exp",
    "state": "running",
    "env_steps": 12000,
    "learner_steps": 30,
    "episodes": 50,
    "mean_return": 21.5,
    "actors": 2,
    "last_checkpoint": "ckpt-3",
    "stop_reason": None,
    "elapsed": 12.0,
    "metrics": {"loss": 1.0},
    "a_field_of_a_newer_learner": [1],
}


def test_parse():
    status = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    assert status == LearnerStatus(
        state="running",
        experiment="exp",
        env_steps=12000,
        learner_steps=30,
        episodes=50,
        mean_return=21.5,
        actors=2,
        last_checkpoint="ckpt-3",
        elapsed=12.0,
        metrics={"loss": 1.0},
    )
    early = LearnerStatus.from_json(
        json.dumps({"state": "waiting_for_actors", "mean_return": None, "env_steps": None})
    )
    assert early.mean_return is None and early.env_steps == 0


def test_non_finite_numbers_read_as_none_where_allowed():
    status = LearnerStatus.from_json(
        {"state": "running", "mean_return": math.inf, "metrics": {"loss": math.nan}}
    )
    assert status.mean_return is None and status.metrics == {"loss": None}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        (json.dumps({"state": "dancing"}), "state"),
        (json.dumps({"state": "running", "env_steps": "many"}), "env_steps"),
        (json.dumps({"state": "running", "env_steps": -1}), "env_steps"),
        (json.dumps({"state": "running", "env_steps": True}), "env_steps"),
        (json.dumps({"state": "running", "mean_return": "high"}), "mean_return"),
        (json.dumps({"state": "running", "last_checkpoint": 3}), "last_checkpoint"),
        (json.dumps({"state": "running", "metrics": [1]}), "metrics"),
        (json.dumps({"state": "running", "metrics": {"loss": "x"}}), "metrics.loss"),
        (json.dumps({"state": "running", "elapsed": "NaN"}), "elapsed"),
    ],
)
def test_bad_documents_are_refused_naming_the_field(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        LearnerStatus.from_json(text)


def test_round_trip_leaves_out_the_groups_a_run_does_not_have():
    bare = LearnerStatus(state="running", env_steps=5)
    data = bare.to_json()
    assert "eval_episodes" not in data and "last_checkpoint" not in data and "time" not in data
    assert data["mean_return"] is None and data["stop_reason"] is None  # always there
    assert LearnerStatus.from_json(json.dumps(data)) == bare
    full = LearnerStatus(
        state="finished",
        eval_episodes=3,
        eval_mean_return=1.5,
        checkpoint_failures=0,
        last_checkpoint=None,
        time=7.0,
    )
    data = full.to_json()
    assert data["eval_episodes"] == 3 and data["last_checkpoint"] is None
    assert data["checkpoint_failures"] == 0 and data["time"] == 7.0
    assert LearnerStatus.from_json(json.dumps(data)) == full


def test_the_experiment_status_copy_reads_back():
    status = LearnerStatus.from_json(LEARNER_JSON)
    copied = status.to_experiment_status()
    assert copied == {
        "learnerState": "running",
        "envSteps": 12000,
        "envFrames": 0,
        "learnerSteps": 30,
        "episodes": 50,
        "meanReturn": 21.5,
        "evalMeanReturn": None,
        "stopReason": None,
        "lastCheckpoint": "ckpt-3",
    }
    back = LearnerStatus.from_experiment_status({"phase": "Running", **copied})
    assert back.to_experiment_status() == copied
    assert LearnerStatus.from_experiment_status({"phase": "Pending"}) is None
    assert set(experiment_status_fields()) == set(copied)
    assert STATES[0] == "waiting_for_actors"
