"""Our kubelet (:mod:`support.kubelet`) on the real control plane: the real scheduler places
pods on its GKE nodes, the real controllers act on what it reports, and its pods' processes
talk to the real API server with their own service-account tokens.

Every wait has a deadline and waits on a condition; the deadlines are generous for a shared
2-core machine and say nothing about speed.
"""

from __future__ import annotations

import base64
import json
import ssl
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import urllib3

from support.control_plane import ControlPlane, running_control_plane
from support.gke_nodes import GKE_CLUSTER, POOLS, ZONES, NodeSpec, gke_allocatable
from support.kubelet import SHUTDOWN_MESSAGE, Kubelet
from support.kube_http import json_call
from support.kubelet_images import Registries
from support.kubelet_pods import POD_IP_BLOCK

PRIVATE = "us-docker.pkg.dev/seedrl-test/private/app:1"
ROBOT = ("_json_key", "robot-secret")
REGISTRIES = Registries(
    images={"python:3.11": ["python"], PRIVATE: ["python"]},
    credentials={"us-docker.pkg.dev": ROBOT},
)


class Admin:
    """JSON calls to the API server as the cluster's administrator."""

    def __init__(self, plane: ControlPlane):
        self.server = plane.server
        context: ssl.SSLContext = plane.certificates.ssl_context()
        self.http = urllib3.PoolManager(ssl_context=context, retries=False, maxsize=8)

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        """One call; returns the JSON answer, None on 404."""
        return json_call(self.http, self.server, method, path, body, timeout)

    def create(self, path: str, body: dict) -> dict:
        """POST ``body`` to ``path``."""
        return self.call("POST", path, body)

    def watch(self, path: str, name: str) -> list[dict]:
        """Collects in the background the watch events of one object (until it is deleted)."""
        events: list[dict] = []
        url = f"{self.server}{path}?watch=1&fieldSelector=metadata.name%3D{name}"
        stream = self.http.request("GET", url, preload_content=False, timeout=120)

        def run() -> None:
            for line in stream:
                events.append(json.loads(line))
                if events[-1]["type"] == "DELETED":
                    stream.release_conn()
                    return

        threading.Thread(target=run, daemon=True).start()
        return events


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str]) -> Any:
    """Polls ``predicate`` until it returns something truthy; fails after ``timeout`` saying
    ``what`` (asked then, if callable)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)  # a poll interval: the deadline bounds the wait
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}"
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kubelet]]:
    """The control plane with its controllers and scheduler, and our kubelet on every kind
    of GKE node."""
    root = tmp_path_factory.mktemp("kubelet-cluster")
    with running_control_plane(root / "control-plane", controllers=True) as plane:
        certs = plane.certificates
        with Kubelet(
            plane.server,
            certs.ca,
            certs.directory / "ca.key",
            GKE_CLUSTER,
            REGISTRIES,
            root=root / "kubelet",
        ) as kubelet:
            yield plane, kubelet
            assert kubelet.errors == []
            assert kubelet.dropped_events == 0
        assert kubelet.running() == []


@pytest.fixture
def namespace(cluster, request) -> str:
    """A namespace of the test's own, with its default ServiceAccount made (the pods of a
    namespace wait for it)."""
    plane, _ = cluster
    admin = Admin(plane)
    name = request.node.name.replace("_", "-")[:50].strip("-")
    admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_for(
        lambda: admin.call("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        60,
        "the default ServiceAccount",
    )
    return name


def _pod_spec(script: str, **extra: Any) -> dict:
    return {
        "containers": [
            {
                "name": "main",
                "image": "python:3.11",
                "command": ["python", "-u", "-c", textwrap.dedent(script)],
                **extra.pop("container", {}),
            }
        ],
        **extra,
    }


def _condition(obj: dict | None, kind: str) -> dict:
    return next(
        (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind),
        {},
    )


def test_nodes_register_as_gke_makes_them(cluster):
    """Every node is Ready with its pool's labels, taints and allocatable, and holds a Lease."""
    plane, _ = cluster
    admin = Admin(plane)
    nodes = {n["metadata"]["name"]: n for n in admin.call("GET", "/api/v1/nodes")["items"]}
    assert set(nodes) == {spec.name for spec in GKE_CLUSTER}
    for spec in GKE_CLUSTER:
        node = nodes[spec.name]
        assert _condition(node, "Ready")["status"] == "True", spec.name
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == spec.zone
        pool = POOLS[spec.pool]
        assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == pool.name
        for key, chips in pool.chips.items():
            assert node["status"]["allocatable"][key] == chips
        taints = {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}
        assert taints == ({(pool.taint["key"], "NoSchedule")} if pool.taint else set())
        lease = admin.call(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{spec.name}"
        )
        assert lease["spec"]["holderIdentity"] == spec.name
    assert nodes["gke-spot-0"]["metadata"]["labels"]["cloud.google.com/gke-spot"] == "true"
    assert (
        nodes["gke-preemptible-0"]["metadata"]["labels"]["cloud.google.com/gke-preemptible"]
        == "true"
    )
    assert (
        nodes["gke-cpu-0"]["status"]["allocatable"]["cpu"] == gke_allocatable(8, 32)[0] == "7910m"
    )


