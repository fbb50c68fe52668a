"""Edits of what the learner never reads take effect without replacing its Job (a TPU learner's
restart): the real operator and Job controller (the ``live`` fixture). Every step waits on a
condition with a deadline."""

from __future__ import annotations

import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

#: One edit of every field the learner's pod never reads (LEARNER_UNREAD).
UNREAD_EDIT = {
    "actors": {
        "resources": {"cpu": "750m", "memory": "2Gi"},
        "spot": True,
        "placement": {"nodeSelector": {"pool": "actors"}},
        "serviceAccountName": "envs",
        "metricsPort": 9555,
        "processesPerActor": 2,
    },
    "checkpoint": {"volumeSize": "20Gi", "volumeRetention": "Delete"},
    "ttlSecondsAfterFinished": 120,
    "budget": {"noProgressSeconds": 900},
}


def test_edits_the_learner_never_reads_keep_its_job(live):
    live.create("unread")
    job = wait_for(lambda: live.job("unread"), timeout=STEP_S, what="the learner Job")
    generation = live.patch_spec("unread", UNREAD_EDIT)["metadata"]["generation"]
    wait_for(
        lambda: live.status("unread").get("observedGeneration") == generation,
        timeout=STEP_S,
        what="the edit reconciled",
    )

    def actors_edited():
        deployment = live.read("Deployment", "unread-actors")
        pod = deployment["spec"]["template"]["spec"]
        return pod["containers"][0]["resources"]["requests"]["cpu"] == "750m" and pod

    pod = wait_for(actors_edited, timeout=STEP_S, what="the actors' pods edited")
    assert pod["serviceAccountName"] == "envs"
    # The learner Job is the same one, not on its way out, and takes the new TTL.
    after = live.job("unread")
    assert after is not None, "the learner Job was deleted"
    assert after["metadata"]["uid"] == job["metadata"]["uid"]
    assert "deletionTimestamp" not in after["metadata"]
    wait_for(
        lambda: live.job("unread")["spec"].get("ttlSecondsAfterFinished") == 120,
        timeout=STEP_S,
        what="the Job's new TTL",
    )
    applied = condition(live.status("unread"), "SpecApplied")
    assert applied["status"] == "True", applied
    assert "ReplacingLearner" not in [e.reason for e in live.events("unread")]
    # What the learner reads still replaces it.
    live.patch_spec("unread", {"budget": {"maxEnvSteps": 2000000}})
    wait_for(
        lambda: (
            (live.job("unread") or {"metadata": {"uid": job["metadata"]["uid"]}})["metadata"]["uid"]
            != job["metadata"]["uid"]
        ),
        timeout=STEP_S,
        what="the learner Job replaced",
    )
