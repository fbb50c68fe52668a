"""The real Kubernetes control plane on loopback: etcd, kube-apiserver and, when asked,
kube-controller-manager and kube-scheduler, as built by ``make control-plane``.

:class:`ControlPlane` generates its certificates and the service-account key pair (with
``cryptography``, into a temporary directory: nothing is checked in), picks free loopback ports,
starts each component, waits on its health endpoint and stops them all on exit. Every wait has a
deadline; a component that exits or does not answer in time fails the start with the tail of
every log. The API server can be stopped and started again on its port, and etcd's history
compacted, for tests of the control plane's own faults. The binaries are the ones of the
checked-in pins (:mod:`support.control_plane_build`); where they are missing the tests fail
with the command that builds them (they never skip: a skipped cluster test looks like a passing
one).

The API server is configured as a managed cluster (GKE) is where it matters to what we apply:
Node and RBAC authorization, service-account tokens, the default admission plugins (PodSecurity
among them) plus NodeRestriction and ExtendedResourceToleration, privileged containers allowed,
structural schemas with pruning and CEL (always on for CRDs since v1.25).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support.control_plane_build import KUBERNETES_VERSION, binary_dir, missing

#: Seconds each component may take to answer its health endpoint once started. The API
#: server answers /readyz in ~1.5 s on an idle machine; a shared, loaded one is much slower.
START_TIMEOUT = 120.0
#: Seconds a component has to exit on SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: The service network (4,094 Services: room for bench/operator_load.py's 500 learners); the
#: API server's Service takes its first address.
SERVICE_CIDR = "10.0.0.0/20"
SERVICE_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: Admission plugins enabled on top of the API server's defaults, as GKE enables them.
EXTRA_ADMISSION_PLUGINS = ("NodeRestriction", "ExtendedResourceToleration")
#: The admin's client certificate: a member of system:masters.
ADMIN_USER = "seedrl-test-admin"


def binaries() -> Path:
    """The directory of the built binaries; fails the test (never skips) when any is missing."""
    absent = missing()
    if absent:
        pytest.fail(
            f"the control plane is not built ({', '.join(absent)} missing from "
            f"{binary_dir()}): run `make control-plane`",
            pytrace=False,
        )
    return binary_dir()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- certificates ---------------------------------------------------------------------------


@dataclass
class _KeyPair:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _certificate(
    subject: x509.Name,
    issuer: _KeyPair | None,
    *,
    ca: bool = False,
    server_names: Sequence[str] = (),
    client: bool = False,
) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        alternatives: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    signer = issuer.key if issuer else key
    return _KeyPair(key, builder.sign(signer, hashes.SHA256()))


def _write_pair(pair: _KeyPair, directory: Path, stem: str) -> tuple[Path, Path]:
    cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert.write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        pair.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    return cert, key


def serving_certificate(directory: Path, names: Sequence[str]) -> bytes:
    """A CA of its own and a serving certificate for ``names`` (IPs or DNS names) signed by it,
    written into ``directory`` as ``tls.crt`` and ``tls.key`` (the names controller-runtime's
    webhook server reads); returns the CA certificate as PEM, a webhook's ``caBundle``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _certificate(_name(f"{names[0]}-ca"), None, ca=True)
    _write_pair(_certificate(_name(names[0]), ca, server_names=names), directory, "tls")
    return ca.cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Certificates:
    """The files of one control plane's PKI: a CA, the serving certificate every component
    presents, a client certificate per user, the service-account key pair."""

    directory: Path
    ca: Path = field(init=False)
    serving_cert: Path = field(init=False)
    serving_key: Path = field(init=False)
    service_account_key: Path = field(init=False)
    service_account_pub: Path = field(init=False)
    clients: dict[str, tuple[Path, Path]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca = _certificate(_name("seedrl-test-ca"), None, ca=True)
        self.ca = _write_pair(ca, self.directory, "ca")[0]
        service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
        serving = _certificate(
            _name("kube-apiserver"),
            ca,
            server_names=(
                "127.0.0.1",
                service_ip,
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        self.serving_cert, self.serving_key = _write_pair(serving, self.directory, "serving")
        for user, group in (
            (ADMIN_USER, "system:masters"),
            ("system:kube-controller-manager", None),
            ("system:kube-scheduler", None),
        ):
            pair = _certificate(_name(user, group), ca, client=True)
            self.clients[user] = _write_pair(pair, self.directory, user.replace(":", "-"))
        account = ec.generate_private_key(ec.SECP256R1())
        self.service_account_key = self.directory / "service-account.key"
        self.service_account_key.write_bytes(
            account.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self.service_account_pub = self.directory / "service-account.pub"
        self.service_account_pub.write_bytes(
            account.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def kubeconfig(self, path: Path, server: str, user: str, token: str | None = None) -> Path:
        """Writes a kubeconfig at ``path`` for ``user``: one of :attr:`clients` by its
        certificate, or any user by its bearer ``token`` (a service account's)."""
        credentials = {"token": token}
        if token is None:
            cert, key = self.clients[user]
            credentials = {"client-certificate": str(cert), "client-key": str(key)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": server, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def ssl_context(self, user: str = ADMIN_USER) -> ssl.SSLContext:
        """A client TLS context trusting the CA and presenting ``user``'s certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        cert, key = self.clients[user]
        context.load_cert_chain(str(cert), str(key))
        return context


# -- processes ------------------------------------------------------------------------------


class StartError(RuntimeError):
    """A component exited or did not become healthy in time; the message has its log."""


@dataclass
class Component:
    """One running process of the control plane and its log file."""

    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT`; the whole process group."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT)


def die_with_parent() -> None:
    """Run in the child before exec: the kernel sends it SIGKILL when the test process dies,
    even by SIGKILL (which runs no finalizer), so no component outlives its session."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def healthy(url: str, context: ssl.SSLContext | None) -> bool:
    """Whether ``url`` (a component's health endpoint) answers 200 within 5 s."""
    try:
        # Only the http(s) URLs of the components built here.
        with urllib.request.urlopen(url, timeout=5, context=context) as answer:  # noqa: S310
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


class ControlPlane:
    """etcd and kube-apiserver (and, with ``controllers``, kube-controller-manager running
    ``controller_names`` and, unless ``scheduler`` is false, kube-scheduler) started in
    ``workdir``; a context manager that stops them on exit.

    Attributes:
      server: the API server's URL (``https://127.0.0.1:PORT``).
      kubeconfig: an admin kubeconfig (system:masters) for kubectl and clients.
      certificates: the generated PKI.
      audit_log: the API server's audit log (JSON lines; see :meth:`audit_events`).
      startup_seconds: from starting etcd to every component healthy.
      etcd_url: etcd's client URL.

    Faults of the control plane itself: :meth:`stop_apiserver`, :meth:`start_apiserver` and
    :meth:`restart_apiserver` (the same port, certificates and etcd), :meth:`compact_etcd`.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        controllers: bool = False,
        controller_names: Sequence[str] = ("*",),
        scheduler: bool = True,
    ):
        self.workdir = workdir
        self.controllers = controllers
        self.controller_names = tuple(controller_names)
        self.scheduler = scheduler
        self.bin = binaries()
        self.components: list[Component] = []
        self.certificates = Certificates(workdir / "pki")
        self.server = ""
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.audit_log = workdir / "audit.log"
        self.startup_seconds = 0.0
        #: etcd's client URL (``http://127.0.0.1:PORT``), for :meth:`compact_etcd`.
        self.etcd_url = ""
        # The API server's arguments, kept for start_apiserver(); how many times it restarted.
        self._apiserver_args: list[str] = []
        self._apiserver_restarts = 0

    # The port is picked just before the process binds it; another process may take it in
    # between, so a start that fails is retried on new ports.
    _ATTEMPTS = 3

    def __enter__(self) -> ControlPlane:
        for attempt in range(1, self._ATTEMPTS + 1):
            try:
                self._start(attempt)
                return self
            except StartError as exc:
                logs = self.logs()
                self.stop()
                if attempt == self._ATTEMPTS or "address already in use" not in logs:
                    raise StartError(f"{exc}\n{logs}") from None
        raise AssertionError("unreachable")

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops every component, the last started first."""
        for component in reversed(self.components):
            component.stop()
        self.components = []

    def logs(self) -> str:
        """The tail of every component's log, each under its name."""
        return "\n".join(
            f"--- {c.name} ({c.log}) exit={c.process.poll()} ---\n{c.tail()}"
            for c in self.components
        )

    def _spawn(self, name: str, args: Sequence[str], attempt: int | str) -> Component:
        log = self.workdir / "logs" / f"{name}.{attempt}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(self.bin / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # the fixture forks from one thread: see there
            )
        component = Component(name, process, log)
        self.components.append(component)
        return component

    def _wait(self, component: Component, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if component.process.poll() is not None:
                raise StartError(f"{component.name} exited with {component.process.returncode}")
            if time.monotonic() > deadline:
                raise StartError(f"{component.name} not healthy after {START_TIMEOUT:.0f} s")
            time.sleep(0.05)  # a poll interval: the deadline above bounds the wait

    def _start(self, attempt: int) -> None:
        start = time.monotonic()
        certs = self.certificates
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                "--name=test",
                f"--data-dir={self.workdir / f'etcd.{attempt}'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                # A throwaway store: durability costs fsyncs on a shared disk for nothing.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            attempt,
        )
        self._wait(etcd, lambda: healthy(f"{etcd_url}/health", None))

        self.etcd_url = etcd_url
        self.server = f"https://127.0.0.1:{api_port}"
        admin_context = certs.ssl_context()
        self._apiserver_args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # No Endpoints for the `kubernetes` Service: it may not point at loopback.
            "--endpoint-reconciler-type=none",
            f"--secure-port={api_port}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(EXTRA_ADMISSION_PLUGINS)}",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ISSUER}",
            f"--service-account-key-file={certs.service_account_pub}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            # Every request's verb, resource, user and response code, for tests that check
            # who was refused what (audit level Metadata: no bodies).
            f"--audit-policy-file={self._audit_policy()}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--profiling=false",
        ]
        apiserver = self._spawn("kube-apiserver", self._apiserver_args, attempt)
        self._wait(apiserver, lambda: healthy(f"{self.server}/readyz", admin_context))
        certs.kubeconfig(self.kubeconfig, self.server, ADMIN_USER)

        if self.controllers:
            self._start_controllers(attempt)
        self.startup_seconds = time.monotonic() - start

    # -- faults of the control plane itself ------------------------------------------------

    def _apiserver(self) -> Component:
        return next(c for c in self.components if c.name == "kube-apiserver")

    def stop_apiserver(self) -> None:
        """Stops kube-apiserver (SIGTERM, as a rolling restart of the control plane does),
        leaving etcd and the controllers running: its clients find the port closed until
        :meth:`start_apiserver`."""
        self._apiserver().stop()

    def start_apiserver(self) -> None:
        """Starts kube-apiserver again after :meth:`stop_apiserver`: the same arguments,
        port, certificates, etcd and audit log (appended to); waits for ``/readyz``. Its log
        is ``logs/kube-apiserver.restart-N.log``. Raises :class:`StartError` (with the log) if
        it exits or is not ready in time, e.g. when another process took the port meanwhile."""
        old = self._apiserver()
        if old.process.poll() is None:
            raise RuntimeError("kube-apiserver is running: stop_apiserver() first")
        self._apiserver_restarts += 1
        new = self._spawn(
            "kube-apiserver", self._apiserver_args, f"restart-{self._apiserver_restarts}"
        )
        # In the old one's place: start_controllers() counts etcd and it as the first two.
        self.components.remove(new)
        self.components[self.components.index(old)] = new
        try:
            self._wait(
                new, lambda: healthy(f"{self.server}/readyz", self.certificates.ssl_context())
            )
        except StartError as exc:
            raise StartError(f"{exc}\n{new.tail()}") from None

    def restart_apiserver(self) -> None:
        """:meth:`stop_apiserver`, then :meth:`start_apiserver`."""
        self.stop_apiserver()
        self.start_apiserver()

    def etcd_revision(self) -> int:
        """etcd's current revision (its v3 JSON gateway's ``/v3/kv/range`` header)."""
        return int(
            self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"][
                "revision"
            ]
        )

    def compact_etcd(self) -> int:
        """Compacts etcd's history up to its current revision (what etcdctl's ``compaction
        --physical`` does, over the v3 JSON gateway: the etcd built here has no etcdctl), so
        that a watch or read from an older revision is answered 410 Gone; returns that
        revision. The API server compacts on its own only every 5 minutes."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict) -> dict:
        # Only the loopback etcd started here.
        request = urllib.request.Request(  # noqa: S310
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return json.loads(answer.read())

    def start_controllers(self) -> None:
        """Starts kube-controller-manager (and kube-scheduler) on a plane entered without
        ``controllers``, e.g. once the CRDs their controllers should know are served."""
        for attempt in range(1, self._ATTEMPTS + 1):
            try:
                self._start_controllers(attempt)
                return
            except StartError as exc:
                logs = self.logs()
                for component in self.components[2:]:
                    component.stop()
                del self.components[2:]
                if attempt == self._ATTEMPTS or "address already in use" not in logs:
                    raise StartError(f"{exc}\n{logs}") from None

    def _start_controllers(self, attempt: int) -> None:
        certs = self.certificates
        # They serve /healthz with the serving certificate (its SANs include 127.0.0.1).
        trust = ssl.create_default_context(cafile=str(certs.ca))
        manager_port, scheduler_port = free_port(), free_port()
        manager_config = certs.kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            self.server,
            "system:kube-controller-manager",
        )
        manager = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={manager_config}",
                f"--authentication-kubeconfig={manager_config}",
                f"--authorization-kubeconfig={manager_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={manager_port}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--controllers={','.join(self.controller_names)}",
                "--use-service-account-credentials",
                f"--root-ca-file={certs.ca}",
                f"--service-account-private-key-file={certs.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                "--profiling=false",
            ],
            attempt,
        )
        started = [(manager, manager_port)]
        if self.scheduler:
            scheduler_config = certs.kubeconfig(
                self.workdir / "scheduler.kubeconfig", self.server, "system:kube-scheduler"
            )
            scheduler = self._spawn(
                "kube-scheduler",
                [
                    f"--kubeconfig={scheduler_config}",
                    f"--authentication-kubeconfig={scheduler_config}",
                    f"--authorization-kubeconfig={scheduler_config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={scheduler_port}",
                    f"--tls-cert-file={certs.serving_cert}",
                    f"--tls-private-key-file={certs.serving_key}",
                    "--leader-elect=false",
                    "--profiling=false",
                ],
                attempt,
            )
            started.append((scheduler, scheduler_port))
        for component, port in started:
            self._wait(component, lambda p=port: healthy(f"https://127.0.0.1:{p}/healthz", trust))

    def _audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.yaml"
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata"}],
        }
        path.write_text(yaml.safe_dump(policy))
        return path

    def audit_events(self) -> list[dict]:
        """The API server's audit events so far (one per request, once answered): ``user``,
        ``verb``, ``objectRef`` and ``responseStatus`` among their keys."""
        events = []
        try:
            lines = self.audit_log.read_text().splitlines()
        except FileNotFoundError:
            return events
        for line in lines:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the line being written
        return events

    def refusals(self, user: str) -> list[str]:
        """Every request of ``user`` the API server refused as forbidden (403), as ``VERB
        RESOURCE NAMESPACE/NAME``, from the audit log."""
        refused = []
        for event in self.audit_events():
            if (event.get("user") or {}).get("username") != user:
                continue
            if (event.get("responseStatus") or {}).get("code") != 403:
                continue
            ref = event.get("objectRef") or {}
            refused.append(
                f"{event.get('verb')} {ref.get('resource')} "
                f"{ref.get('namespace', '')}/{ref.get('name', '')}"
            )
        return refused

    # -- clients ----------------------------------------------------------------------------

    def token_kubeconfig(self, token: str, name: str) -> Path:
        """A kubeconfig that authenticates with ``token`` only (for :meth:`kubectl`)."""
        return self.certificates.kubeconfig(
            self.workdir / f"{name}.kubeconfig", self.server, name, token=token
        )

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Runs kubectl v1.37 (the one built with the server), as the admin unless another
        ``kubeconfig`` is given; with ``check``, a non-zero exit fails the test with kubectl's
        output."""
        proc = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode:
            pytest.fail(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}",
                pytrace=False,
            )
        return proc

    def api_client(self) -> Any:
        """A ``kubernetes`` Python client configured as the admin."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.certificates.ca)
        configuration.cert_file, configuration.key_file = (
            str(p) for p in self.certificates.clients[ADMIN_USER]
        )
        return client.ApiClient(configuration)


@contextlib.contextmanager
def running_control_plane(workdir: Path, *, controllers: bool = False) -> Iterator[ControlPlane]:
    """A :class:`ControlPlane` for the ``with`` block; on an error inside it, the components'
    logs are printed (pytest shows them with the failure)."""
    with ControlPlane(workdir, controllers=controllers) as plane:
        try:
            yield plane
        except BaseException:
            print(plane.logs())
            raise


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver v1.37, shared by the session's tests (each uses namespaces or
    names of its own); kube-controller-manager and kube-scheduler are left out, as nothing here
    needs a pod run."""
    with running_control_plane(tmp_path_factory.mktemp("control-plane")) as plane:
        print(f"control plane {KUBERNETES_VERSION} ready in {plane.startup_seconds:.1f} s")
        yield plane


def wait_until_served(plane: ControlPlane, crd_name: str, timeout: float = 60.0) -> None:
    """Waits until the kind of the CustomResourceDefinition ``crd_name`` (``PLURAL.GROUP``)
    answers a list through kubectl. ``kubectl wait --for=condition=Established`` is not enough:
    it fails on a CRD whose status has no conditions yet, and Established comes before every
    handler and discovery serve the kind. The list is of the storage version, which needs no
    conversion webhook (kubectl's preferred one may)."""
    plural, _, group = crd_name.partition(".")
    deadline = time.monotonic() + timeout

    def served() -> bool:
        stored = plane.kubectl(
            "get", "crd", crd_name, "-o", "jsonpath={.spec.versions[?(@.storage==true)].name}",
            check=False,
        )  # fmt: skip
        if stored.returncode or not stored.stdout.strip():
            return False
        kind = f"{plural}.{stored.stdout.strip()}.{group}"
        return plane.kubectl("get", kind, "-A", check=False).returncode == 0

    while not served():
        assert time.monotonic() < deadline, f"{crd_name} not served after {timeout:.0f} s"
        time.sleep(0.1)  # a poll interval, bounded by the deadline
