"""TLS between actors and learner with the certificate the operator provisions.

The real operator (kopf, against the real kube-apiserver) makes the learner's
certificate Secret; the learner Job's and actor Deployment's rendered commands then run as
processes on loopback with that Secret's files where the pods mount them: the actor verifies
the learner's Service name and streams CartPole to the budget, a plaintext client is refused,
and so is a client that expects another name.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
from pathlib import Path

import grpc
import kubernetes
import pytest

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc
from seedrl.common.config import GROUP, PLURAL, VERSION, load_experiment
from seedrl.service.operator import certificates
from support.operator_harness import OperatorHarness, wait_for
from support.pods import derive_env_spec, free_port, localize

ROOT = Path(__file__).resolve().parents[2]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _refused(port: int, credentials=None, name: str | None = None) -> grpc.StatusCode:
    """The status a stream from this client gets from the learner (it sends a bare hello)."""
    options = [("grpc.ssl_target_name_override", name)] if name else []
    channel = (
        grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=options)
        if credentials
        else grpc.insecure_channel(f"127.0.0.1:{port}")
    )
    with channel:
        stub = seedrl_pb2_grpc.LearnerStub(channel)
        hello = seedrl_pb2.ActorMessage(hello=seedrl_pb2.Hello(experiment="tls"))
        try:
            for _ in stub.Stream(iter([hello]), timeout=10):
                pass
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.cluster
def test_actors_stream_over_tls_with_the_operators_certificate(tmp_path):
    port, metrics = free_port(), free_port()
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": "tls", "namespace": "ml"},
        "spec": {
            "learner": {"port": port, "metricsPort": metrics, "batchSize": 4},
            "actors": {"replicas": 1, "envsPerActor": 4, "metricsPort": free_port()},
            "budget": {"maxEnvSteps": 4000},
        },
    }
    with OperatorHarness("ml") as h:
        kubernetes.client.CustomObjectsApi(h.api).create_namespaced_custom_object(
            GROUP, VERSION, "ml", PLURAL, body
        )
        core = kubernetes.client.CoreV1Api(h.api)
        apps = kubernetes.client.AppsV1Api(h.api)
        batch = kubernetes.client.BatchV1Api(h.api)

        def read(fn, *args):
            try:
                return fn(*args, _preload_content=False)
            except kubernetes.client.ApiException:
                return None

        secret = wait_for(
            lambda: read(core.read_namespaced_secret, "tls-learner-tls", "ml"),
            30,
            "the learner's certificate Secret",
        )
        secret = json.loads(secret.data)
        job = json.loads(
            wait_for(
                lambda: read(batch.read_namespaced_job, "tls-learner", "ml"), 30, "the learner Job"
            ).data
        )
        deployment = json.loads(
            wait_for(
                lambda: read(apps.read_namespaced_deployment, "tls-actors", "ml"),
                30,
                "the actor Deployment",
            ).data
        )
        config = json.loads(read(core.read_namespaced_config_map, "tls-config", "ml").data)
        # What `kubectl get secret tls-learner-tls -n ml` shows: a TLS Secret of the learner's,
        # owned by the Experiment, for the Service's names.
        assert secret["type"] == "kubernetes.io/tls"
        assert secret["metadata"]["ownerReferences"][0]["kind"] == "Experiment"
        assert secret["metadata"]["labels"]["seedrl.dev/role"] == "learner"
        data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
        assert certificates.dns_names_of(data["tls.crt"]) == [
            "tls-learner",
            "tls-learner.ml",
            "tls-learner.ml.svc",
            "tls-learner.ml.svc.cluster.local",
        ]
    (tmp_path / "config.yaml").write_text(config["data"]["config.yaml"])
    (tmp_path / "tls").mkdir()
    pod = job["spec"]["template"]["spec"]
    learner = pod["containers"][0]
    actor = deployment["spec"]["template"]["spec"]["containers"][0]
    # Each pod gets what it needs of the Secret: the learner its key, the actors the CA only.
    mounts = {
        v["name"]: [i["key"] for i in v["secret"]["items"]] for v in pod["volumes"] if "secret" in v
    }
    assert mounts == {"tls": ["tls.crt", "tls.key"]}
    assert [
        i["key"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
        for i in v["secret"]["items"]
    ] == ["ca.crt"]
    for key, value in data.items():
        (tmp_path / "tls" / key).write_bytes(value)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # The env spec, as the env-spec Job derives it (it gets no certificate), and the
    # operator puts it where the learner pod mounts it.
    assert "initContainers" not in pod
    derive_env_spec(load_experiment(str(tmp_path / "config.yaml")), tmp_path, env)
    command = localize(learner["command"], tmp_path, "tls-learner", port)
    assert "--tls-cert" in command and "--tls-key" in command
    procs = [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    ]
    try:
        wait_for(
            lambda: _listening(port) or procs[0].poll() is not None, 120, "the learner listening"
        )
        assert procs[0].poll() is None
        # Listening, a plaintext client is refused: no stream without TLS.
        assert _refused(port) == grpc.StatusCode.UNAVAILABLE
        ca = grpc.ssl_channel_credentials(root_certificates=data["ca.crt"])
        # A TLS client that expects another name is refused too: actors verify the name.
        assert _refused(port, ca, "other-learner") == grpc.StatusCode.UNAVAILABLE
        actor_command = localize(actor["command"], tmp_path, "tls-learner", port)
        assert actor_command[actor_command.index("--tls-ca") + 1] == str(
            tmp_path / "tls" / "ca.crt"
        )
        procs.append(
            subprocess.Popen(
                actor_command,
                cwd=ROOT,
                env={**env, "POD_NAME": "tls-actors-5d8c9-x2k9q"},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = [p.stdout.read() for p in procs]
    assert codes == [0, 0], "\n\n".join(logs)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 4000 and summary["stop_reason"] == "max_env_steps"
    assert "connected to tls-learner" in logs[1] or "connected to 127.0.0.1" in logs[1], logs[1]


def _kubectl() -> str | None:
    import shutil

    local = ROOT / ".venv" / "bin" / "kubectl"  # make kubectl
    return str(local) if local.exists() else shutil.which("kubectl")


@pytest.mark.cluster
def test_kubectl_get_secret_shows_the_learners_certificate(tmp_path):
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl here (make kubectl installs it)")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": "tls", "namespace": "ml"},
        "spec": {},
    }
    with OperatorHarness("ml") as h:
        kubeconfig = h.cluster.kubeconfig(tmp_path / "kubeconfig")
        kubernetes.client.CustomObjectsApi(h.api).create_namespaced_custom_object(
            GROUP, VERSION, "ml", PLURAL, body
        )

        def listed():
            proc = subprocess.run(
                [
                    kubectl,
                    f"--kubeconfig={kubeconfig}",
                    "get",
                    "secret",
                    "-n",
                    "ml",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name} "
                    "{.type} {.metadata.ownerReferences[0].kind}{end}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        assert (
            wait_for(listed, 30, "the Secret listed by kubectl")
            == "tls-learner-tls kubernetes.io/tls Experiment"
        )
