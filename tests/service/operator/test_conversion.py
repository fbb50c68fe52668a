"""The Experiment's second API version: ``v1beta1`` stored, ``v1alpha1`` still served, the
operator's conversion webhook between them, and the migration of what is stored."""

from __future__ import annotations

import base64
import json
import shutil

import yaml

from seedrl.common.config import GROUP, PLURAL
from seedrl.service.operator.conversion import convert, review
from seedrl.service.operator.crd import versioned_crd
from support.control_plane import free_port, wait_until_served
from support.operator_harness import LearnerStatusServer, OperatorCluster, ROOT, wait_for
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


def test_stored_as_v1alpha1_reads_back_as_v1beta1_and_migrates(tmp_path):
    """On the real API server: an Experiment stored as v1alpha1 (the CRD as every release so
    far installs it) reads as v1beta1 through the webhook the operator process serves once
    the CRD serves both; written back, it is stored as v1beta1 and reads without the
    webhook."""
    example = yaml.safe_load((ROOT / "examples" / "cartpole-r2d2.yaml").read_text())
    example["metadata"] = {"name": "r2", "namespace": NS}
    r2d2 = example["spec"]["agent"]["r2d2"]
    for key in ("trainLength", "sequencePeriod"):
        r2d2.pop(key, None)
    r2d2.update(sequenceLength=30, burnIn=10)
    with OperatorCluster(NS, workdir=tmp_path) as cluster:
        assert cluster.plane is not None
        cluster.create(example)
        certificates = cluster.plane.certificates
        # The operator as the chart would run it with the webhook on: main's own flags, its
        # serving certificate in a folder as a mounted kubernetes.io/tls Secret.
        folder = tmp_path / "webhook"
        folder.mkdir()
        shutil.copy(certificates.serving_cert, folder / "tls.crt")
        shutil.copy(certificates.serving_key, folder / "tls.key")
        port = free_port()
        learners = LearnerStatusServer()
        learners.serve()
        operator = ReleaseOperator(cluster, learners, tmp_path, "operator")
        operator.extra_args = (
            f"--conversion-webhook-port={port}",
            f"--conversion-webhook-cert-dir={folder}",
        )
        operator.start()
        try:
            client_config = {
                "url": f"https://127.0.0.1:{port}/convert",
                "caBundle": base64.b64encode(certificates.ca.read_bytes()).decode(),
            }
            cluster.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                "-",
                input=json.dumps(versioned_crd(client_config)),
            )
            wait_until_served(cluster.plane, CRD_NAME)
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
            # v1alpha1 still serves it, meaning the same. Stored as created it reads back as
            # written; once the operator's first status write has stored it as v1beta1 (the API
            # server converts every write to the storage version) it reads in v1beta1's fields.
            alpha = _get(cluster, "v1alpha1")
            assert alpha["apiVersion"] == f"{GROUP}/v1alpha1"
            as_read = alpha["spec"]["agent"]["r2d2"]
            assert as_read.get("sequenceLength", 30) == 30
            assert convert(alpha, f"{GROUP}/v1beta1")["spec"]["agent"]["r2d2"] == converted

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
