"""The Secrets cert-manager writes for a learner (its key, its CA's key) are owned by the
Experiment once written, without any further edit, and go with it: the real operator and the
real garbage collector (the ``live`` fixture); the test plays cert-manager, whose API is
served. Every step waits on a condition with a deadline."""

from __future__ import annotations

import kubernetes
import pytest

from seedrl.common.config import GROUP, PLURAL, VERSION
from support.foreign_crds import open_crd
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

SECRETS = ("owned-learner-tls", "owned-learner-ca")


@pytest.fixture
def cert_manager(live):
    """cert-manager's Issuers and Certificates served while the test runs."""
    definitions = [
        open_crd("cert-manager.io", "Issuer", "issuers"),
        open_crd("cert-manager.io", "Certificate", "certificates"),
    ]
    for definition in definitions:
        live.harness.cluster.create(definition)
    yield
    extensions = kubernetes.client.ApiextensionsV1Api(live.api)
    for definition in definitions:
        extensions.delete_custom_resource_definition(definition["metadata"]["name"])


def test_secrets_cert_manager_writes_later_are_owned_and_go_with_the_experiment(live, cert_manager):
    uid = live.create("owned")["metadata"]["uid"]
    wait_for(
        lambda: live.custom.get_namespaced_custom_object(
            "cert-manager.io", "v1", live.ns, "certificates", "owned-learner-tls"
        ),
        timeout=STEP_S,
        what="the learner's Certificate",
    )
    # What cert-manager writes once it has issued them, after the reconcile that asked (with
    # each Certificate's secretTemplate labels).
    for name in SECRETS:
        certificate = wait_for(
            lambda name=name: live.custom.get_namespaced_custom_object(
                "cert-manager.io", "v1", live.ns, "certificates", name
            ),
            timeout=STEP_S,
            what=f"the Certificate {name}",
        )
        live.core.create_namespaced_secret(
            live.ns,
            {
                "metadata": {
                    "name": name,
                    "labels": certificate["spec"]["secretTemplate"]["labels"],
                },
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": "", "tls.key": ""},
            },
        )

    def owned(name):
        refs = (live.read("Secret", name) or {}).get("metadata", {}).get("ownerReferences")
        return any(r["uid"] == uid for r in refs or [])

    for name in SECRETS:
        wait_for(lambda name=name: owned(name), timeout=STEP_S, what=f"{name} owned")
    live.custom.delete_namespaced_custom_object(GROUP, VERSION, live.ns, PLURAL, "owned")
    for name in SECRETS:
        wait_for(
            lambda name=name: live.read("Secret", name) is None,
            timeout=STEP_S,
            what=f"{name} deleted with the Experiment",
        )
