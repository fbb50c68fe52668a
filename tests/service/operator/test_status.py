"""An Experiment's status from what the operator observed (service/operator/status.py)."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from seedrl.common.config import ConfigError
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.schema import to_json_schema
from seedrl.service.operator import crd
from seedrl.service.operator.reconcile import finished_before, image_defaults
from seedrl.service.operator.render import render
from seedrl.service.operator.status import (
    compute_status,
    invalid_status,
    learner_with_frames,
    now_rfc3339,
)


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
}


def conds(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_status_advances_from_pending_to_running_to_succeeded(exp_of, job, deployment):
    exp = exp_of(actors={"replicas": 2})
    s0 = compute_status(
        exp,
        generation=1,
        previous=None,
        job=None,
        deployment=None,
        learner=None,
        now="2026-01-01T00:00:00Z",
    )
    assert s0["phase"] == "Pending" and conds(s0)["Ready"][0] == "False"
    assert s0["selector"] == "seedrl.dev/experiment=exp,seedrl.dev/role=actor"
    s1 = compute_status(
        exp,
        generation=1,
        previous=s0,
        job=job(1, 1),
        deployment=deployment(1),
        learner=None,
        learner_error="connection refused",
        now="2026-01-01T00:01:00Z",
    )
    assert s1["phase"] == "Running"
    assert conds(s1)["ActorsReady"] == ("False", "NotAllReady")
    assert conds(s1)["Progressing"] == ("Unknown", "StatusUnavailable")
    learner = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    s2 = compute_status(
        exp,
        generation=1,
        previous=s1,
        job=job(1, 1),
        deployment=deployment(2),
        learner=learner,
        now="2026-01-01T00:02:00Z",
    )
    assert conds(s2)["Ready"] == ("True", "Ready")
    assert conds(s2)["Progressing"] == ("True", "Training")
    assert s2["envSteps"] == 12000 and s2["learnerSteps"] == 30 and s2["meanReturn"] == 21.5
    assert s2["lastCheckpoint"] == "ckpt-3" and s2["replicas"] == 2
    assert s2["startTime"] == "2026-01-01T00:00:00Z"
    ready = next(c for c in s2["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:02:00Z"
    valid = next(c for c in s2["conditions"] if c["type"] == "Valid")
    assert valid["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged since s0
    done = job(
        0,
        0,
        [
            {
                "type": "Complete",
                "status": "True",
                "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
            }
        ],
    )
    done["status"]["completionTime"] = "2026-01-01T01:00:00Z"
    s3 = compute_status(
        exp,
        generation=1,
        previous=s2,
        job=done,
        deployment=deployment(2),
        learner=None,
        now="2026-01-01T01:00:05Z",
    )
    assert s3["phase"] == "Succeeded" and s3["completionTime"] == "2026-01-01T01:00:00Z"
    assert s3["actors"]["desired"] == 0
    assert conds(s3)["Complete"] == ("True", "CompletionsReached")
    # The Job is deleted after ttlSecondsAfterFinished: still Succeeded, no actors wanted.
    s4 = compute_status(
        exp, generation=1, previous=s3, job=None, deployment=deployment(0), learner=None
    )
    assert s4["phase"] == "Succeeded" and s4["actors"]["desired"] == 0
    assert conds(s4)["LearnerReady"] == ("False", "Finished")
    assert finished_before(s4)
    assert not finished_before(
        invalid_status(None, 1, ConfigError([("spec.x", "bad")]), "2026-01-01T00:00:00Z")
    )


def learner_pod(state, deleting=False):
    pod = {
        "metadata": {"name": "exp-learner-x", "labels": {"seedrl.dev/role": "learner"}},
        "status": {"containerStatuses": [{"name": "learner", "state": {state: {}}}]},
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    return pod


def test_the_phase_is_running_from_the_learner_containers_start_not_its_readiness(exp_of, job):
    # The learner imports TensorFlow and trains before its first readiness probe passes, and
    # is not ready once finished while it checkpoints: a short run read Pending -> Succeeded.
    exp = exp_of()

    def phase_of(*pods, ready=0):
        s = compute_status(
            exp,
            generation=1,
            previous=None,
            job=job(ready, 1),
            deployment=None,
            learner=None,
            learner_pods=pods,
        )
        return s["phase"], conds(s)["LearnerReady"][1]

    assert phase_of() == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("waiting")) == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("running")) == ("Running", "PodNotReady")
    assert phase_of(learner_pod("running"), ready=1) == ("Running", "PodReady")
    # A drained or preempted learner on its way out: waiting for the next one.
    assert phase_of(learner_pod("running", deleting=True)) == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("terminated")) == ("Pending", "PodNotReady")


def test_a_learner_older_than_the_operator_has_its_frames_counted_from_its_steps(exp_of, job):
    # A learner image from before env_frames (an Experiment running through an operator
    # upgrade) reports steps only: Pong's frames are 4 per step, and its cost per million
    # frames must not read n/a to the end of the run.
    pong = exp_of(env={"id": "ALE/Pong-v5"})
    old = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    assert old.env_frames == 0
    s = compute_status(
        pong, generation=1, previous=None, job=job(1, 1), deployment=None, learner=old
    )
    assert s["envSteps"] == 12000 and s["envFrames"] == 48000
    # A learner that counts frames is believed, and one with no steps yet has no frames.
    new = LearnerStatus.from_json(json.dumps({**LEARNER_JSON, "env_frames": 47996}))
    assert learner_with_frames(pong, new).env_frames == 47996
    idle = LearnerStatus.from_json(json.dumps({**LEARNER_JSON, "env_steps": 0}))
    assert learner_with_frames(pong, idle).env_frames == 0
    cartpole = learner_with_frames(exp_of(), old)
    assert cartpole.env_frames == 12000


def test_no_env_steps_for_no_progress_seconds_turns_progressing_false(exp_of, job, deployment):
    exp = exp_of(budget={"noProgressSeconds": 120})
    stalled = LearnerStatus.from_json(
        json.dumps(
            {
                **LEARNER_JSON,
                "state": "waiting_for_actors",
                "env_steps": 0,
                "seconds_without_env_steps": 130.4,
                "refused_streams": 3,
                "last_refusal": "a-1: env spec differs from the learner's: observation_shape",
            }
        )
    )
    assert stalled.refused_streams == 3 and stalled.last_refusal.startswith("a-1: env spec")
    status = compute_status(
        exp,
        generation=1,
        previous=None,
        job=job(1, 1),
        deployment=deployment(2),
        learner=stalled,
        now="2026-01-01T00:02:00Z",
    )
    assert conds(status)["Progressing"] == ("False", "NoProgress")
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Progressing")
    assert "No env steps for 130 s" in message and "3 actor stream(s) refused" in message
    assert "observation_shape" in message
    # Below the limit, or with the limit off, the learner is just waiting or training.
    for budget, idle in (({"noProgressSeconds": 120}, 20.0), ({"noProgressSeconds": 0}, 1e6)):
        learner = dataclasses.replace(stalled, seconds_without_env_steps=idle)
        status = compute_status(
            exp_of(budget=budget),
            generation=1,
            previous=None,
            job=job(1, 1),
            deployment=deployment(2),
            learner=learner,
        )
        assert conds(status)["Progressing"] == ("False", "WaitingForActors")
    with pytest.raises(ValueError, match="last_refusal"):
        LearnerStatus.from_json(json.dumps({"state": "running", "last_refusal": 3}))


def test_status_of_failed_suspended_and_refused(exp_of, job, deployment):
    exp = exp_of()
    failed = compute_status(
        exp,
        generation=2,
        previous=None,
        job=job(
            conditions=[
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        ),
        deployment=deployment(0),
        learner=None,
    )
    assert failed["phase"] == "Failed" and conds(failed)["Failed"][1] == "BackoffLimitExceeded"
    suspended = compute_status(
        exp_of(suspend=True),
        generation=2,
        previous=None,
        job=job(),
        deployment=deployment(0),
        learner=None,
    )
    assert suspended["phase"] == "Suspended"
    assert conds(suspended)["Suspended"] == ("True", "SpecSuspended")
    assert conds(suspended)["ActorsReady"] == ("True", "ScaledToZero")
    refused = compute_status(
        exp,
        generation=4,
        previous=None,
        job=job(1, 1),
        deployment=deployment(2),
        learner=None,
        refused=["spec.env.id"],
    )
    assert conds(refused)["SpecApplied"] == ("False", "ImmutableFieldChanged")
    assert (
        "spec.env.id"
        in next(c for c in refused["conditions"] if c["type"] == "SpecApplied")["message"]
    )
    assert "appliedImmutable" not in refused


def test_invalid_status_names_the_field():
    error = ConfigError([("spec.learner.unrollLength", "must be >= 2, got 0")])
    status = invalid_status(None, 5, error, "2026-01-01T00:00:00Z")
    assert status["phase"] == "Failed" and status["observedGeneration"] == 5
    assert conds(status)["Valid"] == ("False", "ValidationFailed")
    message = next(c for c in status["conditions"] if c["type"] == "Valid")["message"]
    assert message == "spec.learner.unrollLength: must be >= 2, got 0"


def test_status_validates_against_the_crd_status_schema(exp_of, job, deployment):
    exp = exp_of()
    learner = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    status = compute_status(
        exp, generation=1, previous=None, job=job(1, 1), deployment=deployment(2), learner=learner
    )
    status["cost"] = {"totalUsd": 1.5, "usdPerHour": 3.0, "usdPerMillionFrames": 0.1}
    schema = to_json_schema(crd.status_schema(), closed=True)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(
        status
    )
    invalid = invalid_status(status, 2, ConfigError([("spec.x", "bad")]), now_rfc3339())
    jsonschema.Draft202012Validator(schema).validate(invalid)


def test_an_operator_upgrade_keeps_the_images_an_experiment_started_with(
    exp_of, by_kind, images_of
):
    from seedrl.common.config import ImageDefaults

    old, new = ImageDefaults(release="0.1.0"), ImageDefaults(release="0.2.0")
    # First reconcile: the running operator's defaults, recorded in the status.
    assert image_defaults(None, new) == new
    status = compute_status(
        exp_of(),
        generation=1,
        previous=None,
        job=None,
        deployment=None,
        learner=None,
        images=old,
    )
    assert status["images"] == {"registry": "ghcr.io/seedrl", "release": "0.1.0"}
    # A newer operator renders that Experiment (and any replacement learner) with them.
    assert image_defaults(status, new) == old
    assert images_of(by_kind(render(exp_of(), images=old)))[0].endswith(":0.1.0")
    jsonschema.validate(
        {"images": status["images"]}, to_json_schema(crd.status_schema(), closed=True)
    )


def test_a_status_that_differs_only_in_when_it_was_looked_at_is_not_written_every_poll():
    from seedrl.service.operator.status import HEARTBEAT_SECONDS, worth_writing

    stored = {
        "phase": "Running",
        "learnerUsage": {"runStart": "2026-01-01T00:00:00Z", "lastSeen": "2026-01-01T01:00:00Z"},
        "cost": {"totalUsd": 1.5, "asOf": "2026-01-01T01:00:00Z"},
    }

    def at(seconds, **changes):
        stamp = f"2026-01-01T01:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}Z"
        status = json.loads(json.dumps(stored))
        status["learnerUsage"]["lastSeen"] = status["cost"]["asOf"] = stamp
        status.update(changes)
        return status

    assert not worth_writing(stored, at(10))
    assert not worth_writing(stored, at(HEARTBEAT_SECONDS - 1))
    # lastSeen bounds the deadline a learner ended unseen can miss: refreshed at least so.
    assert worth_writing(stored, at(HEARTBEAT_SECONDS))
    # Anything else that changed is written at once.
    assert worth_writing(stored, at(10, phase="Succeeded"))
    assert worth_writing(stored, at(10, cost={"totalUsd": 1.6, "asOf": "x"}))
    assert worth_writing(None, at(10))
    assert worth_writing(stored, at(10), heartbeat_seconds=0)


def test_a_null_the_api_server_never_stored_is_no_change():
    """A null in a merge patch removes the key, so the stored status never has it: a computed
    null (``cost.usdPerMillionFrames`` before any frame) must not read as a change at every
    poll; a stored value that became null must."""
    from seedrl.service.operator.status import status_patch

    stored = {"cost": {"totalUsd": 0}, "phase": "Suspended"}
    assert status_patch(stored, {"cost": {"totalUsd": 0, "usdPerMillionFrames": None}}) == {}
    assert status_patch(stored, {"phase": "Suspended", "other": None}) == {}
    assert status_patch(
        {"cost": {"totalUsd": 1, "usdPerMillionFrames": 2.0}},
        {"cost": {"totalUsd": 1, "usdPerMillionFrames": None}},
    ) == {"cost": {"usdPerMillionFrames": None}}
    assert status_patch(stored, {"cost": {"totalUsd": 2}}) == {"cost": {"totalUsd": 2}}
    assert status_patch({}, {"cost": {"totalUsd": 2, "x": None}}) == {
        "cost": {"totalUsd": 2, "x": None}
    }
