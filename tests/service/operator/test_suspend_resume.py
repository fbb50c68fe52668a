"""The learner's budget (``spec.activeDeadlineSeconds``, ``spec.backoffLimit``) across suspends,
resumes, Kueue's admissions and learner replacements: the real operator (kopf, under its
chart's RBAC) and the real Job controller of kube-controller-manager v1.37 (which sets and
resets a Job's ``startTime`` and its Suspended condition, and counts its pods' failures). No
scheduler runs, so the learner pods stay Pending; the test plays the kubelet where a pod must
fail ("Pod phase": the kubelet reports a pod whose containers failed as Failed). Every step
waits on a condition with a deadline."""

from __future__ import annotations

import datetime

import pytest

from seedrl.service.operator.render.common import LABEL_EXPERIMENT, LABEL_ROLE
from support.foreign_crds import open_crd
from support.operator_harness import wait_for
from support.operator_live import LIVE_NS as NS
from support.operator_live import STEP_S, now, parse_time

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

#: How far the deadline a Job is resumed with may be from what is left of the budget (the
#: issue's bound): the operator counts a run from the Job's startTime to its Suspended
#: condition, both whole seconds, so it is off by at most 2 s.
TOLERANCE_S = 5


@pytest.fixture
def k8s(live):
    return live


def suspended_at(job):
    """The time of the Job's Suspended=True condition (the Job controller's), or None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Suspended" and cond["status"] == "True":
            return cond["lastTransitionTime"]
    return None


def run_then_suspend(k8s, name, suspend, run_at_least_s=0.0):
    """Waits for the learner Job's run to start and for the operator to record it, lets it run
    at least ``run_at_least_s``, suspends it with ``suspend()`` and waits for the Job
    controller's Suspended condition; returns (seconds the run lasted, when it was suspended)."""
    start = wait_for(
        lambda: (k8s.job(name) or {}).get("status", {}).get("startTime"),
        timeout=STEP_S,
        what="the Job controller starts the run",
    )
    wait_for(
        lambda: k8s.usage(name).get("runStart") == start,
        timeout=STEP_S,
        what=f"the operator records the run {start}",
    )
    until = parse_time(start) + datetime.timedelta(seconds=run_at_least_s)
    wait_for(
        lambda: now() >= until,
        timeout=STEP_S + run_at_least_s,
        what=f"{run_at_least_s:g} s of the run",
    )
    suspend()
    stopped = wait_for(
        lambda: suspended_at(k8s.job(name)), timeout=STEP_S, what="the Job suspended"
    )
    return (parse_time(stopped) - parse_time(start)).total_seconds(), stopped


def wait_suspended_for(k8s, name, stopped, seconds):
    """Waits until the operator has refreshed the status ``seconds`` after the suspension
    (the issue's repro: each refresh during a suspend counted the ended run again)."""
    until = parse_time(stopped) + datetime.timedelta(seconds=seconds)
    wait_for(
        lambda: parse_time(k8s.usage(name).get("lastSeen", "1970-01-01T00:00:00Z")) >= until,
        timeout=STEP_S + seconds,
        what=f"a status refresh {seconds} s into the suspension",
    )


def later_refresh(k8s, name):
    """Waits for a status refresh after this one (``lastSeen`` has whole seconds)."""
    seen = k8s.usage(name)["lastSeen"]
    wait_for(lambda: k8s.usage(name)["lastSeen"] > seen, timeout=STEP_S, what="a refresh")


def test_a_run_suspended_for_4_s_resumes_with_what_is_left_of_its_deadline(k8s):
    # The platform review's repro: a run of 600 s, suspended ~4 s, then resumed.
    k8s.create("pause", activeDeadlineSeconds=600)
    used, stopped = run_then_suspend(
        k8s, "pause", lambda: k8s.patch_spec("pause", {"suspend": True})
    )
    wait_suspended_for(k8s, "pause", stopped, 4)
    k8s.patch_spec("pause", {"suspend": False})
    job = wait_for(
        lambda: (lambda j: j if j["spec"]["suspend"] is False else None)(k8s.job("pause")),
        timeout=STEP_S,
        what="the Job resumed",
    )
    assert abs(job["spec"]["activeDeadlineSeconds"] - (600 - used)) <= TOLERANCE_S, (
        job["spec"]["activeDeadlineSeconds"],
        600 - used,
    )

    # The next run is recorded and the one that ended is counted once, however many refreshes
    # see the Job afterwards.
    def next_run():
        job = k8s.job("pause")
        return not suspended_at(job) and job["status"].get("startTime")

    restart = wait_for(next_run, timeout=STEP_S, what="the next run")
    wait_for(lambda: k8s.usage("pause").get("runStart") == restart, timeout=STEP_S, what="run")
    later_refresh(k8s, "pause")
    assert abs(k8s.usage("pause")["earlierActiveSeconds"] - used) <= 1


