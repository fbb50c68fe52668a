"""Every generated file (CRD, chart values and schema, dashboards, gRPC stubs) is up to date,
and `make generate` / `make check-generated` run the one command that says so."""

from __future__ import annotations

import re
from pathlib import Path

from seedrl.service import generate

ROOT = Path(__file__).resolve().parents[3]


def test_every_checked_in_generated_file_is_up_to_date(capsys):
    assert generate.main("generate", "", generate.outputs, ["--check", "--root", str(ROOT)]) == 0, (
        capsys.readouterr().err
    )


def test_the_generators_cover_the_crd_values_dashboards_and_stubs():
    paths = set(generate.outputs())
    assert {
        "k8s/crd/experiments.seedrl.dev.yaml",
        "helm/seedrl-operator/templates/crd.yaml",
        "helm/seedrl-experiment/values.yaml",
        "helm/seedrl-experiment/values.schema.json",
        "common/seedrl_pb2.py",
        "common/seedrl_pb2.pyi",
        "common/seedrl_pb2_grpc.py",
    } <= paths
    assert any(p.startswith("helm/seedrl-operator/dashboards/") for p in paths)
    assert all((ROOT / p).exists() for p in paths)


def test_a_missing_file_is_out_of_date_and_write_makes_it(tmp_path, capsys):
    files = {"a/b.txt": "generated\n"}
    assert generate.main("g", "", lambda: files, ["--check", "--root", str(tmp_path)]) == 1
    assert "out of date: a/b.txt" in capsys.readouterr().err
    assert generate.main("g", "", lambda: files, ["--write", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "a" / "b.txt").read_text() == "generated\n"
    assert generate.stale(tmp_path, files) == []


def test_the_makefile_targets_run_it():
    makefile = (ROOT / "Makefile").read_text()
    assert "GENERATE := $(PY) -m seedrl.service.generate\n" in makefile
    # Each target may carry its `make help` description after the prerequisites.
    assert re.search(r"\ngenerate: \$\(STAMP\)( ## [^\n]*)?\n\t\$\(GENERATE\) --write\n", makefile)
    assert re.search(
        r"\ncheck-generated: \$\(STAMP\)( ## [^\n]*)?\n\t\$\(GENERATE\) --check\n", makefile
    )
