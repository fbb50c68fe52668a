"""The operator chart's Experiment CRD across releases, with the real helm 4 and the real
kube-apiserver (issue 37, versioned API): a release whose chart installed the CRD from
``crds/`` (v0.1.0) is upgraded to one whose chart renders it as a template, which takes it
over as docs/guides/upgrades.md says, upgrades it to both API versions and keeps it (and every
Experiment) through a rollback and an uninstall. No operator runs: this is what Helm does to
the CRD, whatever the operator would do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.charts import OPERATOR_CHART, HelmCluster
from support.control_plane import wait_until_served
from support.operator_release import PREVIOUS_RELEASE, release_chart

pytestmark = [pytest.mark.helm, pytest.mark.cluster]

CRD = "experiments.seedrl.dev"
RELEASE, NAMESPACE, EXPERIMENTS = "op", "release-system", "release-rl"
PEERINGS = ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def _install(c: HelmCluster, chart: Path) -> None:
    install = ("install", RELEASE, str(chart), "-n", NAMESPACE, "--create-namespace",
               "--wait=false")  # fmt: skip
    first = c.helm(*install, check=False)
    if first.returncode and "ensure CRDs are installed first" in first.stderr:
        # helm waited for its crds/ Established, which comes before discovery serves their
        # kinds (ClusterKopfPeering); once served, the same install goes through
        # (tests/support/cluster_scenarios.py).
        for crd in (*PEERINGS, CRD):
            wait_until_served(c.plane, crd)
        c.helm("uninstall", RELEASE, "-n", NAMESPACE, check=False)
        c.helm(*install)
    elif first.returncode:
        pytest.fail(f"helm install exited {first.returncode}:\n{first.stderr}")


def _crd(c: HelmCluster) -> dict:
    return json.loads(c.kubectl("get", "crd", CRD, "-o", "json").stdout)


def _experiment() -> dict:
    return {
        "apiVersion": "seedrl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "r2", "namespace": EXPERIMENTS},
        "spec": {"agent": {"name": "r2d2", "r2d2": {"sequenceLength": 30, "burnIn": 10}}},
    }


@pytest.fixture
def cluster(control_plane):
    """helm and kubectl on the shared control plane; what the test leaves (the CRD Helm
    keeps, its Experiments, the namespaces) is deleted after it, for the next module."""
    c = HelmCluster(control_plane)
    yield c
    c.helm("uninstall", RELEASE, "-n", NAMESPACE, check=False)
    for crd in (CRD, *PEERINGS):
        c.kubectl("delete", "crd", crd, "--ignore-not-found", "--wait=true", check=False)
    c.kubectl("delete", "namespace", EXPERIMENTS, NAMESPACE, "--ignore-not-found",
              "--wait=false", check=False)  # fmt: skip


def test_the_chart_takes_over_the_crd_of_v0_1_0_upgrades_and_keeps_it(cluster, tmp_path):
    c = cluster
    previous = release_chart(PREVIOUS_RELEASE, tmp_path / "v0.1.0")
    _install(c, previous)
    wait_until_served(c.plane, CRD)
    first = _crd(c)
    assert [v["name"] for v in first["spec"]["versions"]] == ["v1alpha1"]
    c.kubectl("create", "namespace", EXPERIMENTS)
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(_experiment()))
    uid = c.get(EXPERIMENTS, "r2", "v1alpha1")["metadata"]["uid"]

    # The CRD v0.1.0's crds/ made belongs to no release: a plain upgrade refuses to take it.
    upgrade = ("upgrade", RELEASE, str(OPERATOR_CHART), "-n", NAMESPACE, "--wait=false")
    refused = c.helm(*upgrade, check=False)
    assert refused.returncode != 0 and CRD in refused.stderr, refused.stderr
    # As the upgrade guide says.
    c.helm(*upgrade, "--take-ownership", "--force-conflicts")
    wait_until_served(c.plane, CRD)
    upgraded = _crd(c)
    assert upgraded["metadata"]["uid"] == first["metadata"]["uid"]
    assert upgraded["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert upgraded["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert {v["name"]: v["storage"] for v in upgraded["spec"]["versions"]} == {
        "v1alpha1": True,
        "v1beta1": False,
    }
    service = upgraded["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == (NAMESPACE, "op-seedrl-operator-webhook")
    c.kubectl("get", "service", service["name"], "-n", NAMESPACE)
    # Stored as v1alpha1, the Experiment reads as it was written, without the webhook.
    alpha = c.get(EXPERIMENTS, "r2", "v1alpha1")
    assert alpha["metadata"]["uid"] == uid
    assert alpha["spec"]["agent"]["r2d2"]["sequenceLength"] == 30
    assert upgraded["status"]["storedVersions"] == ["v1alpha1"]

    # A rollback to v0.1.0 (whose release has no CRD template) keeps the CRD.
    c.helm("rollback", RELEASE, "1", "-n", NAMESPACE, "--wait=false")
    assert _crd(c)["metadata"]["uid"] == first["metadata"]["uid"]
    assert c.get(EXPERIMENTS, "r2", "v1alpha1")["metadata"]["uid"] == uid
    # ... and v0.1.0's own CRD replaces it, as the guide's rollback says (an apply would keep
    # the conversion this release's apply set): v1beta1 was never stored, so it may go.
    crds = previous / "crds" / f"{CRD}.yaml"
    c.kubectl("replace", "-f", str(crds))
    rolled_back = _crd(c)
    assert [v["name"] for v in rolled_back["spec"]["versions"]] == ["v1alpha1"]
    assert "webhook" not in (rolled_back["spec"].get("conversion") or {})
    assert c.get(EXPERIMENTS, "r2")["spec"]["agent"]["r2d2"]["sequenceLength"] == 30

    # Upgraded again, then uninstalled: the CRD and the Experiment stay.
    c.helm(*upgrade, "--take-ownership", "--force-conflicts")
    assert {v["name"] for v in _crd(c)["spec"]["versions"]} == {"v1alpha1", "v1beta1"}
    out = c.helm("uninstall", RELEASE, "-n", NAMESPACE)
    assert CRD in out.stdout + out.stderr  # helm says what it kept
    assert _crd(c)["metadata"]["uid"] == first["metadata"]["uid"]
    assert c.get(EXPERIMENTS, "r2", "v1alpha1")["metadata"]["uid"] == uid
