"""The Experiment's second API version: ``v1beta1`` stored, ``v1alpha1`` still served, the
operator's conversion webhook between them, and the migration of what is stored."""

from __future__ import annotations

import json

import yaml

from seedrl.common.config import GROUP, PLURAL
from seedrl.service.operator.conversion import ANNOTATION, convert, review
from support.control_plane import free_port, wait_until_served
from support.operator_harness import (
    OPERATOR_NAMESPACE,
    ROOT,
    WEBHOOK_SECRET,
    LearnerStatusServer,
    OperatorCluster,
    wait_for,
)
from support.operator_release import ReleaseOperator

NS = "conversion"
CRD_NAME = f"{PLURAL}.{GROUP}"


def _r2d2(api_version: str = f"{GROUP}/v1alpha1", **r2d2) -> dict:
    return {
        "apiVersion": api_version,
        "kind": "Experiment",
        "metadata": {"name": "r2", "namespace": NS},
        "spec": {"agent": {"name": "r2d2", "r2d2": r2d2}},
    }


def test_v1alpha1_becomes_v1beta1_without_retired_fields():
    out = convert(_r2d2(sequenceLength=30, burnIn=10), f"{GROUP}/v1beta1")
    assert out["apiVersion"] == f"{GROUP}/v1beta1"
    assert out["spec"]["agent"]["r2d2"] == {"burnIn": 10, "trainLength": 20, "sequencePeriod": 20}


def test_v1beta1_goes_back_to_v1alpha1_as_it_is():
    obj = _r2d2(f"{GROUP}/v1beta1", trainLength=20, burnIn=10, sequencePeriod=20)
    assert convert(obj, f"{GROUP}/v1alpha1") == {**obj, "apiVersion": f"{GROUP}/v1alpha1"}


def test_a_round_trip_through_v1beta1_keeps_the_v1alpha1_form():
    # What the API server does to a stored v1alpha1 object that `kubectl scale` or a suspend
    # writes through v1beta1: to v1beta1, the edit, and back to v1alpha1 to store it.
    stored = _r2d2(sequenceLength=30, burnIn=10, trainLength=80, sequencePeriod=40, nStep=5)
    beta = convert(stored, f"{GROUP}/v1beta1")
    assert "sequenceLength" not in beta["spec"]["agent"]["r2d2"]
    beta["spec"]["suspend"] = True
    beta["spec"]["agent"]["r2d2"]["nStep"] = 3
    back = convert(beta, f"{GROUP}/v1alpha1")
    # The retired form again (an earlier release reads it after a rollback), the edits kept,
    # no annotation left.
    assert back["spec"]["agent"]["r2d2"] == {
        "sequenceLength": 30, "burnIn": 10, "trainLength": 80, "sequencePeriod": 40, "nStep": 3
    }  # fmt: skip
    assert back["spec"]["suspend"] is True
    assert back["metadata"] == stored["metadata"]


def test_an_edit_of_what_a_retired_field_became_is_kept():
    beta = convert(_r2d2(sequenceLength=30, burnIn=10), f"{GROUP}/v1beta1")
    beta["spec"]["agent"]["r2d2"]["trainLength"] = 25
    back = convert(beta, f"{GROUP}/v1alpha1")
    assert back["spec"]["agent"]["r2d2"] == {"burnIn": 10, "trainLength": 25, "sequencePeriod": 20}
    assert "annotations" not in back["metadata"]
    # An annotation someone mangled is dropped, the spec kept as v1beta1 says.
    beta = convert(_r2d2(sequenceLength=30, burnIn=10), f"{GROUP}/v1beta1")
    beta["metadata"]["annotations"][ANNOTATION] = "{not json"
    back = convert(beta, f"{GROUP}/v1alpha1")
    assert back["spec"]["agent"]["r2d2"]["trainLength"] == 20
    assert "annotations" not in back["metadata"]


def test_a_review_answers_in_order_or_fails_whole():
    request = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "u-1",
            "desiredAPIVersion": f"{GROUP}/v1beta1",
            "objects": [_r2d2(sequenceLength=30, burnIn=10), _r2d2(trainLength=5)],
        },
    }
    answer = review(request)["response"]
    assert answer["uid"] == "u-1" and answer["result"] == {"status": "Success"}
    assert [o["spec"]["agent"]["r2d2"].get("trainLength") for o in answer["convertedObjects"]] == [
        20,
        5,
    ]
    request["request"]["desiredAPIVersion"] = f"{GROUP}/v9"
    failed = review(request)["response"]
    assert failed["result"]["status"] == "Failure" and "v9" in failed["result"]["message"]


