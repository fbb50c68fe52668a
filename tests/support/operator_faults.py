"""The operator harness made to face faults of the control plane itself (issue 36 item 6).

- :class:`ProxiedOperatorHarness`: :class:`~support.operator_harness.OperatorHarness` whose
  operator (kopf's watches, the handlers' and poller's client) reaches the API server through a
  :class:`~support.tcp_proxy.TcpProxy`, so that a test can make the API server unreachable for
  the operator alone (:meth:`ProxiedOperatorHarness.cut`) while it goes on serving the tests,
  which change things meanwhile as the cluster's admin, and restart it
  (:meth:`support.control_plane.ControlPlane.restart_apiserver`) behind the same address.
- :class:`OperatorReplica`: one replica of the operator as the chart runs it with more than one
  (``python -m seedrl.service.operator --peering=NAME``, its own process, logged in with the
  chart's ServiceAccount token), which a test can SIGKILL as a crash would end it. Only the
  learner's ``/status`` URL differs from ``main``'s: the harness's status server stands in for
  the learner Service (``python -m support.operator_replica``).
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from support.control_plane import STOP_TIMEOUT, free_port
from support.operator_harness import (
    CHART,
    OPERATOR_NAMESPACE,
    OPERATOR_RELEASE,
    ROOT,
    LearnerStatusServer,
    OperatorCluster,
    OperatorHarness,
)
from support.tcp_proxy import TcpProxy


class ProxiedOperatorCluster(OperatorCluster):
    """:class:`OperatorCluster` whose operator-side clients (:meth:`operator_connection`,
    :meth:`operator_api_client`, :meth:`operator_kubeconfig`) go through :attr:`proxy`; the
    admin's (``kubectl``, ``api_client``) go straight to the API server."""

    proxy: TcpProxy

    def __enter__(self) -> "ProxiedOperatorCluster":
        super().__enter__()
        assert self.plane is not None
        target = urlparse(self.plane.server)
        self.proxy = TcpProxy((target.hostname or "127.0.0.1", target.port or 443))
        # The serving certificate names 127.0.0.1, whatever the port: TLS passes as before.
        self.url = f"https://127.0.0.1:{self.proxy.port}"
        return self

    def __exit__(self, *exc: Any) -> None:
        if getattr(self, "proxy", None) is not None:
            self.proxy.close()
        super().__exit__(*exc)


class ProxiedOperatorHarness(OperatorHarness):
    """:class:`OperatorHarness` (kopf in-process, standalone) on a
    :class:`ProxiedOperatorCluster`."""

    cluster: ProxiedOperatorCluster

    def __init__(self, *namespaces: str, poll_seconds: float = 0.3):
        super().__init__(*namespaces, poll_seconds=poll_seconds)
        self.cluster = ProxiedOperatorCluster(*namespaces)
        #: (stopped, ready), UTC, of every :meth:`restart_apiserver`: a restarting API server
        #: refuses every request (403) until its RBAC caches are filled, before it is ready.
        self.restarts: list[tuple[datetime.datetime, datetime.datetime]] = []

    @property
    def operator_alive(self) -> bool:
        """Whether kopf is still running: it neither exited nor raised."""
        return self._thread.is_alive() and self._error is None and not self._stop.is_set()

    @property
    def operator_error(self) -> BaseException | None:
        """What ended kopf, if it ended."""
        return self._error

    def cut(self) -> None:
        """Makes the API server unreachable for the operator (refused, open connections
        reset); the tests' own clients still reach it."""
        self.cluster.proxy.cut()

    def restart_apiserver(self) -> None:
        """Restarts the API server behind the same address (:meth:`ControlPlane.restart_apiserver
        <support.control_plane.ControlPlane.restart_apiserver>`), noting when in
        :attr:`restarts`."""
        assert self.cluster.plane is not None
        stopped = datetime.datetime.now(datetime.UTC)
        self.cluster.plane.restart_apiserver()
        self.restarts.append((stopped, datetime.datetime.now(datetime.UTC)))

    def restore(self) -> None:
        """Makes it reachable again, at the same address."""
        self.cluster.proxy.restore()


def peering_manifest() -> dict:
    """The ClusterKopfPeering the chart makes for its replicas (``helm template`` of
    ``templates/peering.yaml`` with the chart's defaults: more than one replica, watching
    every namespace)."""
    rendered = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "helm"),
            "template",
            OPERATOR_RELEASE,
            str(CHART),
            "-n",
            OPERATOR_NAMESPACE,
            "--show-only",
            "templates/peering.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (peering,) = [d for d in yaml.safe_load_all(rendered) if d]
    assert peering["kind"] == "ClusterKopfPeering", peering
    return peering


class OperatorReplica:
    """One operator process of a peered Deployment (see the module docstring).

    Args:
      cluster: the cluster; the replica logs in with its operator ServiceAccount token.
      learners: the status server that stands in for the learners.
      workdir: where its kubeconfig and log go.
      name: a name for its files.
      peering: the peering objects' name (the chart's ``--peering``).
      priority: its peering priority (the highest live one is active).
      poll_seconds: its ``--poll-seconds``.
    """

    def __init__(
        self,
        cluster: OperatorCluster,
        learners: LearnerStatusServer,
        workdir: Path,
        name: str,
        *,
        peering: str,
        priority: int,
        poll_seconds: float = 0.3,
    ):
        self.cluster, self.learners, self.workdir, self.name = cluster, learners, workdir, name
        self.peering, self.priority, self.poll_seconds = peering, priority, poll_seconds
        self.log = workdir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        #: Folders put before the tests' on its ``PYTHONPATH`` (an earlier release's tree:
        #: :class:`support.operator_release.ReleaseOperator`).
        self.python_path: tuple[Path, ...] = ()
        #: More arguments of ``main`` (``--conversion-webhook-port=...``).
        self.extra_args: tuple[str, ...] = ()

    @property
    def identity(self) -> str:
        """Its peering identity, as ``main`` makes it (host and pid)."""
        assert self.process is not None
        return f"seedrl-operator@{socket.gethostname()}/{self.process.pid}"

    def start(self) -> "OperatorReplica":
        """Starts the process (it runs until :meth:`kill` or :meth:`stop`)."""
        kubeconfig = self.workdir / f"{self.name}.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self.cluster.operator_kubeconfig()))
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PYTHONPATH": os.pathsep.join(map(str, (*self.python_path, ROOT / "tests"))),
            "SEEDRL_TEST_LEARNER_STATUS_PORT": str(self.learners.port),
            "PYTHONUNBUFFERED": "1",
            # As the chart's Deployment sets it (the webhook certificate's Secret is kept
            # there).
            "POD_NAMESPACE": OPERATOR_NAMESPACE,
        }
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "support.operator_replica",
                    f"--peering={self.peering}",
                    f"--priority={self.priority}",
                    f"--poll-seconds={self.poll_seconds}",
                    "--metrics-port=0",
                    f"--liveness=http://127.0.0.1:{free_port()}/healthz",
                    *self.extra_args,
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill ends it: no cleanup, its peering record stays
        until it expires."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT)

    def stop(self) -> None:
        """SIGTERM (as Kubernetes stops a pod), then SIGKILL after a while."""
        if not self.alive:
            return
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()

    def output(self) -> str:
        """Its log so far."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        """The last lines of its log."""
        return "\n".join(self.output().splitlines()[-lines:])
