"""The control plane the cluster tests boot (tests/support/control_plane.py) is the real one, of the
pinned version, and configured as the cluster tests assume: authentication by client
certificates and service-account tokens, RBAC, PodSecurity, controllers and scheduler when asked.
"""

from __future__ import annotations

import json
import time

from support.control_plane import KUBERNETES_VERSION, ControlPlane


def _eventually(check, timeout: float = 60.0):
    """``check()``'s first truthy value, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:.0f} s: {check.__doc__ or check}")
        time.sleep(0.1)  # a poll interval, bounded by the deadline


def test_the_server_is_the_pinned_release_and_ready(control_plane):
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert version["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert control_plane.kubectl("get", "--raw=/readyz").stdout.strip() == "ok"


def test_a_service_account_token_authenticates_and_rbac_confines_it(control_plane):
    plane = control_plane
    plane.kubectl("create", "namespace", "rbac-probe")
    plane.kubectl("create", "serviceaccount", "robot", "-n", "rbac-probe")
    token = plane.kubectl("create", "token", "robot", "-n", "rbac-probe").stdout.strip()
    robot = plane.token_kubeconfig(token, "robot")
    denied = plane.kubectl("get", "secrets", "-n", "rbac-probe", kubeconfig=robot, check=False)
    assert denied.returncode != 0
    assert 'User "system:serviceaccount:rbac-probe:robot" cannot list resource "secrets"' in (
        denied.stderr
    )
    # A Role of its own: view's rules are aggregated by the controller manager, not run here.
    plane.kubectl(
        "create", "role", "lister", "--verb=list", "--resource=configmaps", "-n", "rbac-probe"
    )  # fmt: skip
    plane.kubectl(
        "create", "rolebinding", "robot-lists", "--role=lister",
        "--serviceaccount=rbac-probe:robot", "-n", "rbac-probe",
    )  # fmt: skip

    def allowed() -> bool:
        """the robot may list configmaps (the authorizer sees the binding from its cache)"""
        proc = plane.kubectl("get", "configmaps", "-n", "rbac-probe", kubeconfig=robot, check=False)
        return proc.returncode == 0

    assert _eventually(allowed)


def test_pod_security_is_enforced(control_plane):
    plane = control_plane
    plane.kubectl("create", "namespace", "pss-probe")
    plane.kubectl(
        "label", "namespace", "pss-probe", "pod-security.kubernetes.io/enforce=restricted"
    )
    # What the controller manager's service-account controller would have made.
    plane.kubectl("create", "serviceaccount", "default", "-n", "pss-probe")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root", "namespace": "pss-probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    refused = plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr


def test_with_controllers_a_deployment_gets_pods_bound_to_a_node(tmp_path):
    # A Node object stands for a kubelet: the ReplicaSet controller makes the pods and the
    # scheduler binds them to it, which is what issue 36's scenarios build on.
    with ControlPlane(tmp_path, controllers=True) as plane:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}},
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        plane.kubectl("create", "-f", "-", input=json.dumps(node))
        # The status a kubelet would report (create drops status).
        plane.kubectl(
            "patch", "node", "node-a", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": node["status"]}),
        )  # fmt: skip
        plane.kubectl("create", "deployment", "web", "--image=busybox", "--replicas=2")

        def bound() -> list[str]:
            """both pods of the Deployment bound to node-a"""
            pods = json.loads(plane.kubectl("get", "pods", "-o", "json").stdout)["items"]
            nodes = [p["spec"].get("nodeName") for p in pods]
            return nodes if len(nodes) == 2 and all(n == "node-a" for n in nodes) else []

        assert _eventually(bound) == ["node-a", "node-a"]
        processes = [c.process for c in plane.components]
    # Stopped on exit, every one of the four.
    assert len(processes) == 4 and all(p.poll() is not None for p in processes)
