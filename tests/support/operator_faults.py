"""The operator harness made to face faults of the control plane itself (issue 36 item 6).

- :class:`ProxiedOperatorHarness`: :class:`~support.operator_harness.OperatorHarness` whose
  operator (kopf's watches, the handlers' and poller's client) reaches the API server through a
  :class:`~support.tcp_proxy.TcpProxy`, so that a test can make the API server unreachable for
  the operator alone (:meth:`ProxiedOperatorHarness.cut`) while it goes on serving the tests,
  which change things meanwhile as the cluster's admin, and restart it
  (:meth:`support.control_plane.ControlPlane.restart_apiserver`) behind the same address.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlparse

from support.operator_harness import OperatorCluster, OperatorHarness
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
