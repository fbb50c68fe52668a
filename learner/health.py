"""The learner's view of its own liveness endpoint.

In a cluster the kubelet's liveness probe GETs the learner's ``/healthz`` and, once it stops
answering for two minutes, kills the container with SIGTERM. A learner whose event loop
still runs then checkpoints and would exit STOPPED, which the learner Job replaces without
counting: a learner whose endpoint keeps failing (its HTTP threads pinned, say) would be
killed and replaced for ever. :class:`HealthWatch` probes the same endpoint from inside, so
that a learner stopped while it was not answering exits FAILED and counts against
``spec.backoffLimit`` (:func:`seedrl.learner.main.exit_code`).
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Callable

#: Seconds between probes, and how long one may take (the kubelet's are 20 and 5).
PROBE_PERIOD_S = 5.0
PROBE_TIMEOUT_S = 5.0
#: A learner whose endpoint has not answered for this long is unhealthy: half the two
#: minutes the liveness probe allows, so that a learner the probe kills is always found so.
UNHEALTHY_AFTER_S = 60.0


def probe_url(host: str, port: int) -> str:
    """The URL of the ``/healthz`` of a server bound to ``host:port``: a wildcard bind is
    probed on loopback, an address of its own (a pod IP) there."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"


class HealthWatch:
    """Probes ``url`` every ``period`` seconds in a daemon thread.

    Args:
      url: the endpoint, e.g. ``http://127.0.0.1:9090/healthz``.
      period, timeout: seconds between probes, and the most one waits for an answer.
      clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        url: str,
        period: float = PROBE_PERIOD_S,
        timeout: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url, self.period, self.timeout, self.clock = url, period, timeout, clock
        self._last_ok = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seedrl-health", daemon=True)

    def start(self) -> "HealthWatch":
        """Starts probing."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops probing (the thread ends after its current probe)."""
        self._stop.set()

    def probe(self) -> bool:
        """One probe now; True when the endpoint answered 200 within the timeout."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:  # noqa: S310
                ok = response.status == 200
        except (OSError, urllib.error.URLError, ValueError):
            ok = False
        if ok:
            self._last_ok = self.clock()
        return ok

    def unanswered_seconds(self) -> float:
        """Seconds since the endpoint last answered (since the start, if it never did)."""
        return max(0.0, self.clock() - self._last_ok)

    def unhealthy(self, after: float = UNHEALTHY_AFTER_S) -> bool:
        """Whether the endpoint has not answered for ``after`` seconds."""
        return self.unanswered_seconds() >= after

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.probe()
