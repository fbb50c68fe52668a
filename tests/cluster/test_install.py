"""What a user installs, applied to the real kube-apiserver v1.37: the Experiment CRD (both API
versions, as the operator chart renders it), the operator chart as ``helm template`` renders
it, and every shipped Experiment (server-side dry-run).

Any refusal fails, and so does any warning the server sends back (an unknown or pruned field, a
deprecated API, a PodSecurity violation): the API server is the judge of what installs, so
nothing here is emulated.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from seedrl.common.config import API_VERSION, GROUP, KIND, PLURAL, parse_experiment
from seedrl.common.config.yaml_io import read_yaml_file
from seedrl.service.operator import crd
from support import charts
from support.control_plane import wait_until_served

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    [*(ROOT / "k8s" / "examples").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")]
)
#: Where the operator chart is installed, labeled as GKE's restricted namespaces are.
OPERATOR_NAMESPACE = "seedrl-system"
#: Where the Experiments go.
EXPERIMENT_NAMESPACE = "rl"


def _no_warnings(proc) -> None:
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("Warning:")]
    assert not warnings, "\n".join(warnings)


def _namespace(plane, name: str, enforce: str) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                f"pod-security.kubernetes.io/{mode}": enforce for mode in ("enforce", "warn")
            },
        },
    }
    plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest))


@pytest.fixture(scope="module")
def installed(control_plane):
    """The CRDs of the operator chart applied as `helm install` applies them (its ``crds/``,
    then the Experiment's template), established; the namespaces made."""
    proc = control_plane.kubectl(
        "apply", "--server-side", "-f", str(ROOT / "helm" / "seedrl-operator" / "crds")
    )
    _no_warnings(proc)
    rendered = charts.template(
        charts.OPERATOR_CHART, release="op", namespace=OPERATOR_NAMESPACE
    ).stdout
    (definition,) = [
        d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "CustomResourceDefinition"
    ]
    proc = control_plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(definition))
    _no_warnings(proc)
    wait_until_served(control_plane, crd.CRD_NAME)
    _namespace(control_plane, OPERATOR_NAMESPACE, "restricted")
    _namespace(control_plane, EXPERIMENT_NAMESPACE, "baseline")
    return control_plane


def test_both_forms_of_the_crd_are_accepted_and_served_as_generated(installed):
    # k8s/crd/ holds the chart's v1alpha1 alone (make check-generated): the server takes it.
    for path in crd.CRD_PATHS:
        proc = installed.kubectl(
            "apply", "--server-side", "--dry-run=server", "-f", str(ROOT / path), "-o", "json"
        )
        _no_warnings(proc)
    live = json.loads(installed.kubectl("get", f"crd/{crd.CRD_NAME}", "-o", "json").stdout)
    versions = {v["name"]: v for v in live["spec"]["versions"]}
    assert versions["v1alpha1"]["schema"] == crd.crd()["spec"]["versions"][0]["schema"]
    assert (versions["v1alpha1"]["storage"], versions["v1beta1"]["storage"]) == (True, False)
    assert live["spec"]["conversion"]["strategy"] == "Webhook"
    assert live["status"]["acceptedNames"]["kind"] == KIND
    # Served: the kind is in discovery, with its short names.
    resources = installed.kubectl("api-resources", f"--api-group={GROUP}", "-o", "name")
    assert f"{PLURAL}.{GROUP}" in resources.stdout.split()


def test_the_operator_chart_installs(installed, tmp_path):
    rendered = charts.template(
        charts.OPERATOR_CHART, release="op", namespace=OPERATOR_NAMESPACE, include_crds=True
    ).stdout
    manifests = tmp_path / "operator.yaml"
    manifests.write_text(rendered)
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered) if doc}
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount"} <= kinds, kinds
    proc = installed.kubectl(
        "apply", "--server-side", "-n", OPERATOR_NAMESPACE, "-f", str(manifests)
    )
    _no_warnings(proc)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_experiment_is_admitted_and_means_what_seedrl_reads(installed, path):
    document = read_yaml_file(str(path))
    proc = installed.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-n",
        EXPERIMENT_NAMESPACE,
        "-f",
        str(path),
        "-o",
        "json",
    )
    _no_warnings(proc)
    stored = json.loads(proc.stdout)
    assert stored["apiVersion"] == API_VERSION
    # What the operator will read back (defaulted and pruned by the server) is the Experiment
    # `seedrl validate` reads from the file: no field lost, no default different.
    served = {key: stored[key] for key in ("apiVersion", "kind", "spec")}
    served["metadata"] = copy.deepcopy(document["metadata"])
    assert parse_experiment(served) == parse_experiment(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_experiment_installs_through_the_experiment_chart(installed, path):
    # `helm install x helm/seedrl-experiment -f FILE` renders the file through the chart's
    # values (and values.schema.json): what it sends must be admitted and mean what the file
    # means.
    rendered = charts.run_helm(
        "template", "x", str(charts.EXPERIMENT_CHART), "-n", EXPERIMENT_NAMESPACE, "-f", str(path)
    ).stdout
    proc = installed.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", EXPERIMENT_NAMESPACE,
        "-f", "-", "-o", "json", input=rendered,
    )  # fmt: skip
    _no_warnings(proc)
    stored = json.loads(proc.stdout)
    document = read_yaml_file(str(path))
    served = {key: stored[key] for key in ("apiVersion", "kind", "spec")}
    served["metadata"] = {"name": stored["metadata"]["name"]}
    assert parse_experiment(served).spec == parse_experiment(document).spec