def test_a_kueue_job_readmitted_after_an_eviction_gets_what_is_left(k8s):
    # Kueue's Workloads are served; the test plays Kueue, which admits and evicts a queued
    # Job by writing its spec.suspend.
    workloads = open_crd("kueue.x-k8s.io", "Workload", "workloads", "v1beta2", "v1beta1")
    k8s.harness.cluster.create(workloads)
    k8s.create("queued", activeDeadlineSeconds=600, queueName="team-queue")
    job = wait_for(lambda: k8s.job("queued"), timeout=STEP_S, what="the queued Job")
    assert job["spec"]["suspend"] is True
    assert job["spec"]["activeDeadlineSeconds"] == 600
    k8s.patch_job("queued", {"suspend": False})  # admitted
    # The run must outlast the tolerance, or the whole budget back would pass for right.
    used, stopped = run_then_suspend(
        k8s,
        "queued",
        lambda: k8s.patch_job("queued", {"suspend": True}),  # evicted (preempted)
        run_at_least_s=3 * TOLERANCE_S,
    )
    assert used >= 3 * TOLERANCE_S
    # While it waits in the queue the Job's deadline becomes what is left, so that the
    # admission, which restarts the Job's timer, gives it no more.
    wait_for(
        lambda: (
            abs(k8s.job("queued")["spec"]["activeDeadlineSeconds"] - (600 - used)) <= TOLERANCE_S
        ),
        timeout=STEP_S,
        what=f"the deadline of the queued Job ({600 - used:.0f} s left)",
    )
    k8s.patch_job("queued", {"suspend": False})  # admitted again
    job = k8s.job("queued")
    assert abs(job["spec"]["activeDeadlineSeconds"] - (600 - used)) <= TOLERANCE_S


def fail_learner_pod(k8s, name):
    """Plays the kubelet for the learner's pending pod: its container crashed (exit 1, which
    counts against the backoff limit), so the pod is Failed."""
    pod = wait_for(
        lambda: next(
            iter(
                k8s.core.list_namespaced_pod(
                    NS, label_selector=f"{LABEL_EXPERIMENT}={name},{LABEL_ROLE}=learner"
                ).items
            ),
            None,
        ),
        timeout=STEP_S,
        what="the learner pod",
    )
    at = now().strftime("%Y-%m-%dT%H:%M:%SZ")
    k8s.core.patch_namespaced_pod_status(
        pod.metadata.name,
        NS,
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "learner",
                        "image": pod.spec.containers[0].image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 1,
                                "reason": "Error",
                                "startedAt": at,
                                "finishedAt": at,
                            }
                        },
                    }
                ],
            }
        },
    )


def test_a_replaced_learner_gets_what_is_left_and_its_failures_count_once(k8s):
    k8s.create("edited", activeDeadlineSeconds=3600, backoffLimit=6)
    first = wait_for(lambda: k8s.job("edited"), timeout=STEP_S, what="the learner Job")
    fail_learner_pod(k8s, "edited")
    wait_for(
        lambda: k8s.usage("edited").get("jobFailed") == 1,
        timeout=STEP_S,
        what="the operator records the failure",
    )
    # An edit the learner reads replaces its Job; the new one gets what is left.
    k8s.patch_spec("edited", {"budget": {"maxEnvSteps": 2000000}})
    second = wait_for(
        lambda: (lambda j: j if j and j["metadata"]["uid"] != first["metadata"]["uid"] else None)(
            k8s.job("edited")
        ),
        timeout=STEP_S,
        what="the new learner Job",
    )
    assert second["spec"]["backoffLimit"] == 5
    assert second["spec"]["activeDeadlineSeconds"] < 3600
    # The first Job's failure is counted once, however many refreshes follow.
    wait_for(
        lambda: k8s.usage("edited").get("jobUid") == second["metadata"]["uid"],
        timeout=STEP_S,
        what="the new Job recorded",
    )
    later_refresh(k8s, "edited")
    assert k8s.usage("edited")["earlierFailed"] == 1
