"""The images built for real (with buildah) and run as the operator renders their pods.

``make test-images`` runs these (marker ``images``; ``make test`` leaves them out: they build
TensorFlow-sized images). Each pod runs inside its image with ``buildah run`` as UID 1000, with
the pod's volumes (the ConfigMap read-only, emptyDirs writable) over a read-only root, and with
the command, arguments and environment :func:`seedrl.service.operator.render` gives
it; only the ports are chosen free, since the containers share this machine's network.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import time

import pytest
import yaml

from seedrl.common.config import parse_experiment
from seedrl.service.operator import certificates
from seedrl.service.operator.render import render
from seedrl.common.wire import EnvSpec
from seedrl.service.operator.env_spec import reported_spec
from seedrl.service.operator.render.common import ENV_SPEC_CONTAINER, ENV_SPEC_KEY, names
from seedrl.service.operator.render.env_spec import (
    render_env_spec_config_map,
    render_env_spec_job,
)
from seedrl.service.operator.render.tls import learner_dns_names, tls_secret_name
from support.buildah import Pod

pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on this machine now."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cartpole(name: str, learner_image: str, actor_image: str, **learner) -> dict:
    """A small CartPole Experiment whose ports are free here."""
    port, metrics, actor_metrics = free_ports(3)
    return {
        "apiVersion": "seedrl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "env": {"id": "CartPole-v1"},
            "learner": {"port": port, "metricsPort": metrics, "image": learner_image, **learner},
            "actors": {
                "replicas": 1,
                "envsPerActor": 8,
                "image": actor_image,
                "metricsPort": actor_metrics,
            },
            "budget": {"maxEnvSteps": 20_000},
        },
    }


def wait_for(predicate, timeout: float, what: str, pods=()):
    """Polls ``predicate`` until it returns something true; fails with the pods' output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for pod in pods:
            if pod.process.poll() is not None:
                pytest.fail(
                    f"{pod.pod_name} exited {pod.process.returncode} while waiting "
                    f"for {what}:\n{pod.output()[-4000:]}"
                )
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.pod_name}\n{p.output()[-3000:]}" for p in pods)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def _certificate(exp) -> dict:
    """The learner's certificate Secret as the operator makes it, for :class:`Pod`."""
    return {
        tls_secret_name(exp.metadata.name): certificates.self_signed(
            learner_dns_names(exp.metadata.name, "default")
        )
    }


def _by_kind(objects, kind):
    return next(o for o in objects if o["kind"] == kind)


def test_images_run_as_uid_1000_with_their_entry_points(images, store):
    expected = {
        "learner-cpu": "seedrl.learner",
        "actors": "seedrl.actors",
        "operator": "seedrl.service.operator",
    }
    for name, module in expected.items():
        config = store.config(images(name))
        assert config["User"] == "1000:1000"
        assert config["Entrypoint"] == ["python", "-m", module]


def test_the_root_is_read_only_and_the_volumes_writable_as_in_a_pod(images, store, tmp_path):
    probe = (
        "import os, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(os.path.join(path, 'probe'), 'w').close(); print(path, 'writable')\n"
        "    except OSError as exc:\n"
        "        print(path, exc.strerror)\n"
        "print('uid', os.getuid(), os.getgid())\n"
    )
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, 1000, 1000)
    with store.container(images("actors")) as container:
        proc = container.run(
            ["python", "-c", probe, "/home/seedrl", "/var/run/seedrl", "/tmp"],
            volumes=[(run, "/var/run/seedrl", False)],
        )
        assert proc.returncode == 0, proc.stderr
        lines = set(proc.stdout.splitlines())
        # The image's own home is the user's, yet read-only, as readOnlyRootFilesystem makes it.
        assert lines == {
            "/home/seedrl Read-only file system",
            "/var/run/seedrl writable",
            "/tmp writable",
            "uid 1000 1000",
        }, proc.stdout
        assert (run / "probe").exists()
        writable = container.run(["python", "-c", probe, "/home/seedrl"], read_only_root=False)
        assert "/home/seedrl writable" in writable.stdout, writable.stdout + writable.stderr