def test_a_node_may_not_touch_another_node(cluster):
    """NodeRestriction and the Node authorizer judge the kubelet's calls: a node cannot
    relabel another node, nor read a Secret no pod of it uses."""
    plane, kubelet = cluster
    agent = kubelet.nodes["gke-cpu-0"]
    admin = Admin(plane)
    admin.create(
        "/api/v1/namespaces/default/secrets",
        {"metadata": {"name": "not-for-nodes"}, "stringData": {"k": "v"}},
    )

    async def attempts() -> list[int]:
        codes = []
        for method, path, body in (
            ("PATCH", "/api/v1/nodes/gke-cpu-1", {"metadata": {"labels": {"x": "y"}}}),
            ("GET", "/api/v1/namespaces/default/secrets/not-for-nodes", None),
        ):
            try:
                await agent.http.request(
                    method, path, body, content_type="application/merge-patch+json"
                )
                codes.append(200)
            except Exception as exc:  # noqa: BLE001 - the status is what counts
                codes.append(getattr(exc, "status", 0))
        return codes

    assert kubelet.call(attempts) == [403, 403]


SERVER = """
    import http.server, os
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if os.path.exists("ready") else 503)
            self.end_headers()
        def log_message(self, *a):
            pass
    open("ready", "w").close()
    print("serving", flush=True)
    http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""


def test_deployment_pods_are_scheduled_run_and_become_ready(cluster, namespace):
    """The ReplicaSet controller makes the pods, the scheduler spreads them over CPU nodes (not
    onto tainted accelerator nodes), our kubelet runs them and reports them Ready after their
    readiness probe passes, and the Deployment controller counts them available."""
    plane, kubelet = cluster
    admin = Admin(plane)
    labels = {"app": "web"}
    admin.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": _pod_spec(
                        SERVER,
                        nodeSelector={"cloud.google.com/gke-nodepool": "cpu"},
                        topologySpreadConstraints=[
                            {
                                "maxSkew": 1,
                                "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        container={
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "readinessProbe": {"httpGet": {"port": "http"}, "periodSeconds": 1},
                        },
                    ),
                },
            },
        },
    )
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/web"
    wait_for(
        lambda: (admin.call("GET", path).get("status") or {}).get("availableReplicas") == 3,
        90,
        lambda: f"3 available replicas: {admin.call('GET', path).get('status')}",
    )
    pods = admin.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    zones = {spec.name: spec.zone for spec in GKE_CLUSTER if spec.pool == "cpu"}
    assert sorted(zones[p["spec"]["nodeName"]] for p in pods) == sorted(ZONES)
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert _condition(pod, "Ready")["status"] == "True"
        assert "serving" in kubelet.log(namespace, pod["metadata"]["name"])
        # The probe reached the process at the pod IP the kubelet reported.
        assert pod["status"]["podIP"].startswith(f"127.{POD_IP_BLOCK}.")


WHOAMI = """
    import kubernetes
    kubernetes.config.load_kube_config()
    api = kubernetes.client.ApiClient()
    review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review({})
    print("user", review.status.user_info.username, flush=True)
    namespace = review.status.user_info.username.split(":")[2]
    pods = kubernetes.client.CoreV1Api(api).list_namespaced_pod(namespace)
    print("pods", len(pods.items), flush=True)
