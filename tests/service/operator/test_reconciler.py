"""What the reconciler changes on an existing learner Job (service/operator/reconciler.py). The
reconciler's work against the emulated cluster is in test_handlers.py."""

from __future__ import annotations

from seedrl.common.config import parse_experiment
from seedrl.service.operator.usage import LearnerUsage


def test_a_resumed_learner_job_gets_what_is_left_of_the_deadline():
    from seedrl.service.operator.reconciler import _job_patch

    exp = parse_experiment({"metadata": {"name": "x"}, "spec": {"activeDeadlineSeconds": 3600}})
    suspended = {"spec": {"suspend": True}}
    used = LearnerUsage(active_seconds=1000)
    # The Job's own timer restarts at every resume: it is told what is left.
    assert _job_patch(exp, suspended, used) == {
        "spec": {"suspend": False, "activeDeadlineSeconds": 2600}
    }
    assert _job_patch(exp, {"spec": {"suspend": False}}, used) is None
