"""The operator chart's ValidatingAdmissionPolicy (templates/admissionpolicy.yaml) on the real
kube-apiserver, tried with the operator's own ServiceAccount token: RBAC grants it Jobs,
Deployments and Secrets in every namespace (cluster scope); the policy keeps its writes to its
Experiments' children and out of the system namespaces. That the operator's own writes all pass
it is proved by every operator test, which runs under it (tests/support/operator_harness.py)."""

from __future__ import annotations

import time

import kubernetes
import pytest

from support.operator_harness import OperatorCluster

pytestmark = pytest.mark.cluster

NS = "team-a"


def _config_map(owner: dict, name: str, labelled: bool = True, owned: bool = True) -> dict:
    meta: dict = {"name": name}
    if labelled:
        meta["labels"] = {"seedrl.dev/experiment": "cartpole"}
    if owned:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def _refusal(call) -> str:
    """The message of the 403 ``call`` gets; fails if it succeeds."""
    try:
        call()
    except kubernetes.client.ApiException as exc:
        assert exc.status == 403, (exc.status, exc.body)
        return str(exc.body)
    raise AssertionError("the write was admitted")


def test_the_operator_writes_only_its_experiments_children_outside_system_namespaces():
    with OperatorCluster(NS) as cluster:
        admin = kubernetes.client.CoreV1Api(cluster.api_client())
        core = kubernetes.client.CoreV1Api(cluster.operator_api_client())
        apps = kubernetes.client.AppsV1Api(cluster.operator_api_client())
        # A real owner: the garbage collector deletes what names one that does not exist.
        exp = cluster.create(
            {
                "apiVersion": "seedrl.dev/v1alpha1",
                "kind": "Experiment",
                "metadata": {"name": "cartpole", "namespace": NS},
                "spec": {},
            }
        )
        owner = {
            "apiVersion": "seedrl.dev/v1alpha1",
            "kind": "Experiment",
            "name": "cartpole",
            "uid": exp["metadata"]["uid"],
        }
        # The policy is enforced once the API server has loaded it: wait for the first
        # refusal (a Secret in kube-system, which RBAC alone allows).
        secret = {"metadata": {"name": "grab", "labels": {"seedrl.dev/experiment": "x"}}}
        deadline = time.monotonic() + 60
        while True:
            try:
                core.create_namespaced_secret("kube-system", secret)
            except kubernetes.client.ApiException as exc:
                if exc.status == 403:
                    break
                raise
            admin.delete_namespaced_secret("grab", "kube-system")  # admitted: not loaded yet
            assert time.monotonic() < deadline, "the policy was never enforced"
            time.sleep(0.2)  # a poll interval, bounded by the deadline
        assert "may not write to namespace kube-system" in str(
            _refusal(lambda: core.create_namespaced_secret("kube-system", secret))
        )

        # Its own children: made, changed and deleted.
        core.create_namespaced_config_map(NS, _config_map(owner, "cartpole-config"))
        core.patch_namespaced_config_map("cartpole-config", NS, {"data": {"k": "w"}})
        core.delete_namespaced_config_map("cartpole-config", NS)
        # A retained run-volume claim has no owner, only the label.
        claim = {
            "metadata": {"name": "cartpole-run", "labels": {"seedrl.dev/experiment": "cartpole"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        core.create_namespaced_persistent_volume_claim(NS, claim)

        # Anything else, though RBAC grants the verb.
        assert "only write objects labelled" in _refusal(
            lambda: core.create_namespaced_config_map(NS, _config_map(owner, "x", labelled=False))
        )
        assert "only write objects its Experiments own" in _refusal(
            lambda: core.create_namespaced_config_map(NS, _config_map(owner, "y", owned=False))
        )
        admin.create_namespaced_secret(NS, {"metadata": {"name": "db-password"}})
        # Labelling a foreign object does not make it the operator's.
        assert "only change or delete objects labelled" in _refusal(
            lambda: core.patch_namespaced_secret(
                "db-password",
                NS,
                {
                    "metadata": {
                        "labels": {"seedrl.dev/experiment": "cartpole"},
                        "ownerReferences": [owner],
                    }
                },
            )
        )
        assert "only change or delete objects labelled" in _refusal(
            lambda: core.delete_namespaced_secret("db-password", NS)
        )
        deployment = {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        }
        kubernetes.client.AppsV1Api(cluster.api_client()).create_namespaced_deployment(
            NS, deployment
        )
        assert "only change or delete objects labelled" in _refusal(
            lambda: apps.delete_namespaced_deployment("web", NS)
        )
        # RBAC lets it delete pods (a learner stranded on a lost node): only its learners'.
        admin.create_namespaced_pod(
            NS,
            {
                "metadata": {"name": "web"},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        )
        assert "only change or delete objects labelled" in _refusal(
            lambda: core.delete_namespaced_pod("web", NS)
        )
        # The admin is not bound by it.
        admin.delete_namespaced_secret("db-password", NS)