"""


def test_job_runs_to_completion_as_its_service_account(cluster, namespace):
    """A Job's pod authenticates with the token the kubelet requested for it (TokenRequest,
    bound to the pod): RBAC lets it list pods only once a Role grants it, and the Job controller
    marks the Job Failed, then (with the Role) Complete."""
    plane, kubelet = cluster
    admin = Admin(plane)
    admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "reader"}}
    )

    def job(name: str) -> str:
        spec = _pod_spec(WHOAMI, serviceAccountName="reader", restartPolicy="Never")
        return _job(admin, namespace, name, spec)

    assert _finished(admin, job("denied")) == "Failed"
    denied = admin.call(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3Ddenied"
    )
    log = kubelet.log(namespace, denied["items"][0]["metadata"]["name"])
    assert f"user system:serviceaccount:{namespace}:reader" in log
    assert "403" in log and "forbidden" in log.lower()

    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    allowed = job("allowed")
    assert _finished(admin, allowed) == "Complete"
    assert admin.call("GET", allowed)["status"]["succeeded"] == 1
    pods = admin.call(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3Dallowed"
    )
    pod = pods["items"][0]
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert "pods 2" in kubelet.log(namespace, pod["metadata"]["name"])


STUBBORN = """
    import signal, sys, time
    def term(*_):
        print("TERM", time.monotonic(), flush=True)
    signal.signal(signal.SIGTERM, term if sys.argv[1] == "ignore" else lambda *_: sys.exit(0))
    print("up", flush=True)
    while True:
        print("beat", time.monotonic(), flush=True)
        time.sleep(0.2)
