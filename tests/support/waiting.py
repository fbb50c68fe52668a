"""Waiting on a condition with a deadline, the tests' one way to wait (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol


class HasErrors(Protocol):
    """Anything that can say what went wrong inside it (a cluster's kubelet)."""

    def errors(self) -> list[str]:
        """What went wrong so far."""
        ...


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str],
    cluster: HasErrors | None = None,
) -> Any:
    """Polls ``predicate`` until it returns something truthy, which it returns; fails after
    ``timeout`` seconds with ``what`` (a callable is asked then, so it can describe the state
    at the timeout) and the ``cluster``'s internal errors, if any."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)  # a poll interval, bounded by the deadline
    extra = f"; cluster errors: {cluster.errors()}" if cluster and cluster.errors() else ""
    what = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")


__all__ = ["wait_until"]
