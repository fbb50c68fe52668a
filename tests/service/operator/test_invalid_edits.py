"""An edit that makes a running Experiment invalid (across fields, which the CRD's schema cannot
say, so the API server stores it): its run goes on as last applied, its phase does not read
like a failed run, and the conditions say why. The real operator and Job controller (the
``live`` fixture)."""

from __future__ import annotations

import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]


def test_an_invalid_edit_keeps_the_run_and_its_phase_and_says_why(live):
    live.create("invalid-edit")
    job = wait_for(lambda: live.job("invalid-edit"), timeout=STEP_S, what="the learner Job")
    wait_for(
        lambda: live.status("invalid-edit").get("phase") in ("Pending", "Running"),
        timeout=STEP_S,
        what="a phase",
    )
    phase = live.status("invalid-edit")["phase"]
    # The metrics port may not be the gRPC port (8686 by default).
    live.patch_spec("invalid-edit", {"learner": {"metricsPort": 8686}})
    wait_for(
        lambda: (condition(live.status("invalid-edit"), "Valid") or {}).get("status") == "False",
        timeout=STEP_S,
        what="Valid False",
    )
    status = live.status("invalid-edit")
    assert status["phase"] == phase  # not Failed: nothing failed
    applied = condition(status, "SpecApplied")
    assert (applied["status"], applied["reason"]) == ("False", "ValidationFailed")
    assert "spec.learner.metricsPort: must differ from spec.learner.port" in applied["message"]
    assert condition(status, "Ready")["reason"] == "ValidationFailed"
    assert live.job("invalid-edit")["metadata"]["uid"] == job["metadata"]["uid"]  # still running
    # Fixed, it is applied again.
    live.patch_spec("invalid-edit", {"learner": {"metricsPort": 9090}})
    wait_for(
        lambda: (condition(live.status("invalid-edit"), "Valid") or {}).get("status") == "True",
        timeout=STEP_S,
        what="Valid True",
    )