"""


def _stubborn_pod(namespace: str, name: str, on_term: str, grace: int, **spec: Any) -> dict:
    pod_spec = _pod_spec(STUBBORN, terminationGracePeriodSeconds=grace, **spec)
    pod_spec["containers"][0]["args"] = [on_term]
    return {"metadata": {"name": name, "namespace": namespace}, "spec": pod_spec}


def _running(admin: Admin, namespace: str, name: str) -> dict:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return wait_for(
        lambda: (lambda p: p if p and (p.get("status") or {}).get("phase") == "Running" else None)(
            admin.call("GET", path)
        ),
        90,
        lambda: f"{name} Running: {(admin.call('GET', path) or {}).get('status')}",
    )


def test_graceful_deletion_honours_the_grace_period(cluster, namespace):
    """Deletion: SIGTERM, the pod stays (Terminating) until the container exits or its grace
    period ends, then SIGKILL; the kubelet reports the terminal status, then deletes it."""
    plane, kubelet = cluster
    admin = Admin(plane)
    grace = 3
    for name, on_term in (("stubborn", "ignore"), ("polite", "exit")):
        admin.create(
            f"/api/v1/namespaces/{namespace}/pods", _stubborn_pod(namespace, name, on_term, grace)
        )
    for name in ("stubborn", "polite"):
        _running(admin, namespace, name)
        # Its SIGTERM handler is in place once it says so.
        wait_for(lambda n=name: "up" in kubelet.log(namespace, n), 30, f"{name} to start")
    events = {
        name: admin.watch(f"/api/v1/namespaces/{namespace}/pods", name)
        for name in ("stubborn", "polite")
    }
    for name in ("stubborn", "polite"):
        admin.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
    for name in ("stubborn", "polite"):
        wait_for(
            lambda n=name: events[n] and events[n][-1]["type"] == "DELETED",
            grace + 60,
            f"{name} to be deleted",
        )

    def last_status(name: str) -> dict:
        return events[name][-1]["object"]["status"]

    stubborn = last_status("stubborn")
    assert stubborn["phase"] == "Failed"
    assert stubborn["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137  # SIGKILL
    polite = last_status("polite")
    assert polite["phase"] == "Succeeded"  # exited 0 on SIGTERM: terminal before it went
    log = kubelet.log(namespace, "stubborn").split("\n")
    term = next(float(line.split()[1]) for line in log if line.startswith("TERM"))
    beats = [float(line.split()[1]) for line in log if line.startswith("beat")]
    # It was left running through its grace period (less a poll of slack), not killed at once.
    assert max(beats) - term >= grace - 1


def test_spot_preemption_gives_pods_15_seconds(cluster, namespace):
    """GKE reclaims a Spot VM: the pod gets DisruptionTarget, SIGTERM and 15 s although it asks
    for 60, then ends Failed (reason Terminated); the node goes; the ReplicaSet's replacement
    runs on a Spot node left in another zone."""
    plane, kubelet = cluster
    admin = Admin(plane)
    labels = {"app": "spot"}
    spec = _stubborn_pod(namespace, "x", "ignore", 60)["spec"]
    spec["nodeSelector"] = {"cloud.google.com/gke-spot": "true"}
    spec["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["gke-spot-0"],
                            }
                        ]
                    },
                }
            ]
        }
    }
    admin.create(
        f"/apis/apps/v1/namespaces/{namespace}/replicasets",
        {
            "metadata": {"name": "spot"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        },
    )
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    first = wait_for(
        lambda: next(
            (
                p
                for p in admin.call("GET", pods_path)["items"]
                if p["status"].get("phase") == "Running"
            ),
            None,
        ),
        90,
        "the pod Running",
    )
    node = first["spec"]["nodeName"]
    assert node == "gke-spot-0"
    name = first["metadata"]["name"]
    wait_for(lambda: "up" in kubelet.log(namespace, name), 30, "the container to start")
    kubelet.preempt(node)
    pod = admin.call("GET", f"{pods_path}/{name}")
    assert pod["status"]["phase"] == "Failed"
    assert (pod["status"]["reason"], pod["status"]["message"]) == ("Terminated", SHUTDOWN_MESSAGE)
    disruption = _condition(pod, "DisruptionTarget")
    assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert admin.call("GET", f"/api/v1/nodes/{node}") is None
    replacement = wait_for(
        lambda: next(
            (
                p
                for p in admin.call("GET", pods_path)["items"]
                if p["metadata"]["name"] != name and p["status"].get("phase") == "Running"
            ),
            None,
        ),
        90,
        "the replacement Running",
    )
    assert replacement["spec"]["nodeName"] in ("gke-spot-1", "gke-spot-2")
    kubelet.add_node(NodeSpec("gke-spot-0", "spot", "us-central1-a"))  # the MIG's new VM


def test_image_pull_errors(cluster, namespace):
    """An unknown image, and a private one without a pull secret, wait in ErrImagePull /
    ImagePullBackOff (the pod Pending); with a matching imagePullSecret it runs."""
    plane, _ = cluster
    admin = Admin(plane)
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    auth = base64.b64encode(":".join(ROBOT).encode()).decode()
    config = {"auths": {"https://us-docker.pkg.dev": {"auth": auth}}}
    admin.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {"name": "registry"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        },
    )
    cases = {
        "unknown": ("python:0.0-nope", [], "not found"),
        "private": (PRIVATE, [], "401 Unauthorized"),
        "wrong-secret": (PRIVATE, [{"name": "missing"}], "401 Unauthorized"),
        "with-secret": (PRIVATE, [{"name": "registry"}], None),
    }
    for name, (image, secrets, _) in cases.items():
        spec = _pod_spec(
            "import time; print('up', flush=True); time.sleep(600)", imagePullSecrets=secrets
        )
        spec["containers"][0]["image"] = image
        admin.create(pods_path, {"metadata": {"name": name}, "spec": spec})
    for name, (_, _, message) in cases.items():
        if message is None:
            _running(admin, namespace, name)
            continue

        def waiting(n: str = name) -> dict | None:
            pod = admin.call("GET", f"{pods_path}/{n}")
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            state = statuses[0]["state"].get("waiting") if statuses else None
            return (
                state if state and state["reason"] in ("ErrImagePull", "ImagePullBackOff") else None
            )

        state = wait_for(waiting, 60, f"{name} to fail its pull")
        assert message in state["message"], state
        assert admin.call("GET", f"{pods_path}/{name}")["status"]["phase"] == "Pending"
        # The kubelet said so in an Event on the pod, as `kubectl describe` shows it.
        wait_for(
            lambda n=name: [
                e
                for e in admin.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
                if e["involvedObject"]["name"] == n
                and e["reason"] == "Failed"
                and e["type"] == "Warning"
                and e["source"]["component"] == "kubelet"
            ],
            30,
            f"a Failed event about {name}",
        )


def _job(admin: Admin, namespace: str, name: str, spec: dict) -> str:
    admin.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {"spec": spec}}},
    )
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"


def _finished(admin: Admin, path: str) -> str:
    """Waits for a Job's Complete or Failed condition; returns which."""
    return wait_for(
        lambda: next(
            (
                c["type"]
                for c in (admin.call("GET", path).get("status") or {}).get("conditions") or []
                if c["type"] in ("Complete", "Failed") and c["status"] == "True"
            ),
            None,
        ),
        90,
        lambda: f"{path} to finish: {admin.call('GET', path).get('status')}",
    )