def test_cartpole_trains_to_its_budget_inside_the_learner_and_actor_images(images, store, tmp_path):
    learner_image, actor_image = images("learner-cpu"), images("actors")
    exp = parse_experiment(cartpole("cartpole-images", learner_image, actor_image))
    objects = render(exp, namespace="default")
    service = names(exp.metadata.name).service
    # TLS as in a cluster: the certificate the operator would make for the learner's Service;
    # the actor reaches the Service's name (an /etc/hosts entry) and verifies it.
    secrets = {
        tls_secret_name(exp.metadata.name): certificates.self_signed(
            learner_dns_names(exp.metadata.name, "default")
        )
    }
    # The env-spec Job derives the env spec in the actor image first, into its termination
    # message, which the operator reads and puts in the ConfigMap the learner pod mounts.
    with Pod(
        store,
        actor_image,
        render_env_spec_job(exp, namespace="default"),
        objects,
        tmp_path,
        "cartpole-images-envspec-b4n8c",
    ) as deriving:
        assert deriving.wait(300) == 0, deriving.output()[-4000:]
        message = deriving.termination_message()
    objects.append(_env_spec_config_map(exp, message))
    with Pod(
        store,
        learner_image,
        _by_kind(objects, "Job"),
        objects,
        tmp_path,
        "cartpole-images-learner-x7k2p",
        secrets=secrets,
    ) as learner:
        with Pod(
            store,
            actor_image,
            _by_kind(objects, "Deployment"),
            objects,
            tmp_path,
            "cartpole-images-actors-5d8f9-q2w3e",
            hosts={service: "127.0.0.1"},
            secrets=secrets,
        ) as actor:
            run_dir = learner.volume_dirs["run"]
            summary_path = run_dir / "summary.json"
            wait_for(summary_path.exists, 900, "the learner's summary.json", pods=[learner])
            assert learner.wait(120) == 0, learner.output()[-4000:]
            assert actor.wait(120) == 0, actor.output()[-4000:]
    summary = json.loads(summary_path.read_text())
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= 20_000
    assert summary["learner_steps"] > 0 and summary["episodes"] > 0
    # It checkpointed into the pod's run directory (an emptyDir: the root is read-only).
    assert summary["last_checkpoint"], summary
    assert f"connected to {service}:" in actor.output(), actor.output()[-3000:]
    assert "--tls-ca" in actor.command() and "--tls-cert" in learner.command()
    # The learner served the spec the actor image derived, and checked the actor against it.
    spec = EnvSpec.read(str(learner.volume_dirs["shared"] / ENV_SPEC_KEY))
    assert spec.env_id == "CartPole-v1", spec
    assert "no --env-spec" not in learner.output()


#: CartPole's env spec as the env-spec Job reports it, for learners run without deriving it.
CARTPOLE_SPEC = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2).to_message()


def _env_spec_config_map(exp, message: str) -> dict:
    """The ConfigMap the operator makes from the env-spec Job's termination message."""
    pod = {
        "metadata": {"name": "env-spec"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": ENV_SPEC_CONTAINER, "state": {"terminated": {"message": message}}}
            ],
        },
    }
    text, why = reported_spec([pod])
    assert text is not None, why
    return render_env_spec_config_map(exp, text, namespace="default")


#: No GCE metadata server answers here: libtpu would retry it for minutes at `import
#: tensorflow` (a TPU VM's answers at once). Only this machine needs it; pods never set it.
NO_METADATA_SERVER = {"TPU_SKIP_MDS_QUERY": "1"}


def test_tpu_image_imports_tensorflow_and_libtpu(images, store):
    code = (
        "import importlib.metadata as m, tensorflow as tf, libtpu\n"
        "print('tensorflow', tf.__version__, 'libtpu', m.version('libtpu'))\n"
        "print('tpu build', hasattr(tf.tpu.experimental, 'initialize_tpu_system'))\n"
    )
    with store.container(images("learner-tpu")) as container:
        proc = container.run(
            ["python", "-c", code], env={**NO_METADATA_SERVER, "HOME": "/tmp"}, timeout=600
        )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "tensorflow 2.20.0 libtpu 0.0.20" in proc.stdout, proc.stdout
    assert "tpu build True" in proc.stdout


def test_tpu_image_learner_without_a_tpu(images, store, tmp_path):
    image = images("learner-tpu")
    # Scheduled for a TPU (as the operator starts it), it exits at once with the documented
    # code and says what is missing, instead of training on the host's CPU.
    from seedrl.common.exit_codes import ExitCode

    exp = parse_experiment(
        cartpole("tpu-learner", image, images("actors"), accelerator={"kind": "tpu"})
    )
    objects = [*render(exp, namespace="default"), _env_spec_config_map(exp, CARTPOLE_SPEC)]
    with Pod(
        store,
        image,
        _by_kind(objects, "Job"),
        objects,
        tmp_path / "tpu",
        "tpu-learner-learner-h8j2k",
        extra_env=NO_METADATA_SERVER,
        secrets=_certificate(exp),
    ) as pod:
        assert pod.wait(300) == ExitCode.NO_ACCELERATOR, pod.output()[-4000:]
        assert (
            "scheduled for a TPU (spec.learner.accelerator.kind: tpu) but found none"
            in pod.output()
        )
    # Not told it is on a TPU (a CPU Experiment), it reports that no TPU is present and runs
    # on the CPU, as learner/devices.py documents.
    exp = parse_experiment(cartpole("cpu-learner", image, images("actors")))
    objects = [*render(exp, namespace="default"), _env_spec_config_map(exp, CARTPOLE_SPEC)]
    with Pod(
        store,
        image,
        _by_kind(objects, "Job"),
        objects,
        tmp_path / "cpu",
        "cpu-learner-learner-p4m9x",
        extra_env=NO_METADATA_SERVER,
        secrets=_certificate(exp),
    ) as pod:
        wait_for(
            lambda: "serving cpu-learner" in pod.output(), 600, "the learner serving", pods=[pod]
        )
        assert "no TPU found" in pod.output() and "running on CPU" in pod.output()
        assert "devices: 1 CPU found" in pod.output()


