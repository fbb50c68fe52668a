"""Running a rendered pod's containers as local processes: free ports and commands mapped from
the pod's mounts and Service to this machine."""

import socket
import subprocess
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


def derive_env_spec(exp, tmp_path: Path, env: dict[str, str]) -> dict:
    """What the operator does before a learner starts, with the pods as local processes: runs
    the env-spec Job's container command (it writes the spec into its termination message),
    reads that message as the operator does and writes the spec where the learner pod mounts
    its ConfigMap. Returns the spec as JSON data."""
    from seedrl.common.wire import EnvSpec
    from seedrl.service.operator.env_spec import reported_spec
    from seedrl.service.operator.render.common import ENV_SPEC_KEY
    from seedrl.service.operator.render.env_spec import render_env_spec_job

    container = render_env_spec_job(exp)["spec"]["template"]["spec"]["containers"][0]
    message = tmp_path / "termination-log"
    message.write_text("")
    done = subprocess.run(
        localize(container["command"], tmp_path, "", 0),
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pod = {
        "metadata": {"name": "env-spec"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "state": {"terminated": {"exitCode": 0, "message": message.read_text()}},
                }
            ],
        },
    }
    text, why = reported_spec([pod])
    assert text is not None, why
    (tmp_path / "shared").mkdir(exist_ok=True)
    (tmp_path / "shared" / ENV_SPEC_KEY).write_text(text)
    return EnvSpec.read(str(tmp_path / "shared" / ENV_SPEC_KEY)).to_json()
