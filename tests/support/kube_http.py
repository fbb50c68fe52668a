"""A small asynchronous client of the real Kubernetes API for the tests' kubelet and
provisioner: JSON over HTTPS with a client certificate (a node's identity, so the API server's
Node authorizer and NodeRestriction admission judge every call as they judge a kubelet's), and
list+watch that resumes from the last resourceVersion and lists again on 410 Gone ("API
Concepts: Efficient detection of changes").

:func:`client_certificate` mints such an identity from the control plane's CA: a node is
``CN=system:node:NAME, O=system:nodes`` ("Using Node Authorization").
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def json_call(
    http: Any, server: str, method: str, path: str, body: Any = None, timeout: float = 30
) -> Any:
    """One synchronous call of the API at ``server`` through the urllib3 pool ``http``: the
    JSON answer, None on 404; any other failure fails the test with the server's answer."""
    answer = http.request(
        method,
        server + path,
        body=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        timeout=timeout,
    )
    if answer.status == 404:
        return None
    if answer.status >= 300:
        raise AssertionError(f"{method} {path}: {answer.status} {answer.data.decode()}")
    return json.loads(answer.data or b"{}")


def client_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, common_name: str, organizations: tuple[str, ...] = ()
) -> tuple[bytes, bytes]:
    """A client certificate and its key (PEM), signed by the cluster CA, for the user
    ``common_name`` in the groups ``organizations`` (the API server's x509 authenticator reads
    them from CN and O: "Authenticating: X509 client certificates"). Valid for a day."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class ApiError(Exception):
    """A non-2xx answer of the API server: its HTTP status and its Status object."""

    def __init__(self, status: int, body: Any, what: str):
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{what}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason


#: How many 401/403 answers in a row a retrying loop takes as the API server's own start-up (it
#: refuses every request until its authorization caches are filled, and a node what its Node
#: authorizer's graph does not link to it yet) before they are an error.
STARTUP_REFUSALS = 60


def transient(exc: BaseException, failures: int) -> bool:
    """Whether a failed call, the ``failures``-th in a row, is the API server being away rather
    than a fault of the caller: no connection, a reset or a timeout, 429 or 5xx (unbounded: a
    control plane can be down for minutes, an upgrade of a zonal one is), or a refusal while it
    starts (at most :data:`STARTUP_REFUSALS` in a row). The kubelet's loops retry those, logging
    them, without giving up (client-go's reflector and the kubelet's lease and status
    managers)."""
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, ApiError):
        if exc.status == 429 or exc.status >= 500:
            return True
        return exc.status in (401, 403) and failures < STARTUP_REFUSALS
    return False


class KubeHttp:
    """One identity's connection to the API server.

    Args:
      server: the API server's URL (``https://127.0.0.1:PORT``).
      ca_file: the cluster CA that signed the serving certificate.
      cert_file, key_file: the client certificate and key (None: no client certificate).
      token: a bearer token instead (an administrator's or a service account's).
    """

    def __init__(
        self,
        server: str,
        ca_file: Path,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        token: str | None = None,
    ):
        self.server = server.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        if cert_file is not None:
            self._ssl.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=16),
                headers=self._headers,
            )
        return self._session

    async def close(self) -> None:
        """Closes the connections."""
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Any:
        """One call; returns the decoded JSON answer, raises :class:`ApiError` on non-2xx."""
        data = None if body is None else json.dumps(body)
        async with self._open().request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type} if data is not None else None,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            text = await response.text()
            try:
                answer = json.loads(text) if text else {}
            except ValueError:
                answer = text
            if response.status >= 300:
                raise ApiError(response.status, answer, f"{method} {path}")
            return answer

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """GET ``path``."""
        return await self.request("GET", path, params=params)

    async def get_or_none(self, path: str) -> Any:
        """GET ``path``; None on 404."""
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def watch(
        self, path: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[tuple[str, dict]]:
        """List ``path`` then watch it, forever: yields ("SYNC", list) after each (re)list, then
        (type, object) for each event. Lists again when the watch's resourceVersion is too old
        (410 Gone, or an ERROR event with code 410), as client-go's reflector does."""
        params = dict(params or {})
        while True:
            listed = await self.get(path, params)
            yield "SYNC", listed
            version = listed["metadata"]["resourceVersion"]
            while True:
                query = {
                    **params,
                    "watch": "1",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "240",
                }
                gone = False
                try:
                    async with self._open().get(
                        self.server + path,
                        params=query,
                        timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
                    ) as response:
                        if response.status == 410:
                            gone = True
                        elif response.status >= 300:
                            raise ApiError(response.status, await response.text(), f"watch {path}")
                        else:
                            async for line in response.content:
                                if not line.strip():
                                    continue
                                event = json.loads(line)
                                kind, obj = event["type"], event["object"]
                                if kind == "ERROR":
                                    gone = obj.get("code") == 410
                                    break
                                version = obj["metadata"]["resourceVersion"]
                                if kind != "BOOKMARK":
                                    yield kind, obj
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    await asyncio.sleep(0.5)  # the connection dropped: resume from `version`
                if gone:
                    break


__all__ = ["STARTUP_REFUSALS", "ApiError", "KubeHttp", "client_certificate", "transient"]
