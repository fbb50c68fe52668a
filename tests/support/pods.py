"""Running a rendered pod's containers as local processes: free ports and commands mapped from
the pod's mounts and Service to this machine."""

import socket
import sys
from pathlib import Path

from seedrl.service.operator.render.common import CONFIG_FILE, RUN_DIR, SHARED_DIR, TERMINATION_LOG
from seedrl.service.operator.render.tls import TLS_DIR


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def localize(command: list[str], tmp_path: Path, service: str, port: int) -> list[str]:
    """A container's command with the pod's paths mapped under ``tmp_path`` and the learner
    Service's address to loopback; an actor that reaches it through 127.0.0.1 still verifies
    the Service's name (``--tls-server-name``)."""
    out = []
    for arg in command:
        arg = arg.replace(CONFIG_FILE, str(tmp_path / "config.yaml"))
        arg = arg.replace(RUN_DIR, str(tmp_path / "run"))
        arg = arg.replace(TERMINATION_LOG, str(tmp_path / "termination-log"))
        arg = arg.replace(TLS_DIR, str(tmp_path / "tls"))
        arg = arg.replace(SHARED_DIR, str(tmp_path / "shared"))
        if arg == f"{service}:{port}":
            out += [f"127.0.0.1:{port}", "--tls-server-name", service]
            continue
        out.append(arg)
    assert out[0] == "python", out
    return [sys.executable, *out[1:]]
