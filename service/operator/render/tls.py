"""TLS between actors and learner: the learner's certificate (cert-manager objects where
cert-manager runs, else a Secret the operator writes) and its mounts into both roles' pods."""

from __future__ import annotations

from typing import Any, Mapping

from seedrl.common.config import Experiment
from seedrl.service.operator.render.common import child_labels, names, object_meta


#: Where the learner's TLS certificate is mounted (the learner: tls.crt and tls.key; the actors:
#: ca.crt only).
TLS_DIR = "/etc/seedrl-tls"
#: cert-manager's API group: where a cluster serves it, the learner's certificate is a
#: cert-manager Certificate; elsewhere the operator makes it (service/operator/certificates.py).
CERT_MANAGER_GROUP = "cert-manager.io"


def tls_secret_name(experiment_name: str) -> str:
    """The Secret holding the learner's certificate (``tls.crt``, ``tls.key``, ``ca.crt``)."""
    return f"{experiment_name}-learner-tls"


def learner_dns_names(experiment_name: str, namespace: str) -> list[str]:
    """The names the learner's certificate is valid for: its Service's, short and qualified.
    Actors connect to the short one (``<name>-learner``) and verify it."""
    service = names(experiment_name).service
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def add_tls(
    exp: Experiment, role: str, container: dict[str, Any], pod_spec: dict[str, Any]
) -> None:
    """Mounts the learner's certificate into a pod and starts its process with TLS, when
    ``spec.learner.tls.enabled``: the learner gets its certificate and key and serves only TLS;
    an actor gets the CA alone (least privilege) and verifies the learner's Service name."""
    if not exp.spec.learner.tls.enabled:
        return
    if role == "learner":
        items, args = (
            ["tls.crt", "tls.key"],
            ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"],
        )
    else:
        items, args = ["ca.crt"], ["--tls-ca", f"{TLS_DIR}/ca.crt"]
    pod_spec["volumes"].append(
        {
            "name": "tls",
            "secret": {
                "secretName": tls_secret_name(exp.metadata.name),
                "items": [{"key": key, "path": key} for key in items],
                "defaultMode": 0o440,
            },
        }
    )
    container["volumeMounts"].append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    container["command"] = [*container["command"], *args]


def ca_secret_name(experiment_name: str) -> str:
    """The Secret holding the learner's CA under cert-manager (``tls.crt``, ``tls.key``)."""
    return f"{experiment_name}-learner-ca"


def render_certificate(exp: Experiment, owner=None, namespace=None) -> list[dict[str, Any]]:
    """The learner's certificate as cert-manager objects, in the order to apply them: a
    self-signed root Issuer, a CA Certificate of this Experiment's own (ten years, its key
    never rotated), an Issuer signing with that CA, and the learner's leaf Certificate for
    its Service names, which cert-manager writes (and renews, with a new key each time) into
    :func:`tls_secret_name`'s Secret. The Secret's ``ca.crt`` is then the CA's, the same
    across renewals: the actors, which trust ``ca.crt`` alone, keep verifying a renewed
    leaf; with the leaf self-signed, each renewal changed the anchor under running actors.
    Empty when TLS is off."""
    if not exp.spec.learner.tls.enabled:
        return []
    name = tls_secret_name(exp.metadata.name)
    ca = ca_secret_name(exp.metadata.name)
    root = f"{name}-root"
    ns = namespace or exp.metadata.namespace or "default"

    def issuer_ref(issuer: str) -> dict[str, str]:
        return {"group": CERT_MANAGER_GROUP, "kind": "Issuer", "name": issuer}

    def obj(kind: str, obj_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": f"{CERT_MANAGER_GROUP}/v1",
            "kind": kind,
            "metadata": object_meta(exp, obj_name, "learner", owner, namespace),
            "spec": spec,
        }

    secret_template = {"labels": child_labels(exp, "learner")}
    return [
        obj("Issuer", root, {"selfSigned": {}}),
        obj(
            "Certificate",
            ca,
            {
                "isCA": True,
                "commonName": f"{names(exp.metadata.name).service} CA",
                "secretName": ca,
                "duration": "87600h",
                "renewBefore": "720h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"},
                "secretTemplate": secret_template,
                "issuerRef": issuer_ref(root),
            },
        ),
        obj("Issuer", ca, {"ca": {"secretName": ca}}),
        obj(
            "Certificate",
            name,
            {
                "secretName": name,
                "dnsNames": learner_dns_names(exp.metadata.name, ns),
                "duration": "8760h",
                "renewBefore": "720h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                "usages": ["server auth", "digital signature", "key encipherment"],
                "secretTemplate": secret_template,
                "issuerRef": issuer_ref(ca),
            },
        ),
    ]


def render_tls_secret(
    exp: Experiment, data: Mapping[str, bytes], owner=None, namespace=None
) -> dict[str, Any]:
    """The learner's certificate as a Secret the operator writes itself (no cert-manager)."""
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": object_meta(
            exp, tls_secret_name(exp.metadata.name), "learner", owner, namespace
        ),
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
