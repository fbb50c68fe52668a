"""The operator's self-signed learner certificates (service/operator/certificates.py)."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from seedrl.service.operator import certificates

NAMES = ["exp-learner", "exp-learner.rl", "exp-learner.rl.svc", "exp-learner.rl.svc.cluster.local"]


def test_the_leaf_is_signed_by_the_ca_for_the_learners_names():
    data = certificates.self_signed(NAMES)
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    # Raises if the CA did not sign the leaf.
    ca.public_key().verify(
        leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm)
    )
    assert leaf.issuer == ca.subject and ca.issuer == ca.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certificates.dns_names_of(data["tls.crt"]) == NAMES
    assert data["tls.key"].startswith(b"-----BEGIN PRIVATE KEY-----")


def test_a_certificate_is_made_again_when_missing_for_other_names_or_near_its_end():
    now = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    data = certificates.self_signed(NAMES, now)
    assert not certificates.needs_new(data, NAMES, now)
    assert not certificates.needs_new(data, list(reversed(NAMES)), now)
    assert certificates.needs_new(None, NAMES, now)
    assert certificates.needs_new({**data, "tls.key": b""}, NAMES, now)
    assert certificates.needs_new({**data, "tls.crt": b"not a certificate"}, NAMES, now)
    assert certificates.needs_new(data, ["other-learner"], now)
    near_end = now + certificates.VALIDITY - certificates.RENEW_BEFORE
    assert certificates.needs_new(data, NAMES, near_end)
    assert not certificates.needs_new(data, NAMES, near_end - datetime.timedelta(days=1))
