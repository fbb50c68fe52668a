"""A learner pod its kubelet can no longer stop, and an env-spec pod stopped midway: the real
operator (its chart's RBAC) and the real Job controller (the ``live`` fixture), with the test
playing the kubelet and the node lifecycle controller. A kubelet reports a node and binds
nothing itself (the scheduler binds: here the test, through ``pods/binding``), writes its
pods' status, and on a graceful deletion sends SIGTERM and reports the containers' exits
(128 + 15 for a process SIGTERM stopped) before it deletes the pod for good ("Pod
Lifecycle: Termination of Pods"); a kubelet on a lost node does none of that, and the node
lifecycle controller marks the node's Ready condition Unknown. Every step waits on a
condition with a deadline."""

from __future__ import annotations

import pytest

from seedrl.service.operator.render.common import LABEL_EXPERIMENT, LABEL_ROLE
from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S, now

pytestmark = [pytest.mark.cluster, pytest.mark.helm]


def stamp():
    return now().strftime("%Y-%m-%dT%H:%M:%SZ")


def learner_pods(live, name):
    return live.core.list_namespaced_pod(
        live.ns, label_selector=f"{LABEL_EXPERIMENT}={name},{LABEL_ROLE}=learner"
    ).items


def add_node(live, name):
    """A node as its kubelet registers it, Ready."""
    live.core.create_node({"metadata": {"name": name}})
    live.core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": stamp(),
                        "lastTransitionTime": stamp(),
                    }
                ]
            }
        },
    )


def bind(live, pod, node):
    """Binds the pending pod to ``node``, as the scheduler does."""
    live.core.create_namespaced_pod_binding(
        pod.metadata.name,
        live.ns,
        {
            "metadata": {"name": pod.metadata.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
        _preload_content=False,
    )


def report(live, pod, phase, state):
    """Writes the status of ``pod``'s one container, as its node's kubelet does."""
    container = pod.spec.containers[0]
    live.core.patch_namespaced_pod_status(
        pod.metadata.name,
        live.ns,
        {
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {
                        "name": container.name,
                        "image": container.image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": state,
                    }
                ],
            }
        },
    )


def start_on(live, pod, node):
    """Binds the pending pod to ``node`` and reports its one container running."""
    bind(live, pod, node)
    report(live, pod, "Running", {"running": {"startedAt": stamp()}})


def failed_count(live, name):
    return int((live.job(name) or {}).get("status", {}).get("failed") or 0)


def test_a_learner_stranded_on_a_lost_node_is_replaced_without_counting(live):
    live.create("stranded")
    pod = wait_for(lambda: next(iter(learner_pods(live, "stranded")), None), timeout=STEP_S)
    add_node(live, "lost-node")
    start_on(live, pod, "lost-node")
    # The node goes silent: the node lifecycle controller marks it Unknown, and the pod is
    # deleted (the taint eviction after its toleration, a drain, a suspend); its kubelet never
    # stops it, so it stays Terminating, and its Job waits for it to be Failed.
    live.core.patch_node_status(
        "lost-node",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "NodeStatusUnknown",
                        "message": "Kubelet stopped posting node status.",
                        "lastHeartbeatTime": stamp(),
                        "lastTransitionTime": stamp(),
                    }
                ]
            }
        },
    )
    live.core.delete_namespaced_pod(pod.metadata.name, live.ns, grace_period_seconds=1)
    # Past its grace, the operator finishes what the kubelet cannot, and the Job replaces it.
    replacement = wait_for(
        lambda: next(
            (p for p in learner_pods(live, "stranded") if p.metadata.uid != pod.metadata.uid),
            None,
        ),
        timeout=STEP_S,
        what="the replacement learner pod",
    )
    assert replacement.metadata.deletion_timestamp is None
    wait_for(
        lambda: all(p.metadata.uid != pod.metadata.uid for p in learner_pods(live, "stranded")),
        timeout=STEP_S,
        what="the stranded pod gone",
    )
    assert failed_count(live, "stranded") == 0
    assert "LearnerNodeLost" in [e.reason for e in live.events("stranded")]


def env_spec_pods(live, name):
    return live.core.list_namespaced_pod(live.ns, label_selector=f"job-name={name}-envspec").items


def test_an_env_spec_pod_stopped_by_a_graceful_deletion_is_not_a_failure(live):
    # The Job controller's own deletions never count: it drops the pod's tracking finalizer
    # first. A drain through the Eviction API, a preemption or a node shutdown mark the pod
    # DisruptionTarget. What is left: a pod deleted without that condition (kubectl delete
    # pod, kubectl drain --disable-eviction) while it derives the env spec.
    live.create("initstop")
    pod = wait_for(lambda: next(iter(env_spec_pods(live, "initstop")), None), timeout=STEP_S)
    add_node(live, "busy-node")
    start_on(live, pod, "busy-node")
    live.core.delete_namespaced_pod(pod.metadata.name, live.ns)
    # The kubelet sends SIGTERM: the env-spec container exits 143, and the pod is Failed.
    terminated = {
        "terminated": {
            "exitCode": 143,
            "reason": "Error",
            "startedAt": stamp(),
            "finishedAt": stamp(),
        }
    }
    report(live, pod, "Failed", terminated)
    live.core.delete_namespaced_pod(pod.metadata.name, live.ns, grace_period_seconds=0)
    # The Job controller accounts for the pod and makes another, without counting a failure.
    replacement = wait_for(
        lambda: next(
            (p for p in env_spec_pods(live, "initstop") if p.metadata.uid != pod.metadata.uid),
            None,
        ),
        timeout=STEP_S,
        what="the env-spec Job's next pod",
    )
    assert replacement.metadata.deletion_timestamp is None
    job = live.read("Job", "initstop-envspec")
    assert int(job["status"].get("failed") or 0) == 0
    assert not any(c["type"] == "Failed" for c in job["status"].get("conditions") or [])
    # Meanwhile the learner waits for the spec, and says so.
    wait_for(
        lambda: (
            (condition(live.status("initstop"), "LearnerReady") or {}).get("reason")
            == "DerivingEnvSpec"
        ),
        timeout=STEP_S,
        what="LearnerReady DerivingEnvSpec",
    )
