"""The conversion webhook's serving certificate, kept by the operator itself.

The API server calls the webhook over TLS and trusts only the CRD's
``spec.conversion.webhook.clientConfig.caBundle``. The chart renders the CRD without one: every
operator replica makes or reads a self-signed certificate in one Secret of its own namespace
(:func:`seedrl.service.operator.certificates.self_signed`, for the webhook Service's names),
serves it, and patches the CRD's ``caBundle`` to the CAs that sign what any replica may still
serve. So ``helm upgrade``, ``helm template`` (Argo CD) and a rollback never change the
certificate, and nothing outside the cluster (cert-manager included) is needed; the approach of
open-policy-agent/cert-controller's rotator.

Renewal (30 days before the end of a year's validity, or for other names) makes a new CA and
leaf; the CA it replaces stays in the Secret (``previous-ca.crt``) and in the ``caBundle``
until it expires, so a replica still serving the old leaf keeps answering while the others
catch up at their next :meth:`WebhookCertificate.ensure`.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import kubernetes
from cryptography import x509
from kubernetes.client.rest import ApiException

from seedrl.service.operator import certificates

log = logging.getLogger(__name__)

#: The Secret key of the CA a renewal replaced, kept while a replica may still serve its leaf.
PREVIOUS_CA = "previous-ca.crt"
#: How often each replica reads the Secret again (a renewal by another replica, or its own).
CHECK_SECONDS = 3600.0


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server dials a Service's webhook by (``NAME.NS.svc``), and its FQDN."""
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _pems(bundle: bytes) -> list[bytes]:
    marker = b"-----END CERTIFICATE-----"
    return [part.strip() + b"\n" + marker + b"\n" for part in bundle.split(marker)[:-1]]


def ca_bundle(data: Mapping[str, bytes], now: datetime.datetime | None = None) -> bytes:
    """The ``caBundle`` for a Secret's data: its CA, then the CA it replaced while that is
    still valid (PEM)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    out = _pems(data[certificates.CA])
    for pem in _pems(data.get(PREVIOUS_CA) or b""):
        try:
            valid = x509.load_pem_x509_certificate(pem).not_valid_after_utc > now
        except ValueError:
            continue
        if valid and pem not in out:
            out.append(pem)
    return b"".join(out)


def renewed(
    data: Mapping[str, bytes] | None,
    dns_names: Sequence[str],
    now: datetime.datetime | None = None,
) -> dict[str, bytes] | None:
    """What the Secret must hold instead of ``data``: a new CA and leaf for ``dns_names``,
    keeping the CA they replace as :data:`PREVIOUS_CA`; None while ``data`` still serves."""
    if not certificates.needs_new(data, dns_names, now):
        return None
    new = certificates.self_signed(list(dns_names), now)
    if data and data.get(certificates.CA):
        new[PREVIOUS_CA] = data[certificates.CA]
    return new


class WebhookCertificate:
    """One replica's view of the webhook certificate (see the module's docstring).

    Args:
      api_client: the operator's Kubernetes client.
      namespace, secret: where the certificate is kept (the operator's namespace).
      dns_names: the names it is for (:func:`service_dns_names`, and any other).
      crd_name: the CRD whose ``caBundle`` signs it; left alone when that CRD converts
        without a webhook.
      folder: where :attr:`cert_file` and :attr:`key_file` are written, readable by this
        process only.
    """

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        secret: str,
        dns_names: Sequence[str],
        crd_name: str,
        folder: Path,
    ):
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.crds = kubernetes.client.ApiextensionsV1Api(api_client)
        self.namespace, self.secret = namespace, secret
        self.dns_names = list(dns_names)
        self.crd_name = crd_name
        self.folder = folder
        self.cert_file, self.key_file = folder / certificates.CERT, folder / certificates.KEY
        self._served: bytes = b""

    def _read(self) -> tuple[dict[str, bytes] | None, str | None]:
        try:
            secret = self.core.read_namespaced_secret(self.secret, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        return data, secret.metadata.resource_version

    def _write(self, data: Mapping[str, bytes], resource_version: str | None) -> bool:
        """Stores ``data``; False when another replica wrote first (read it again)."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.secret,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/part-of": "seedrl"},
                **({"resourceVersion": resource_version} if resource_version else {}),
            },
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            # The client takes plain JSON as its V1Secret.
            if resource_version is None:
                self.core.create_namespaced_secret(self.namespace, cast(Any, body))
            else:
                self.core.replace_namespaced_secret(self.secret, self.namespace, cast(Any, body))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def current(self, now: datetime.datetime | None = None) -> dict[str, bytes]:
        """The Secret's certificate, made or renewed first where it must be (by this replica
        or, when two race, by whichever wrote first)."""
        for _ in range(5):
            data, version = self._read()
            new = renewed(data, self.dns_names, now)
            if new is None:
                assert data is not None
                return data
            if self._write(new, version):
                log.info("made the conversion webhook's certificate (Secret %s/%s)",
                         self.namespace, self.secret)  # fmt: skip
                return new
        raise RuntimeError(f"Secret {self.namespace}/{self.secret} kept changing under us")

    def ensure(self, now: datetime.datetime | None = None) -> bool:
        """Makes or renews the certificate where needed, writes it to :attr:`folder` and the
        CRD's ``caBundle``; True when what this replica serves changed (reload it)."""
        data = self.current(now)
        self._patch_ca_bundle(ca_bundle(data, now))
        served = data[certificates.CERT] + data[certificates.KEY]
        if served == self._served:
            return False
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path, value in ((self.key_file, data[certificates.KEY]),
                            (self.cert_file, data[certificates.CERT])):  # fmt: skip
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            tmp.replace(path)
        self._served = served
        return True

    def _patch_ca_bundle(self, bundle: bytes) -> None:
        try:
            crd = self.crds.read_custom_resource_definition(self.crd_name)
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            # crd.install false: whoever installs the CRD keeps its caBundle.
            log.warning("cannot read CRD %s (%s): its caBundle is not kept here",
                        self.crd_name, exc.reason)  # fmt: skip
            return
        conversion = crd.spec.conversion
        webhook = conversion.webhook if conversion is not None else None
        if webhook is None or webhook.client_config is None:
            log.warning("CRD %s converts without a webhook: its caBundle is not kept",
                        self.crd_name)  # fmt: skip
            return
        encoded = base64.b64encode(bundle).decode()
        if webhook.client_config.ca_bundle == encoded:
            return
        patch = {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": encoded}}}}}
        self.crds.patch_custom_resource_definition(self.crd_name, patch)
        log.info("CRD %s trusts the conversion webhook's CA", self.crd_name)

    def refresh(self, on_change: Any, stop: Any, interval: float = CHECK_SECONDS) -> None:
        """Until ``stop`` (a ``threading.Event``) is set: every ``interval`` s, :meth:`ensure`,
        calling ``on_change()`` when what this replica serves changed. A failure is logged
        and tried again at the next interval (the certificate it serves lasts far longer)."""
        while not stop.wait(interval):
            try:
                if self.ensure():
                    on_change()
            except Exception:
                log.exception("checking the conversion webhook's certificate failed")
