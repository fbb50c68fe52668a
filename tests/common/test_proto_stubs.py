"""The committed gRPC stubs match common/seedrl.proto (run `make proto` after editing it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_are_regenerated_from_the_proto(tmp_path):
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                    "common/seedrl.proto"], cwd=ROOT, check=True)
    for name in ("seedrl_pb2.py", "seedrl_pb2.pyi", "seedrl_pb2_grpc.py"):
        fresh = (tmp_path / "common" / name).read_text()
        assert (ROOT / "common" / name).read_text() == fresh, f"{name} is stale: make proto"
