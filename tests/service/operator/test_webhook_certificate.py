"""The conversion webhook's certificate, kept by the operator (issue 37, versioned API): made
once for every replica, renewed with the CA it replaces still trusted, served again without a
restart, and the CRD's ``caBundle`` kept at what signs it; on the real API server with the
operator's own ServiceAccount token (its RBAC and admission policy as the chart renders
them)."""

from __future__ import annotations

import base64
import datetime
import socket
import ssl
import threading

from cryptography import x509

from seedrl.service.operator import certificates
from seedrl.service.operator.conversion import ConversionWebhook
from seedrl.service.operator.webhook_certificate import (
    PREVIOUS_CA,
    WebhookCertificate,
    ca_bundle,
    renewed,
)
from support.operator_harness import OPERATOR_NAMESPACE, WEBHOOK_SECRET, OperatorCluster

NAMES = ["localhost"]
NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc)
#: Inside the renewal window of a certificate made at NOW (a year's validity, 30 days before).
RENEWAL = NOW + certificates.VALIDITY - certificates.RENEW_BEFORE + datetime.timedelta(days=1)


def _cas(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle)


def test_a_renewal_keeps_the_ca_it_replaces_trusted_until_that_expires():
    first = renewed(None, NAMES, NOW)
    assert first is not None and PREVIOUS_CA not in first
    assert renewed(first, NAMES, NOW) is None
    assert renewed(first, NAMES, RENEWAL - datetime.timedelta(days=2)) is None
    second = renewed(first, NAMES, RENEWAL)
    assert second is not None and second[PREVIOUS_CA] == first[certificates.CA]
    both = _cas(ca_bundle(second, RENEWAL))
    assert [c.subject for c in both] == [
        _cas(second[certificates.CA])[0].subject,
        _cas(first[certificates.CA])[0].subject,
    ]
    # Once the old CA has expired, it signs nothing anyone serves: it leaves the bundle.
    later = NOW + certificates.VALIDITY + datetime.timedelta(days=1)
    assert len(_cas(ca_bundle(second, later))) == 1
    # Other names: made again.
    assert renewed(first, ["other.ns.svc"], NOW) is not None


def test_names_longer_than_a_common_name_allows_are_served():
    # The chart's Service names: RELEASE-seedrl-operator-webhook.NAMESPACE.svc passes X.509's
    # 64-character common name (an operator that crashed on it served nothing).
    names = ["seedrl-seedrl-operator-webhook.seedrl-system.svc", "a" * 60 + ".ns.svc"]
    made = renewed(None, names, NOW)
    assert made is not None
    assert certificates.dns_names_of(made[certificates.CERT]) == names


def _handshake(port: int, ca: bytes) -> bool:
    context = ssl.create_default_context(cadata=ca.decode())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost"):
                return True
    except ssl.SSLCertVerificationError:
        return False


def test_the_webhook_serves_a_renewed_certificate_without_a_restart(tmp_path):
    first, second = (certificates.self_signed(NAMES) for _ in range(2))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first[certificates.CERT])
    key.write_bytes(first[certificates.KEY])
    webhook = ConversionWebhook("127.0.0.1", 0, cert, key).start()
    try:
        assert _handshake(webhook.port, first[certificates.CA])
        cert.write_bytes(second[certificates.CERT])
        key.write_bytes(second[certificates.KEY])
        webhook.reload()
        assert _handshake(webhook.port, second[certificates.CA])
        assert not _handshake(webhook.port, first[certificates.CA])
    finally:
        webhook.stop()


def _secret_data(cluster: OperatorCluster) -> dict[str, bytes]:
    import json

    secret = json.loads(
        cluster.kubectl("get", "secret", WEBHOOK_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "json")
    )
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _ca_bundle(cluster: OperatorCluster) -> bytes:
    import json

    crd = json.loads(cluster.kubectl("get", "crd", "experiments.seedrl.dev", "-o", "json"))
    return base64.b64decode(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"])


def test_replicas_share_one_certificate_and_keep_the_crds_ca_bundle(tmp_path):
    import json

    with OperatorCluster("webhook-cert", workdir=tmp_path) as cluster:
        # The chart's CRD (both versions, the webhook's clientConfig, no caBundle).
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps(cluster.chart_crd("https://localhost:9443/convert")),
        )  # fmt: skip
        replicas = [
            WebhookCertificate(
                cluster.operator_api_client(),
                OPERATOR_NAMESPACE,
                WEBHOOK_SECRET,
                NAMES,
                "experiments.seedrl.dev",
                tmp_path / f"replica-{i}",
            )
            for i in range(3)
        ]
        # Three replicas starting at once: one makes it, the others read it.
        errors: list[BaseException] = []

        def start(replica: WebhookCertificate) -> None:
            try:
                assert replica.ensure(NOW)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        stored = _secret_data(cluster)
        assert {r.cert_file.read_bytes() for r in replicas} == {stored[certificates.CERT]}
        assert all(r.key_file.stat().st_mode & 0o077 == 0 for r in replicas)
        assert _ca_bundle(cluster) == ca_bundle(stored, NOW)
        # Nothing changed: nothing to reload, nothing written.
        assert not replicas[1].ensure(NOW)

        # The renewal window: one replica renews; the CRD trusts both CAs, so the replicas
        # still serving the old leaf keep answering until their next check.
        assert replicas[0].ensure(RENEWAL)
        renewed_data = _secret_data(cluster)
        assert renewed_data[PREVIOUS_CA] == stored[certificates.CA]
        bundle = [c.subject for c in _cas(_ca_bundle(cluster))]
        assert bundle == [
            _cas(renewed_data[certificates.CA])[0].subject,
            _cas(stored[certificates.CA])[0].subject,
        ]
        assert replicas[2].ensure(RENEWAL)
        assert replicas[2].cert_file.read_bytes() == renewed_data[certificates.CERT]
        # A helm upgrade applies the CRD again without a caBundle: the operator's stays.
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps(cluster.chart_crd("https://localhost:9443/convert")),
        )  # fmt: skip
        assert _ca_bundle(cluster) == ca_bundle(renewed_data, RENEWAL)
