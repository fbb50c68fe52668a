"""The env-spec Job's pod (the actor image, from a private registry) pulls with the actors'
credentials, and one whose image cannot be pulled says so in the Experiment's status instead
of waiting with no reason: the real operator and Job controller (the ``live`` fixture); the
test writes the pod's container statuses as the kubelet does when a pull fails (ErrImagePull,
then ImagePullBackOff with the registry's message)."""

from __future__ import annotations

import datetime

import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]


def test_an_env_spec_pod_that_cannot_pull_its_image_says_why(live):
    live.create(
        "private",
        actors={
            "image": "registry.example/seedrl/actors:0.1.0",
            "placement": {"imagePullSecrets": ["regcred"]},
        },
    )
    job = wait_for(lambda: live.read("Job", "private-envspec"), timeout=STEP_S, what="the Job")
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    # The learner's pod runs no actor code and needs no actor credentials.
    learner = wait_for(lambda: live.job("private"), timeout=STEP_S, what="the learner Job")
    assert "imagePullSecrets" not in learner["spec"]["template"]["spec"]
    assert "initContainers" not in learner["spec"]["template"]["spec"]

    def env_spec_pod():
        pods = live.core.list_namespaced_pod(live.ns, label_selector="job-name=private-envspec")
        return pods.items[0] if pods.items else None

    pod = wait_for(env_spec_pod, timeout=STEP_S, what="the env-spec pod (the Job controller's)")
    message = 'Back-off pulling image "registry.example/seedrl/actors:0.1.0"'
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    live.core.patch_namespaced_pod_status(
        pod.metadata.name,
        live.ns,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
                ],
                "containerStatuses": [
                    {
                        "name": "env-spec",
                        "image": "registry.example/seedrl/actors:0.1.0",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": message}},
                    }
                ],
            }
        },
    )

    def learner_ready():
        return condition(live.status("private"), "LearnerReady") or {}

    wait_for(
        lambda: learner_ready().get("reason") == "ImagePullBackOff",
        timeout=STEP_S,
        what="LearnerReady ImagePullBackOff",
    )
    assert learner_ready()["message"] == (
        f"The env-spec pod (Job private-envspec) cannot start: container env-spec: {message}"
    )