@pytest.mark.cluster
def test_operator_image_reconciles_an_experiment_on_the_real_api_server(images, store, tmp_path):
    import kubernetes

    from support.operator_harness import OPERATOR_NAMESPACE, WEBHOOK_SECRET, OperatorCluster

    image = images("operator")
    liveness, metrics, webhook = free_ports(3)
    with OperatorCluster() as cluster:
        # The operator logs in with its chart's ServiceAccount token through a kubeconfig (a
        # Secret volume here): in-cluster config needs the `kubernetes` Service's address,
        # which the API server on loopback does not publish.
        kubeconfig = cluster.operator_kubeconfig()
        workload = {
            "spec": {
                "template": {
                    "spec": {
                        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                        "volumes": [
                            {"name": "tmp", "emptyDir": {}},
                            {"name": "kubeconfig", "secret": {"secretName": "kubeconfig"}},
                        ],
                        "containers": [
                            {
                                "name": "operator",
                                "command": [
                                    "python",
                                    "-m",
                                    "seedrl.service.operator",
                                    "--liveness",
                                    f"http://127.0.0.1:{liveness}/healthz",
                                    "--metrics-port",
                                    str(metrics),
                                    "--poll-seconds",
                                    "1",
                                    # The conversion webhook as the chart turns it on.
                                    f"--conversion-webhook-port={webhook}",
                                    f"--conversion-webhook-secret={WEBHOOK_SECRET}",
                                    "--conversion-webhook-dns-name=localhost",
                                ],
                                "env": [
                                    {"name": "KUBECONFIG", "value": "/etc/kube/config"},
                                    {"name": "HOME", "value": "/tmp"},
                                    {"name": "POD_NAMESPACE", "value": OPERATOR_NAMESPACE},
                                ],
                                "volumeMounts": [
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    {
                                        "name": "kubeconfig",
                                        "mountPath": "/etc/kube",
                                        "readOnly": True,
                                    },
                                ],
                                "securityContext": {"readOnlyRootFilesystem": True},
                            }
                        ],
                    }
                }
            }
        }
        secrets = {"kubeconfig": {"config": yaml.safe_dump(kubeconfig).encode()}}
        custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
        core = kubernetes.client.CoreV1Api(cluster.api_client())
        with Pod(
            store, image, workload, [], tmp_path, "seedrl-operator-6c9d7-abcde", secrets=secrets
        ) as pod:
            wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{liveness}/healthz"),
                180,
                "the operator's liveness endpoint",
                pods=[pod],
            )
            body = cartpole(
                "reconciled", "ghcr.io/seedrl/learner:0.1.0", "ghcr.io/seedrl/actors:0.1.0"
            )
            custom.create_namespaced_custom_object(
                "seedrl.dev", "v1alpha1", "default", "experiments", body
            )

            def phase():
                try:
                    core.read_namespaced_config_map("reconciled-config", "default")
                    obj = custom.get_namespaced_custom_object(
                        "seedrl.dev", "v1alpha1", "default", "experiments", "reconciled"
                    )
                except kubernetes.client.ApiException:
                    return None
                return (obj.get("status") or {}).get("phase")

            assert (
                wait_for(phase, 120, "the Experiment's children and status", pods=[pod])
                == "Pending"
            )
            assert _http_ok(f"http://127.0.0.1:{metrics}/metrics")
            # The webhook answers over TLS with the certificate the operator made and kept.
            secret = core.read_namespaced_secret(WEBHOOK_SECRET, OPERATOR_NAMESPACE)
            ca = base64.b64decode(secret.data["ca.crt"]).decode()
            context = ssl.create_default_context(cadata=ca)
            with socket.create_connection(("127.0.0.1", webhook), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert pod.stop() == 0, pod.output()[-4000:]


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - http://127.0.0.1
            return response.status == 200
    except OSError:
        return False
