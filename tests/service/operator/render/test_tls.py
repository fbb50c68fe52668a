"""The learner's certificate and its mounts into both roles (render/tls.py)."""

from __future__ import annotations

import pytest

from seedrl.service.operator.render import render
from seedrl.service.operator.render.tls import TLS_DIR, learner_dns_names, render_certificate


def _arg(container, flag):
    """The value of ``flag`` in a container's command."""
    command = container["command"]
    return command[command.index(flag) + 1]


@pytest.mark.parametrize("enabled", [True, False])
def test_tls_mounts_the_learners_key_into_the_learner_and_only_the_ca_into_actors(
    enabled, exp_of, by_kind
):
    objs = by_kind(render(exp_of(learner={"tls": {"enabled": enabled}})))
    learner = objs["Job"]["spec"]["template"]["spec"]
    actor = objs["Deployment"]["spec"]["template"]["spec"]
    secrets = {
        role: [
            (v["secret"]["secretName"], [i["key"] for i in v["secret"]["items"]])
            for v in pod["volumes"]
            if "secret" in v
        ]
        for role, pod in (("learner", learner), ("actor", actor))
    }
    if not enabled:
        assert secrets == {"learner": [], "actor": []}
        assert "--tls-cert" not in learner["containers"][0]["command"]
        assert "--tls-ca" not in actor["containers"][0]["command"]
        return
    assert secrets == {
        "learner": [("exp-learner-tls", ["tls.crt", "tls.key"])],
        "actor": [("exp-learner-tls", ["ca.crt"])],
    }
    assert _arg(learner["containers"][0], "--tls-cert") == f"{TLS_DIR}/tls.crt"
    assert _arg(learner["containers"][0], "--tls-key") == f"{TLS_DIR}/tls.key"
    assert _arg(actor["containers"][0], "--tls-ca") == f"{TLS_DIR}/ca.crt"
    # The actors verify the name they connect to, which the certificate carries.
    assert _arg(actor["containers"][0], "--learner").split(":")[0] in learner_dns_names(
        "exp", "default"
    )
    for pod in (learner, actor):
        assert {"name": "tls", "mountPath": TLS_DIR, "readOnly": True} in pod["containers"][0][
            "volumeMounts"
        ]


def test_cert_manager_signs_the_learner_with_a_ca_of_the_experiments_own(exp_of, owner):
    exp = exp_of()
    root, ca, ca_issuer, leaf = render_certificate(exp, owner, namespace="rl")
    assert (root["kind"], root["spec"]) == ("Issuer", {"selfSigned": {}})
    # A CA whose key never rotates signs the leaf: the leaf Secret's ca.crt, all the actors
    # trust, stays the same when the leaf renews (rotationPolicy Always: a new key each time).
    assert ca["kind"] == "Certificate" and ca["spec"]["isCA"] is True
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert ca["spec"]["issuerRef"]["name"] == root["metadata"]["name"]
    assert ca_issuer["kind"] == "Issuer"
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    assert leaf["kind"] == "Certificate" and "isCA" not in leaf["spec"]
    assert leaf["spec"]["secretName"] == "exp-learner-tls"
    assert leaf["spec"]["privateKey"]["rotationPolicy"] == "Always"
    assert leaf["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "Issuer",
        "name": ca_issuer["metadata"]["name"],
    }
    assert leaf["spec"]["dnsNames"] == [
        "exp-learner",
        "exp-learner.rl",
        "exp-learner.rl.svc",
        "exp-learner.rl.svc.cluster.local",
    ]
    assert len({(o["kind"], o["metadata"]["name"]) for o in (root, ca, ca_issuer, leaf)}) == 4
    for obj in (root, ca, ca_issuer, leaf):
        assert obj["metadata"]["ownerReferences"] == [owner]
    assert render_certificate(exp_of(learner={"tls": {"enabled": False}})) == []
