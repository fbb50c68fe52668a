"""The learner's TLS certificate when the cluster has no cert-manager: a self-signed CA and a
leaf for the learner's Service names, made with ``cryptography``.

The Secret holds what cert-manager's Certificates hold (``tls.crt``, ``tls.key``, ``ca.crt``),
so the pods mount either the same way. The CA's private key is thrown away once the leaf is
signed: nothing else is ever signed with it, and a leaf that needs renewing gets a new CA.
Pure functions of their arguments (the clock included), tested without a cluster.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long a leaf is valid, and how long before its end it is replaced.
VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
#: Keys of the Secret (cert-manager's kubernetes.io/tls layout).
CERT, KEY, CA = "tls.crt", "tls.key", "ca.crt"


#: The longest common name X.509 allows (RFC 5280's ub-common-name).
MAX_COMMON_NAME = 64


def _name(common_name: str) -> x509.Name:
    # The common name only labels the certificate (clients check the SANs): cut to what X.509
    # allows, as a Service's full name (NAME.NAMESPACE.svc) often exceeds it.
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "seedrl"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:MAX_COMMON_NAME]),
        ]
    )


def self_signed(dns_names: Sequence[str], now: datetime.datetime | None = None) -> dict[str, bytes]:
    """A new CA and a leaf it signed for ``dns_names`` (ECDSA P-256), as PEM.

    Returns:
      ``{"tls.crt": leaf, "tls.key": the leaf's key, "ca.crt": the CA}``.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"seedrl learner CA {dns_names[0]}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return {
        CERT: leaf.public_bytes(pem),
        CA: ca.public_bytes(pem),
        KEY: key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    }


def dns_names_of(cert_pem: bytes) -> list[str]:
    """The DNS names a PEM certificate is valid for."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName)


def needs_new(
    data: Mapping[str, bytes] | None, dns_names: Sequence[str], now: datetime.datetime | None = None
) -> bool:
    """Whether a Secret's certificate must be made (again): missing or unreadable, for other
    names, or within :data:`RENEW_BEFORE` of its end."""
    if not data or not all(data.get(k) for k in (CERT, KEY, CA)):
        return True
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        cert = x509.load_pem_x509_certificate(data[CERT])
    except ValueError:
        return True
    return (
        sorted(dns_names_of(data[CERT])) != sorted(dns_names)
        or cert.not_valid_after_utc - RENEW_BEFORE <= now
    )
