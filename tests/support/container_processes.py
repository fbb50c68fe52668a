"""What a kubelet does to run a container as a local process, for the tests' kubelet
(:mod:`support.kubelet`, on the real control plane).

The processes share this machine's network namespace and have no mount namespace, so
:data:`SITECUSTOMIZE` gives Python processes a pod IP and cluster DNS, and the callers map mount
paths onto host directories. The rest is what the kubelet and the container runtime do around a
process: its memory limit (:func:`group_rss`, as the cgroup OOM killer), its process group
(:func:`signal_group`), its termination message and terminated state.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

#: GKE's graceful node shutdown gives non-system pods this long on a preempted Spot VM.
SHUTDOWN_GRACE_S = 15
CRASH_BACKOFF_S, CRASH_BACKOFF_CAP_S = 10.0, 300.0
TERMINATION_LOG_LINES, TERMINATION_LOG_BYTES = 80, 2048

SITECUSTOMIZE = '''"""Pod networking of the tests' kubelets (support/container_processes.py)."""
import json
import os
import socket

_IP = os.environ.get("SIM_POD_IP")
_DNS = os.environ.get("SIM_DNS_FILE")
_NS = os.environ.get("SIM_POD_NAMESPACE", "default")
_WILDCARD = ("", "0.0.0.0", "::", "::0")
_bind = socket.socket.bind
_getaddrinfo = socket.getaddrinfo


def _pod_bind(self, address):
    if _IP and isinstance(address, tuple) and address and address[0] in _WILDCARD:
        host = _IP if self.family == socket.AF_INET else "::ffff:" + _IP
        address = (host,) + tuple(address[1:])
    return _bind(self, address)


def _resolve(host):
    if not _DNS or not isinstance(host, str):
        return None
    try:
        with open(_DNS) as fh:
            names = json.load(fh)
    except (OSError, ValueError):
        return None
    name = host.rstrip(".")
    for candidate in (name, f"{name}.{_NS}"):
        if candidate in names:
            return names[candidate]
    return None


def _pod_getaddrinfo(host, *args, **kwargs):
    return _getaddrinfo(_resolve(host) or host, *args, **kwargs)


socket.socket.bind = _pod_bind
socket.getaddrinfo = _pod_getaddrinfo
'''


def quantity_bytes(value: Any) -> float | None:
    if value is None:
        return None
    m = re.fullmatch(r"([0-9.]+)([EPTGMK]i?|[mk]|e[0-9]+)?", str(value))
    if not m:
        return None
    number = float(m.group(1))
    unit = m.group(2) or ""
    scale = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "K": 1e3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "m": 1e-3,
    }.get(unit, 1)
    return number * scale


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in a process group (from /proc)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) != pgid:
                continue
            with open(f"/proc/{entry}/statm") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def memory_limit(container: dict) -> float | None:
    """A container's memory limit in bytes, or None."""
    return quantity_bytes(((container.get("resources") or {}).get("limits") or {}).get("memory"))


def termination_message(container: dict, code: int, message_file: Path, log_path: Path) -> str:
    """A stopped container's termination message ("Determine the Reason for Pod Failure"): what
    it wrote at terminationMessagePath (at most 4096 bytes; the file is consumed), else, under
    ``FallbackToLogsOnError`` after a failure, the tail of its log."""
    message = ""
    if message_file.exists():
        message = message_file.read_bytes()[:4096].decode(errors="replace")
        message_file.unlink()
    if (
        not message
        and code != 0
        and container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
    ):
        message = log_tail(log_path)
    return message


def terminated_state(code: int, reason: str, started: str, finished: str, message: str) -> dict:
    """A container state's ``terminated``."""
    return {
        "exitCode": code,
        "reason": reason,
        "startedAt": started,
        "finishedAt": finished,
        **({"message": message} if message else {}),
    }


def log_tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    lines = data.splitlines()[-TERMINATION_LOG_LINES:]
    return b"\n".join(lines)[-TERMINATION_LOG_BYTES:].decode(errors="replace")
