"""The learner's TLS certificate, which its actors check it by: a cert-manager Issuer and
Certificate where cert-manager runs, else a self-signed CA and leaf the operator makes, in
Secrets the Experiment owns (so that the learner's key goes with it)."""

from __future__ import annotations

import base64
import logging
from typing import Any, Mapping

import kubernetes

from seedrl.common.config import Experiment
from seedrl.service.operator import certificates
from seedrl.service.operator.children import APPLY, FIELD_MANAGER, Children
from seedrl.service.operator.render.tls import (
    CERT_MANAGER_GROUP,
    ca_secret_name,
    learner_dns_names,
    render_certificate,
    render_tls_secret,
    tls_secret_name,
)

log = logging.getLogger(__name__)


class LearnerCertificates:
    """Provisions the learner's certificate and makes the Experiment own its Secrets."""

    def __init__(self, children: Children):
        self.children = children

    def secrets_unowned(self, exp: Experiment, namespace: str, uid: str) -> bool:
        """Whether the learner's certificate Secrets need the operator: one that cert-manager
        wrote (the leaf's, the CA's) is there but not owned by the Experiment, or the leaf's
        is missing without cert-manager (the operator makes it). cert-manager writes them
        after the reconcile that asked for them, so without this check only a later spec edit
        would make the Experiment own them, and they would outlive it."""
        if not exp.spec.learner.tls.enabled:
            return False
        name = exp.metadata.name
        leaf = self.children.read("Secret", namespace, tls_secret_name(name))
        if leaf is None:
            return not self.cert_manager_installed()  # else cert-manager's to write
        if not _owned_by(leaf, uid):
            return True
        ca = self.children.read("Secret", namespace, ca_secret_name(name))
        return ca is not None and not _owned_by(ca, uid)

    def cert_manager_installed(self) -> bool:
        """Whether the cluster serves cert-manager's API (read from API discovery, which every
        authenticated client may read: no extra rights needed)."""
        api = kubernetes.client.CustomObjectsApi(self.children.api_client)
        try:
            resources = api.get_api_resources(CERT_MANAGER_GROUP, "v1")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.name == "certificates" for r in resources.resources or [])

    def ensure(self, exp: Experiment, namespace: str, owner: Mapping[str, Any]) -> None:
        """Provisions the learner's certificate when ``spec.learner.tls.enabled``: a
        cert-manager Issuer and Certificate where cert-manager runs (it writes and renews the
        Secret), else a Secret with a self-signed CA and leaf made here, made again when
        missing, for other names or near its end. The pods mount the Secret by name and wait
        for it."""
        if not exp.spec.learner.tls.enabled:
            return
        if self.cert_manager_installed():
            api = kubernetes.client.CustomObjectsApi(self.children.api_client)
            for obj in render_certificate(exp, owner, namespace):
                api.patch_namespaced_custom_object(
                    CERT_MANAGER_GROUP,
                    "v1",
                    namespace,
                    obj["kind"].lower() + "s",
                    obj["metadata"]["name"],
                    obj,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type=APPLY,
                )
            self.own_secrets(
                namespace,
                [
                    tls_secret_name(exp.metadata.name),
                    ca_secret_name(exp.metadata.name),
                ],
                owner,
            )
            return
        name = tls_secret_name(exp.metadata.name)
        current = self.children.read("Secret", namespace, name)
        data = {k: base64.b64decode(v) for k, v in ((current or {}).get("data") or {}).items()}
        dns_names = learner_dns_names(exp.metadata.name, namespace)
        if certificates.needs_new(data, dns_names):
            log.info(
                "Experiment %s/%s: making the learner's TLS certificate (%s)",
                namespace,
                exp.metadata.name,
                ", ".join(dns_names),
            )
            self.children.apply(
                render_tls_secret(exp, certificates.self_signed(dns_names), owner, namespace)
            )

    def own_secrets(self, namespace: str, names: list[str], owner: Mapping[str, Any]) -> None:
        """Makes the Experiment own the Secrets cert-manager wrote for it: cert-manager does
        not delete a Certificate's Secret with it (unless started with
        ``--enable-certificate-owner-ref``), so the learner's key would outlive the
        Experiment. A Secret not written yet is left for the next reconcile: the poller
        reconciles until both are owned (:meth:`secrets_unowned`)."""
        for name in names:
            secret = self.children.read("Secret", namespace, name)
            if secret is None:
                continue
            if _owned_by(secret, owner["uid"]):
                continue
            refs = (secret.get("metadata") or {}).get("ownerReferences") or []
            self.children.merge(
                "Secret", namespace, name, {"metadata": {"ownerReferences": [*refs, dict(owner)]}}
            )


def _owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether ``obj`` exists and has an owner reference to ``uid``."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)
