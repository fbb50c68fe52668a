"""The gRPC and protobuf stubs of ``common/seedrl.proto`` (committed beside it).

``python -m seedrl.service.generate.proto --write`` regenerates them with ``grpc_tools.protoc``
(the ``dev`` extra). The stubs import each other as ``seedrl.common.*``, the name the package
installs under, so protoc runs on a copy of the proto at that path.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from seedrl.service import generate as generated

#: The stubs, relative to the repository root.
STUBS = ("seedrl_pb2.py", "seedrl_pb2.pyi", "seedrl_pb2_grpc.py")


def outputs() -> dict[str, str]:
    """``common/seedrl_pb2*.py[i]`` -> their text, generated from the installed proto.

    protoc runs in a process of its own: grpc_tools' compiler and the protobuf runtime already
    loaded here (by TensorFlow, say) may not share one process (it crashes).

    Raises:
      RuntimeError: protoc failed, or grpc_tools is not installed (``pip install .[dev]``).
    """
    if importlib.util.find_spec("grpc_tools") is None:
        raise RuntimeError("the gRPC stubs need grpc_tools: install the dev extra (make install)")
    proto = resources.files("seedrl.common").joinpath("seedrl.proto").read_text("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "seedrl" / "common"
        package.mkdir(parents=True)
        (package / "seedrl.proto").write_text(proto, encoding="utf-8")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                "-I.",
                "--python_out=.",
                "--pyi_out=.",
                "--grpc_python_out=.",
                "seedrl/common/seedrl.proto",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"protoc failed on common/seedrl.proto: {done.stderr.strip()}")
        return {f"common/{name}": (package / name).read_text(encoding="utf-8") for name in STUBS}


def main(argv: list[str] | None = None) -> int:
    """``python -m seedrl.service.generate.proto [--write | --check] [--root DIR]``."""
    return generated.main(
        "python -m seedrl.service.generate.proto", __doc__.splitlines()[0], outputs, argv
    )


if __name__ == "__main__":
    sys.exit(main())