def _get_or_none(cluster: OperatorCluster, version: str) -> dict | None:
    """The Experiment in ``version``, or None while the API server cannot serve it (the
    webhook not listening yet)."""
    assert cluster.plane is not None
    done = cluster.plane.kubectl(
        "get", f"{PLURAL}.{version}.{GROUP}", "r2", "-n", NS, "-o", "json", check=False
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def _write_back(cluster: OperatorCluster) -> bool:
    """Reads the Experiment as v1beta1 and writes it back unchanged (the storage migration of
    one object); False on a conflict with a concurrent write."""
    assert cluster.plane is not None
    current = json.dumps(_get(cluster, "v1beta1"))
    return cluster.plane.kubectl("replace", "-f", "-", input=current, check=False).returncode == 0


def _get(cluster: OperatorCluster, version: str) -> dict:
    return json.loads(
        cluster.kubectl("get", f"{PLURAL}.{version}.{GROUP}", "r2", "-n", NS, "-o", "json")
    )


def test_the_charts_crd_converts_through_the_operators_own_certificate_and_migrates(tmp_path):
    """On the real API server: an Experiment stored as v1alpha1 (the CRD as every release so
    far installs it) reads as v1beta1 once the chart's CRD serves both, through the webhook
    the operator process serves with the certificate it made, whose CA it put in the CRD's
    caBundle itself; stored as v1beta1 (crd.storageVersion) and written back, it reads
    without the webhook."""
    example = yaml.safe_load((ROOT / "examples" / "cartpole-r2d2.yaml").read_text())
    example["metadata"] = {"name": "r2", "namespace": NS}
    r2d2 = example["spec"]["agent"]["r2d2"]
    for key in ("trainLength", "sequencePeriod"):
        r2d2.pop(key, None)
    r2d2.update(sequenceLength=30, burnIn=10)
    with OperatorCluster(NS, workdir=tmp_path) as cluster:
        assert cluster.plane is not None
        cluster.create(example)
        # The operator as the chart runs it (its own flags, its ServiceAccount token), the
        # CRD's clientConfig a URL to it instead of the Service (no kube-proxy here).
        port = free_port()
        url = f"https://localhost:{port}/convert"
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps(cluster.chart_crd(url)),
        )  # fmt: skip
        wait_until_served(cluster.plane, CRD_NAME)
        learners = LearnerStatusServer()
        learners.serve()
        operator = ReleaseOperator(cluster, learners, tmp_path, "operator")
        operator.extra_args = (
            f"--conversion-webhook-port={port}",
            f"--conversion-webhook-secret={WEBHOOK_SECRET}",
            "--conversion-webhook-dns-name=localhost",
        )
        operator.start()
        try:
            beta = wait_for(
                lambda: _get_or_none(cluster, "v1beta1"),
                120,
                f"the Experiment served as v1beta1 (operator: {operator.tail()})",
            )
            assert beta["apiVersion"] == f"{GROUP}/v1beta1"
            converted = beta["spec"]["agent"]["r2d2"]
            assert "sequenceLength" not in converted
            assert (converted["trainLength"], converted["burnIn"], converted["sequencePeriod"]) == (
                20,
                10,
                20,
            )
            # The API server trusted the webhook through the CA the operator made and wrote.
            crd = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json"))
            secret = json.loads(
                cluster.kubectl(
                    "get", "secret", WEBHOOK_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "json"
                )
            )
            assert (
                crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
                == (secret["data"]["ca.crt"])
            )
            # v1alpha1 is still what is stored (the chart's default), and still serves it.
            assert crd["status"]["storedVersions"] == ["v1alpha1"]
            alpha = _get(cluster, "v1alpha1")
            assert alpha["apiVersion"] == f"{GROUP}/v1alpha1"
            assert alpha["spec"]["agent"]["r2d2"]["sequenceLength"] == 30
            assert convert(alpha, f"{GROUP}/v1beta1")["spec"]["agent"]["r2d2"] == converted

            # Store v1beta1, as `helm upgrade --set crd.storageVersion=v1beta1` applies it:
            # the caBundle the operator set survives the apply.
            cluster.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", "-",
                input=json.dumps(cluster.chart_crd(url, "crd.storageVersion=v1beta1")),
            )  # fmt: skip
            assert _get(cluster, "v1beta1")["spec"]["agent"]["r2d2"] == converted
            # The migration: read and write back, then drop v1alpha1 from storedVersions.
            # The operator writes the status meanwhile: read again on a conflict.
            wait_for(lambda: _write_back(cluster), 60, "the Experiment written back as v1beta1")
            stored = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json"))
            assert set(stored["status"]["storedVersions"]) == {"v1alpha1", "v1beta1"}
            cluster.kubectl(
                "patch",
                "crd",
                CRD_NAME,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": {"storedVersions": ["v1beta1"]}}),
            )
        finally:
            operator.stop()
            learners.close()
        # Stored as v1beta1 now: read in that version, it needs no webhook.
        again = _get(cluster, "v1beta1")
        assert again["spec"]["agent"]["r2d2"]["trainLength"] == 20
        # v1alpha1 still needs the webhook, which is gone: the request fails, nothing is lost.
        refused = cluster.plane.kubectl(
            "get", f"{PLURAL}.v1alpha1.{GROUP}", "r2", "-n", NS, "-o", "json", check=False
        )
        assert refused.returncode != 0 and "conversion webhook" in refused.stderr
