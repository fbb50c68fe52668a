"""What earlier learner Jobs used of the backoff limit and the deadline
(service/operator/usage.py)."""

from __future__ import annotations

import jsonschema

from seedrl.common.schema import to_json_schema
from seedrl.service.operator import crd
from seedrl.service.operator.render import render
from seedrl.service.operator.status import compute_status, merge_patch, status_patch
from seedrl.service.operator.usage import LearnerUsage, advance_usage, usage_now


def _job_obj(uid, failed=0, start=None):
    status = {"failed": failed}
    if start:
        status["startTime"] = start
    return {"metadata": {"uid": uid}, "status": status}


def test_a_replaced_or_resumed_learner_does_not_start_its_limits_from_zero(exp_of, by_kind):
    exp = exp_of(backoffLimit=6, activeDeadlineSeconds=3600)
    t0, t1, t2 = "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z"
    # Job A ran 10 minutes and counted 2 failures.
    usage = advance_usage(None, _job_obj("a", 0, t0), t0)
    usage = advance_usage(usage, _job_obj("a", 2, t0), t1)
    # An edit replaced it: Job A is gone, Job B is to be made with what is left.
    usage = advance_usage(usage, None, t1)
    left = LearnerUsage.from_status({"learnerUsage": usage})
    assert (left.failed, left.active_seconds) == (2, 600.0)
    job = by_kind(render(exp, usage=left))["Job"]["spec"]
    assert (job["backoffLimit"], job["activeDeadlineSeconds"]) == (4, 3000)
    # Job B runs 10 minutes, is suspended (its startTime goes), then resumed: the deadline
    # it is resumed with is what is left after both runs.
    usage = advance_usage(usage, _job_obj("b", 0, t1), t1)
    usage = advance_usage(usage, _job_obj("b", 0, t1), t2)
    usage = advance_usage(usage, _job_obj("b", 0, None), t2)
    left = LearnerUsage.from_status({"learnerUsage": usage})
    assert (left.failed, left.active_seconds) == (2, 1200.0)
    assert left.deadline(exp) == 2400
    # Used up: at least a second, so the Job fails at once with DeadlineExceeded.
    assert LearnerUsage(active_seconds=99999).deadline(exp) == 1
    assert LearnerUsage(failed=9).backoff_limit(exp) == 0
    # Recorded by compute_status, in the CRD's status schema.
    status = compute_status(
        exp,
        generation=1,
        previous={"learnerUsage": usage},
        job=None,
        deployment=None,
        learner=None,
        now=t2,
    )
    assert status["learnerUsage"]["earlierFailed"] == 2
    jsonschema.validate(status, to_json_schema(crd.status_schema(), closed=True))


def _suspended_job(uid, start, at):
    job = _job_obj(uid, 0, start)
    job["status"]["conditions"] = [
        {"type": "Suspended", "status": "True", "lastTransitionTime": at, "reason": "JobSuspended"}
    ]
    return job


def test_a_suspended_run_is_counted_once_up_to_its_suspension(exp_of):
    exp = exp_of(activeDeadlineSeconds=600)
    t0, t_s, t1, t2 = (
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:01:40Z",
        "2026-01-01T00:01:45Z",
        "2026-01-01T00:01:50Z",
    )
    usage = advance_usage(None, _job_obj("a", 0, t0), t0)
    # Suspended at t_s; the Job may keep showing the run's startTime meanwhile.
    usage = advance_usage(usage, _suspended_job("a", t0, t_s), t1)
    assert "runStart" not in usage and usage["earlierActiveSeconds"] == 100.0
    # Refreshes during the suspension count the run no more.
    usage = advance_usage(usage, _suspended_job("a", t0, t_s), t2)
    assert usage["earlierActiveSeconds"] == 100.0
    assert usage_now({"learnerUsage": usage}, None, t2).deadline(exp) == 500
    # A resume before any refresh saw the suspension: the Job counts up to it.
    fresh = advance_usage(None, _job_obj("a", 0, t0), t0)
    assert usage_now({"learnerUsage": fresh}, _suspended_job("a", t0, t_s), t1).deadline(exp) == 500


def test_the_status_patch_removes_nested_keys_that_went():
    stored = {"learnerUsage": {"runStart": "x", "jobUid": "a", "lastSeen": "t0"}, "phase": "P"}
    status = {"learnerUsage": {"jobUid": "a", "lastSeen": "t1"}, "phase": "P"}
    # A merge patch keeps a key it leaves out: only a null removes it.
    assert status_patch(stored, status) == {"learnerUsage": {"runStart": None, "lastSeen": "t1"}}
    assert status_patch(status, status) == {}
    assert merge_patch({"a": 1}, [1]) == [1]