def test_a_claim_gets_a_zonal_disk_that_outlives_its_pods(cluster, namespace):
    """A claim of the default class waits for its first pod (WaitForFirstConsumer); the
    provisioner makes a disk in that pod's zone, the PV controller binds it, and a later pod of
    the claim is scheduled into the same zone and reads what the first wrote."""
    plane, kubelet = cluster
    admin = Admin(plane)
    admin.create(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def spec(script: str) -> dict:
        return _pod_spec(
            script,
            restartPolicy="Never",
            nodeSelector={"cloud.google.com/gke-nodepool": "cpu"},
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            container={
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "env": [{"name": "FILE", "value": "/data/hello"}],
            },
        )

    write = _job(
        admin,
        namespace,
        "write",
        spec("import os; open(os.environ['FILE'], 'w').write('from the writer')"),
    )
    assert _finished(admin, write) == "Complete"
    pvc = admin.call("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data")
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["spec"]["storageClassName"] == "standard-rwo"
    pv = admin.call("GET", f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    zone = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    read = _job(
        admin, namespace, "read", spec("import os; print('read', open(os.environ['FILE']).read())")
    )
    assert _finished(admin, read) == "Complete"
    nodes = {}
    for job in ("write", "read"):
        pods = admin.call(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job}"
        )
        node = admin.call("GET", f"/api/v1/nodes/{pods['items'][0]['spec']['nodeName']}")
        nodes[job] = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
        if job == "read":
            assert "read from the writer" in kubelet.log(
                namespace, pods["items"][0]["metadata"]["name"]
            )
    assert nodes["write"] == nodes["read"] == zone["values"][0]


def test_a_service_name_resolves_to_a_ready_pod(cluster, namespace):
    """A pod's process reaches a Service by its DNS name (cluster DNS: a ready pod it
    selects)."""
    plane, kubelet = cluster
    admin = Admin(plane)
    labels = {"app": "web"}
    server = _pod_spec(
        SERVER,
        container={
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        },
    )
    admin.create(
        f"/api/v1/namespaces/{namespace}/pods",
        {"metadata": {"name": "web", "labels": labels}, "spec": server},
    )
    admin.create(
        f"/api/v1/namespaces/{namespace}/services",
        {"metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 8080}]}},
    )
    client = _pod_spec(
        """
        import os, urllib.request
        with urllib.request.urlopen(os.environ["URL"], timeout=10) as answer:
            print("status", answer.status, flush=True)
        """,
        restartPolicy="Never",
        container={
            "env": [{"name": "URL", "value": f"http://web.{namespace}.svc.cluster.local:8080/"}]
        },
    )
    _running(admin, namespace, "web")
    wait_for(
        lambda: f"web.{namespace}.svc" in kubelet.dns_file.read_text(),
        60,
        "cluster DNS to have the ready pod",
    )
    job = _job(admin, namespace, "client", client)
    assert _finished(admin, job) == "Complete"
    pods = admin.call("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3Dclient")
    assert "status 200" in kubelet.log(namespace, pods["items"][0]["metadata"]["name"])


def test_pods_run_on_while_the_api_server_is_away(cluster, namespace):
    """kube-apiserver stopped for longer than a lease renewal (a control plane upgraded): the
    kubelet's pods run on, untouched, and what it could not say meanwhile (its Lease) it says
    once the API server is back, retrying without taking the outage for an error of its own
    (the fixture checks :attr:`Kubelet.errors`)."""
    plane, kubelet = cluster
    admin = Admin(plane)
    admin.create(
        f"/api/v1/namespaces/{namespace}/pods",
        _stubborn_pod(namespace, "steady", "exit", 5),
    )
    before = _running(admin, namespace, "steady")
    node = before["spec"]["nodeName"]
    lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
    renewed = admin.call("GET", lease)["spec"]["renewTime"]
    beats = kubelet.log(namespace, "steady").count("beat")
    retried = kubelet.unavailable
    plane.stop_apiserver()
    try:
        # Away for more than the 10 s between renewals: one at least fails. Meanwhile the
        # pod's process beats on.
        wait_for(
            lambda: (
                kubelet.unavailable > retried
                and kubelet.log(namespace, "steady").count("beat") > beats + 20
            ),
            60,
            "a failed renewal and the pod running on",
        )
    finally:
        plane.start_apiserver()
    wait_for(
        lambda: admin.call("GET", lease)["spec"]["renewTime"] != renewed,
        60,
        "the lease renewed once the API server is back",
    )
    after = admin.call("GET", f"/api/v1/namespaces/{namespace}/pods/steady")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    admin.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/steady")
