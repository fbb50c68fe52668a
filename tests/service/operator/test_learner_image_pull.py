"""A learner pod whose image cannot be pulled (its env-spec init container's, the actor image,
from a private registry) says so in the Experiment's status instead of waiting with no reason:
the real operator and Job controller (the ``live`` fixture); the test writes the pod's
container statuses as the kubelet does when a pull fails (ErrImagePull, then
ImagePullBackOff with the registry's message)."""

from __future__ import annotations

import datetime

import kubernetes
import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]


def test_a_learner_that_cannot_pull_its_image_says_why(live):
    live.create("private", actors={"placement": {"imagePullSecrets": ["regcred"]}})
    job = wait_for(lambda: live.job("private"), timeout=STEP_S, what="the learner Job")
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    core = kubernetes.client.CoreV1Api(live.harness.api)

    def learner_pod():
        pods = core.list_namespaced_pod(
            live.ns, label_selector="seedrl.dev/experiment=private,seedrl.dev/role=learner"
        ).items
        return pods[0] if pods else None

    pod = wait_for(learner_pod, timeout=STEP_S, what="the learner pod (the Job controller's)")
    message = 'Back-off pulling image "registry.example/seedrl/actors:0.1.0"'
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    core.patch_namespaced_pod_status(
        pod.metadata.name,
        live.ns,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
                ],
                "initContainerStatuses": [
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
        f"The learner pod cannot start: container env-spec: {message}"
    )
