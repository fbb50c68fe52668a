"""The committed gRPC stubs match common/seedrl.proto (run `make proto` after editing it)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_are_regenerated_from_the_proto(tmp_path):
    # The stubs import each other as seedrl.common.*, the name the package installs under, so
    # protoc runs on a copy of the proto at that path (as `make proto` does).
    package = tmp_path / "seedrl" / "common"
    package.mkdir(parents=True)
    shutil.copy(ROOT / "common" / "seedrl.proto", package)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.",
                    "--pyi_out=.", "--grpc_python_out=.", "seedrl/common/seedrl.proto"],
                   cwd=tmp_path, check=True)
    for name in ("seedrl_pb2.py", "seedrl_pb2.pyi", "seedrl_pb2_grpc.py"):
        fresh = (package / name).read_text()
        assert (ROOT / "common" / name).read_text() == fresh, f"{name} is stale: make proto"
