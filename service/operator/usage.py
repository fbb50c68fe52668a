"""What earlier learner Jobs used of an Experiment's backoff limit and deadline, which a new
Job or a resumed one would otherwise start from zero (``status.learnerUsage``)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping

from seedrl.common.config import Experiment


@dataclasses.dataclass(frozen=True)
class LearnerUsage:
    """What the learner has used up of ``spec.backoffLimit`` and
    ``spec.activeDeadlineSeconds`` before its current Job and run, which a new Job would
    otherwise start from zero: a replaced learner Job (an edit) counts its failures afresh,
    and a Job's deadline restarts each time it is resumed from a suspend ("Jobs": the timer
    is stopped and reset). Recorded in ``status.learnerUsage`` at every status refresh
    (:func:`advance_usage`): a run that a suspension ended counts up to the Job's Suspended
    condition; of a replaced Job, up to one poll of its failures and run is missed.

    Attributes:
      failed: failures counted by learner Jobs replaced before the current one.
      active_seconds: seconds learner Jobs were active before the current Job's current run.
    """

    failed: int = 0
    active_seconds: float = 0.0

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> "LearnerUsage":
        """The usage recorded in an Experiment's status (none: nothing used)."""
        usage = (status or {}).get("learnerUsage") or {}
        try:
            return cls(
                failed=int(usage.get("earlierFailed") or 0),
                active_seconds=float(usage.get("earlierActiveSeconds") or 0.0),
            )
        except (TypeError, ValueError, AttributeError):
            return cls()

    def backoff_limit(self, exp: Experiment) -> int:
        """The ``backoffLimit`` of a new learner Job: what is left of the spec's."""
        return max(0, exp.spec.backoff_limit - self.failed)

    def deadline(self, exp: Experiment) -> int | None:
        """The ``activeDeadlineSeconds`` of a learner Job's next run: what is left of the
        spec's (at least 1 s: the API refuses 0, and the Job then fails at once)."""
        if exp.spec.active_deadline_seconds is None:
            return None
        return max(1, int(exp.spec.active_deadline_seconds - self.active_seconds))


def _seconds_between(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    try:
        a = datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (b - a).total_seconds())


def _suspended_at(job_status: Mapping[str, Any]) -> str | None:
    """When the Job was suspended (its condition Suspended=True), or None while it is not:
    the end of its run, which ``lastSeen`` (up to a poll later) would overcount."""
    for cond in job_status.get("conditions") or []:
        if cond.get("type") == "Suspended" and cond.get("status") == "True":
            return cond.get("lastTransitionTime") or None
    return None


def advance_usage(
    previous: Mapping[str, Any] | None, job: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """``status.learnerUsage`` after observing ``job`` at ``now``: when the Job is another
    than last time (or gone), the last one's failures and run are added to what came before;
    when the Job's run ended (it was suspended: by the operator or by Kueue) or restarted (its
    ``startTime`` changed), the run's active time is, up to the suspension's time.

    The keys that no longer apply are left out: the status writers
    (:func:`seedrl.service.operator.status.status_patch`) remove them with nulls.
    """
    prev = dict(previous or {})
    failed = int(prev.get("earlierFailed") or 0)
    active = float(prev.get("earlierActiveSeconds") or 0.0)
    meta = (job or {}).get("metadata") or {}
    status = (job or {}).get("status") or {}
    uid, start = meta.get("uid"), status.get("startTime")
    suspended = _suspended_at(status) if uid else None
    run_start, last_seen = prev.get("runStart"), prev.get("lastSeen")
    if prev.get("jobUid") and uid != prev["jobUid"]:
        failed += int(prev.get("jobFailed") or 0)
        active += _seconds_between(run_start, last_seen)
        run_start = None
    elif run_start and suspended:
        active += _seconds_between(run_start, max(suspended, run_start))
        run_start = None
    elif run_start and start != run_start:
        active += _seconds_between(run_start, last_seen)
        run_start = None
    if run_start is None and start and not suspended:
        # A suspended Job may still show the start of the run that ended.
        run_start = start
    out: dict[str, Any] = {
        "earlierFailed": failed,
        "earlierActiveSeconds": round(active, 1),
        "lastSeen": now,
    }
    if uid:
        out["jobUid"] = uid
        out["jobFailed"] = int(status.get("failed") or 0)
        if run_start:
            out["runStart"] = run_start
    return out


def usage_now(
    previous_status: Mapping[str, Any] | None, job: Mapping[str, Any] | None, now: str
) -> LearnerUsage:
    """What is used up once ``job`` (None: none is there) is taken into account, for a Job
    made or resumed now: a replaced Job's failures and run, and a suspended Job's last run,
    count although no status refresh has recorded them yet."""
    usage = advance_usage((previous_status or {}).get("learnerUsage"), job, now)
    return LearnerUsage.from_status({"learnerUsage": usage})
