"""Rendering and checking the Helm charts with the real helm binary, for tests/helm/.

The binary is the one `make helm` installs (``.venv/bin/helm`` of the repository) or the one
named by ``$HELM``. When it is missing the chart tests fail with that instruction: they never
skip, because a skipped chart test looks like a passing one.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from seedrl.common import config
from seedrl.common.config import yaml_io
from seedrl.common.schema import to_json_schema

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_CHART = ROOT / "helm" / "seedrl-operator"
EXPERIMENT_CHART = ROOT / "helm" / "seedrl-experiment"
#: The Experiment CRD with ``v1alpha1`` alone (generated; the chart's template adds
#: ``v1beta1`` and the conversion webhook).
CRD_FILE = ROOT / "k8s" / "crd" / "experiments.seedrl.dev.yaml"
#: The Kubernetes minor versions every rendered built-in manifest must be valid for.
KUBE_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.37")
#: Kinds that come from CRDs, which kubernetes-validate has no schema for; each is checked
#: its own way (the Experiment against our CRD's schema).
CUSTOM_KINDS = {
    ("seedrl.dev/v1alpha1", "Experiment"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.googleapis.com/v1", "PodMonitoring"),
    ("monitoring.googleapis.com/v1", "ClusterPodMonitoring"),
    ("monitoring.googleapis.com/v1", "ClusterRules"),
}


def helm_binary() -> str:
    """The helm binary's path; fails the test (never skips) when there is none."""
    path = os.environ.get("HELM") or str(ROOT / ".venv" / "bin" / "helm")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no helm binary at {path}: run `make helm` (or set HELM=/path/to/helm)", pytrace=False
        )
    return path


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs helm with ``args``; with check, a failure fails the test with helm's output."""
    proc = subprocess.run(
        [helm_binary(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/seedrl-helm-cache",
            "HELM_CONFIG_HOME": "/tmp/seedrl-helm-config",
            "HELM_DATA_HOME": "/tmp/seedrl-helm-data",
        },
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    return proc


def _value_args(
    values: Mapping[str, Any] | None, tmp_path: Path | None, sets: Sequence[str]
) -> list[str]:
    args: list[str] = []
    if values is not None:
        if tmp_path is None:
            raise ValueError("values need a tmp_path to be written to")
        path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
        path.write_text(yaml.safe_dump(dict(values), sort_keys=False))
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return args


def lint(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    tmp_path: Path | None = None,
    sets: Sequence[str] = (),
) -> str:
    """``helm lint --strict`` of ``chart`` with the given values; returns its output."""
    return run_helm("lint", "--strict", str(chart), *_value_args(values, tmp_path, sets)).stdout


def template(
    chart: Path,
    release: str = "test",
    namespace: str = "seedrl",
    values: Mapping[str, Any] | None = None,
    tmp_path: Path | None = None,
    sets: Sequence[str] = (),
    include_crds: bool = False,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """``helm template`` of ``chart``; the completed process (stdout holds the manifests)."""
    args = ["template", release, str(chart), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    return run_helm(*args, *_value_args(values, tmp_path, sets), check=check)


def load_manifests(text: str) -> list[dict[str, Any]]:
    """The documents of a rendered stream, parsed the way seedrl parses YAML (YAML 1.2
    floats such as ``1e-07``, as Kubernetes reads them)."""
    return [doc for doc in yaml_io.yaml_load_all(text) if doc]


def render(chart: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """The manifests ``helm template`` renders, parsed."""
    return load_manifests(template(chart, **kwargs).stdout)


def of_kind(manifests: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    """The manifests of one kind."""
    return [m for m in manifests if m.get("kind") == kind]


def validate_builtin(manifest: Mapping[str, Any]) -> None:
    """Validates one built-in manifest with kubernetes-validate --strict (no unknown fields)
    for every version in KUBE_VERSIONS; raises naming the version and the field."""
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(dict(manifest), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise AssertionError(
                f"{manifest['kind']}/{manifest['metadata']['name']} is not "
                f"valid for Kubernetes {version} at {where}: "
                f"{exc.message}"
            ) from None


def validate_all(manifests: Iterable[Mapping[str, Any]]) -> None:
    """Validates every manifest: built-in kinds with kubernetes-validate, Experiments against
    the CRD's schema. A kind of neither sort fails, so nothing goes unchecked by accident."""
    for m in manifests:
        key = (m.get("apiVersion"), m.get("kind"))
        if key == ("seedrl.dev/v1alpha1", "Experiment"):
            validate_experiment(m)
        elif key[0] == "kopf.dev/v1":
            validate_peering(m)
        elif key not in CUSTOM_KINDS:
            validate_builtin(m)


def validate_peering(manifest: Mapping[str, Any]) -> None:
    """Validates a kopf peering object against the CRD the operator chart installs for it."""
    crds = {
        d["spec"]["names"]["kind"]: d
        for d in yaml.safe_load_all((OPERATOR_CHART / "crds" / "kopf-peerings.yaml").read_text())
    }
    definition = crds[manifest["kind"]]
    assert (definition["spec"]["scope"] == "Namespaced") == bool(
        manifest["metadata"].get("namespace")
    ), manifest
    schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(manifest, schema)


@functools.cache
def crd() -> dict[str, Any]:
    """The Experiment CRD of :data:`CRD_FILE`."""
    return yaml.safe_load(CRD_FILE.read_text())


@functools.cache
def _experiment_validator() -> jsonschema.Draft202012Validator:
    versions = crd()["spec"]["versions"]
    (served,) = [v for v in versions if v["name"] == "v1alpha1"]
    # closed: a key the chart renders outside the schema would be pruned silently by the API
    # server; here it fails.
    schema = to_json_schema(served["schema"]["openAPIV3Schema"], closed=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate_experiment(manifest: Mapping[str, Any]) -> None:
    """Validates an Experiment against the CRD's openAPIV3Schema (what the API server checks),
    then parses it as the operator does (the rules a schema cannot state)."""
    errors = sorted(_experiment_validator().iter_errors(dict(manifest)), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(
            "Experiment does not match the CRD schema:\n"
            + "\n".join(f"  {'.'.join(str(p) for p in e.path)}: {e.message}" for e in errors)
        )
    config.parse_experiment(dict(manifest))


def chart_at_version(chart: Path, version: str, into: Path) -> Path:
    """A copy of ``chart`` under ``into`` whose Chart.yaml says ``version``: the same chart
    as a later release of it (its helm.sh/chart label changes, nothing else)."""
    import shutil

    copy = into / chart.name
    shutil.copytree(chart, copy)
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    meta["version"] = version
    (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
    return copy


class HelmCluster:
    """helm and kubectl (v1.37) as a :class:`~support.control_plane.ControlPlane`'s admin."""

    def __init__(self, plane):
        self.plane = plane

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        """kubectl; fails the test on a non-zero exit unless ``check=False``."""
        return self.plane.kubectl(*args, **kwargs)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The real helm against the control plane; fails the test on a non-zero exit unless
        ``check`` is False."""
        proc = subprocess.run(
            [helm_binary(), f"--kubeconfig={self.plane.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode and check:
            pytest.fail(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    def get(self, namespace: str, name: str, version: str = "") -> dict:
        """The Experiment ``name`` (in ``version``, else the preferred one)."""
        kind = f"experiments.{version}.seedrl.dev" if version else "experiments.seedrl.dev"
        out = self.kubectl("get", kind, name, "-n", namespace, "-o", "json")
        return json.loads(out.stdout)
