"""``kubectl scale`` (or an HPA) past the actors the learner serves caps the actors, says so,
and never fails the running Experiment: the real operator, Job controller and kubectl (the
``live`` fixture). Every step waits on a condition with a deadline."""

from __future__ import annotations

import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

#: The example's 64 envs per actor into a learner that serves 512: at most 8 actors.
MAX_TOTAL_ENVS, MOST = 512, 8


def test_scaling_past_what_the_learner_serves_caps_the_actors_and_fails_nothing(live):
    live.create("capped", learner={"maxTotalEnvs": MAX_TOTAL_ENVS})

    def actors():
        return (live.read("Deployment", "capped-actors") or {}).get("spec", {}).get("replicas")

    wait_for(lambda: actors() == 4, timeout=STEP_S, what="4 actors")
    job = wait_for(lambda: live.job("capped"), timeout=STEP_S, what="the learner Job")
    live.harness.cluster.kubectl("scale", "experiment/capped", "--replicas=20", "-n", live.ns)
    wait_for(lambda: actors() == MOST, timeout=STEP_S, what=f"the actors capped at {MOST}")

    def limited():
        return (condition(live.status("capped"), "ActorsLimited") or {}).get("status") == "True"

    wait_for(limited, timeout=STEP_S, what="ActorsLimited")
    status = live.status("capped")
    assert status["phase"] != "Failed"
    assert condition(status, "Valid")["status"] == "True"
    assert status["actors"]["desired"] == MOST
    message = condition(status, "ActorsLimited")["message"]
    assert "20" in message and f"{MOST} actors run" in message
    wait_for(
        lambda: "ActorsLimited" in [e.reason for e in live.events("capped")],
        timeout=STEP_S,
        what="an ActorsLimited Event",
    )
    assert live.job("capped")["metadata"]["uid"] == job["metadata"]["uid"]
    # Back within the limit: every actor asked for runs, and the condition says so.
    live.harness.cluster.kubectl("scale", "experiment/capped", "--replicas=6", "-n", live.ns)
    wait_for(lambda: actors() == 6, timeout=STEP_S, what="6 actors")
    wait_for(
        lambda: condition(live.status("capped"), "ActorsLimited")["status"] == "False",
        timeout=STEP_S,
        what="ActorsLimited False",
    )
