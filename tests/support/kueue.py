"""Kueue's real controller manager (v0.17, built by ``make kueue``) as a process against a
:class:`~support.control_plane.ControlPlane`, installed from Kueue's own manifests.

:class:`Kueue` renders the module's ``config/default`` (the kustomization Kueue's release
manifests are made from) with the kubectl built beside the API server, and installs from it
what a ``kubectl apply`` of a release installs but the Deployment: the ``kueue-system``
namespace, the CustomResourceDefinitions, the ``kueue-controller-manager`` ServiceAccount with
its ClusterRoles, Roles and bindings, and, once the manager answers ``/readyz``, the
Mutating/ValidatingWebhookConfigurations. The manager runs with a token of that ServiceAccount
(TokenRequest), never as an admin, so every call it makes passes Kueue's own RBAC.

What runs differently from the release, and why:

- Its webhooks and the CRDs' conversion webhook are served on 127.0.0.1 and the
  configurations point at that URL (``clientConfig.url``) instead of the
  ``kueue-webhook-service`` Service, which nothing here routes; the serving certificate is
  generated here with a CA of its own, whose certificate is each configuration's
  ``caBundle``. Internal certificate management is off, as with cert-manager.
- The configuration is the release's ``controller_manager_config.yaml`` with only the
  integrations asked for (``batch/job`` and ``pod`` by default), leader election off (one
  process), the metrics server off (nothing scrapes it) and the visibility API server off
  (feature gate ``VisibilityOnDemand``: it would be an aggregated API server, which nothing
  here registers).
- With internal certificates off, Kueue's ``main`` reads the metrics serving certificate from
  the fixed path ``/etc/kueue/metrics/certs`` (where the release mounts cert-manager's
  Secret), even with the metrics server off. The manager runs in a mount namespace of its own
  (``unshare``) whose ``/etc`` is an overlay with those files added, as the kubelet mounts a
  Secret volume into the container: nothing outside the process sees them.

Every wait has a deadline; a manager that exits or does not answer in time fails the start
with its log. On exit the webhook configurations are deleted first (a stopped Kueue must not
hold up every pod creation of a shared control plane), then the process is stopped.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.control_plane import (
    START_TIMEOUT,
    Component,
    ControlPlane,
    StartError,
    die_with_parent,
    healthy,
    free_port,
    serving_certificate,
    wait_until_served,
)
from support.kueue_build import KUEUE_VERSION, binary, missing, module_dir

NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
#: The integrations the scenarios use: the learner is a Job, the actors are a Deployment's pods
#: labelled with the queue (Kueue's plain-pod integration gates and admits them one by one).
FRAMEWORKS = ("batch/job", "pod")
#: What the release's manifests hold that a process on loopback uses; the rest (the
#: Deployment, its Services and ConfigMap, the webhook Secret, the visibility APIServices) is
#: what runs or routes the manager in a cluster.
INSTALLED_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "CustomResourceDefinition",
)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: Where Kueue's main reads the metrics certificate when internal certificates are off.
METRICS_CERT_DIR = Path("kueue/metrics/certs")  # under /etc


def kueue_binary() -> Path:
    """The built controller manager; fails the test (never skips) when it is missing."""
    if missing():
        pytest.fail(f"Kueue is not built ({binary()} missing): run `make kueue`", pytrace=False)
    return binary()


def _url_config(port: int, path: str, ca: bytes) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}


class Kueue:
    """Kueue's controller manager installed on ``plane`` and running; a context manager.

    Attributes:
      manifests: the release's manifests (``config/default`` rendered), as documents.
      webhook_port: where its webhooks (and the CRDs' conversion) are served on 127.0.0.1.
      startup_seconds: from rendering the manifests to the webhooks answering through the
        API server.
      phases: the seconds of each step of that start: render (kustomize and parse the
        manifests, make the certificate), install (apply them, of which apply is the API
        server taking them, and wait until the CRDs are served), manager (start it and wait for
        /readyz), webhooks (apply their configurations and wait for the Job webhook).
    """

    _ATTEMPTS = 3

    def __init__(self, plane: ControlPlane, workdir: Path, frameworks: Sequence[str] = FRAMEWORKS):
        self.plane = plane
        self.workdir = workdir
        self.frameworks = tuple(frameworks)
        self.bin = kueue_binary()
        self.process: Component | None = None
        self.manifests: list[dict] = []
        self.webhook_port = 0
        self.startup_seconds = 0.0
        self.phases: dict[str, float] = {}
        self._ca = b""

    def __enter__(self) -> Kueue:
        start = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        rendered = self.plane.kubectl("kustomize", str(module_dir() / "config" / "default"))
        # libyaml where PyYAML has it: the pure-Python parser takes ~8 s over these 1.7 MB.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        self.manifests = [d for d in yaml.load_all(rendered.stdout, Loader=loader) if d]
        self._ca = serving_certificate(self.workdir / "certs", ["127.0.0.1"])
        self.phases["render"] = time.monotonic() - start
        # The port is chosen before the manager binds it; another process may take it in
        # between, so a start that fails on it is retried on another.
        for attempt in range(1, self._ATTEMPTS + 1):
            self.webhook_port = free_port()
            try:
                mark = time.monotonic()
                self._install(self.webhook_port)
                self.phases["install"] = time.monotonic() - mark
                mark = time.monotonic()
                self._start(attempt)
                self.phases["manager"] = time.monotonic() - mark
                break
            except StartError as exc:
                log = self.process.tail() if self.process else ""
                self.stop()
                if attempt == self._ATTEMPTS or "address already in use" not in log:
                    raise StartError(f"{exc}\n{log}") from None
        mark = time.monotonic()
        try:
            self._install_webhooks()
        except BaseException:
            print(self.process.tail() if self.process else "")  # pytest shows it on failure
            self.stop()
            raise
        self.phases["webhooks"] = time.monotonic() - mark
        self.startup_seconds = time.monotonic() - start
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Deletes the webhook configurations, then stops the manager."""
        for document in self.manifests:
            if document["kind"] in WEBHOOK_KINDS:
                # Not checked: a test may have left the API server down; the process goes anyway.
                self.plane.kubectl(
                    "delete",
                    document["kind"],
                    document["metadata"]["name"],
                    "--ignore-not-found",
                    check=False,
                )
        if self.process is not None:
            self.process.stop()
            self.process = None

    def refusals(self) -> list[str]:
        """Every request of Kueue's ServiceAccount the API server refused as forbidden (403),
        as ``VERB RESOURCE NAMESPACE/NAME``, from the audit log: its own RBAC should be enough."""
        user = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
        return self.plane.refusals(user)

    def _install(self, port: int) -> None:
        documents = []
        for document in self.manifests:
            if document["kind"] not in INSTALLED_KINDS:
                continue
            conversion = (document.get("spec") or {}).get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                client = conversion["webhook"]["clientConfig"]
                document = json.loads(json.dumps(document))
                document["spec"]["conversion"]["webhook"]["clientConfig"] = _url_config(
                    port, client["service"]["path"], self._ca
                )
            documents.append(document)
        mark = time.monotonic()
        self._apply(documents)
        self.phases["apply"] = time.monotonic() - mark
        for document in documents:
            if document["kind"] == "CustomResourceDefinition":
                wait_until_served(self.plane, document["metadata"]["name"], START_TIMEOUT)

    def _install_webhooks(self) -> None:
        documents = []
        for document in self.manifests:
            if document["kind"] in WEBHOOK_KINDS:
                document = json.loads(json.dumps(document))
                for webhook in document["webhooks"]:
                    path = webhook["clientConfig"]["service"]["path"]
                    webhook["clientConfig"] = _url_config(self.webhook_port, path, self._ca)
                documents.append(document)
        self._apply(documents)
        self._wait_for_job_webhook()

    def _apply(self, documents: list[dict]) -> None:
        # Server-side: the CRDs (Workload's is ~1 MB) exceed the client-side apply annotation.
        self.plane.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            input="\n---\n".join(json.dumps(d) for d in documents),
        )

    def _config(self, health_port: int, port: int) -> Path:
        # The release's own configuration (its ConfigMap), changed only where the module
        # docstring says.
        config_map = next(
            d
            for d in self.manifests
            if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("manager-config")
        )
        config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
        config.update(
            namespace=NAMESPACE,
            health={"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            metrics={"bindAddress": "0"},
            webhook={"port": port, "host": "127.0.0.1", "certDir": str(self.workdir / "certs")},
            leaderElection={"leaderElect": False},
            internalCertManagement={"enable": False},
            featureGates={"VisibilityOnDemand": False},
        )
        config["integrations"]["frameworks"] = list(self.frameworks)
        path = self.workdir / "controller_manager_config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _etc_overlay(self, attempt: int) -> tuple[Path, Path]:
        upper = self.workdir / f"etc.{attempt}" / "upper"
        certs = upper / METRICS_CERT_DIR
        certs.mkdir(parents=True)
        for name in ("tls.crt", "tls.key"):
            (certs / name).write_bytes((self.workdir / "certs" / name).read_bytes())
        work = upper.with_name("work")
        work.mkdir()
        return upper, work

    def _start(self, attempt: int) -> None:
        health_port = free_port()
        config = self._config(health_port, self.webhook_port)
        token = self.plane.kubectl(
            "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=24h"
        ).stdout.strip()
        kubeconfig = self.plane.token_kubeconfig(token, "kueue")
        upper, work = self._etc_overlay(attempt)
        # Root may make a mount namespace; anyone else gets one inside a user namespace.
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare[1:1] = ["--user", "--map-root-user"]
        script = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && '
        script += 'shift 2 && exec "$@"'
        log = self.workdir / "logs" / f"kueue.{attempt}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    *unshare,
                    "--",
                    "/bin/sh",
                    "-c",
                    script,
                    "kueue",
                    str(upper),
                    str(work),
                    str(self.bin),
                    f"--config={config}",
                    f"--kubeconfig={kubeconfig}",
                    "--zap-log-level=2",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # see support.control_plane
            )
        self.process = Component("kueue", process, log)
        deadline = time.monotonic() + START_TIMEOUT
        while not healthy(f"http://127.0.0.1:{health_port}/readyz", None):
            if process.poll() is not None:
                raise StartError(f"kueue exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise StartError(f"kueue not ready after {START_TIMEOUT:.0f} s")
            time.sleep(0.05)  # a poll interval: the deadline above bounds the wait

    def _wait_for_job_webhook(self) -> None:
        # /readyz says the webhook server listens; this says the API server reaches it and
        # trusts it: Kueue's Job webhook suspends a queued Job (a dry run: nothing is made).
        probe = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "kueue-probe",
                "namespace": "default",
                "labels": {"kueue.x-k8s.io/queue-name": "probe"},
            },
            "spec": {
                "suspend": False,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "probe", "image": "probe"}],
                    }
                },
            },
        }
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            answer = self.plane.kubectl(
                "create",
                "--dry-run=server",
                "-o",
                "json",
                "-f",
                "-",
                input=json.dumps(probe),
                check=False,
            )
            if answer.returncode == 0 and json.loads(answer.stdout)["spec"].get("suspend"):
                return
            if time.monotonic() > deadline:
                raise StartError(
                    f"Kueue's Job webhook not answering after {START_TIMEOUT:.0f} s: "
                    f"{answer.stdout}{answer.stderr}"
                )
            time.sleep(0.1)  # a poll interval, bounded by the deadline


def describe(kueue: Kueue) -> str:
    """One line for the test log: the version and how long the start took."""
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in kueue.phases.items())
    return f"Kueue {KUEUE_VERSION} ready in {kueue.startup_seconds:.1f} s ({phases})"
