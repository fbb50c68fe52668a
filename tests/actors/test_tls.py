"""Optional TLS on the actor-learner stream: a real certificate, a real TLS handshake."""

import asyncio
import shutil
import subprocess
import threading
import time

import grpc
import pytest

from seedrl.actors.client import ActorClient, Backoff, request_index
from seedrl.actors.envs import EnvBatch
from seedrl.common.config import EnvConfig
from seedrl.learner.server import server_credentials
from support.learner_harness import start_learner, stop_learner
from support.pods import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture
def certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def actor(address, actor_id, credentials=None):
    return ActorClient(
        EnvBatch(EnvConfig(id="CartPole-v1"), 2, [0, 1]),
        "test-exp",
        actor_id,
        address,
        credentials=credentials,
        backoff=Backoff(0.01, 0.1),
    )


def test_actor_streams_over_tls_and_a_plaintext_actor_cannot(certificate):
    cert, key = certificate
    address = f"localhost:{free_port()}"
    learner = start_learner(address, credentials=server_credentials(cert, key))
    try:
        with open(cert, "rb") as fh:
            trusted = grpc.ssl_channel_credentials(root_certificates=fh.read())
        tls_actor = actor(address, "tls-actor", trusted)
        done = {}
        thread = threading.Thread(
            target=lambda: done.setdefault("ok", asyncio.run(tls_actor.run()) is None), daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 60
        while learner.runtime.env_steps <= 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert learner.runtime.env_steps > 50

        # Plaintext against the TLS port never completes a handshake: it only retries.
        plain = actor(address, "plain-actor")
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(plain.run(), timeout=2.0))
        assert plain.connections == 0 and plain.env_steps == 0

        learner.runtime.finish("max_env_steps")
        thread.join(30)
        assert done == {"ok": True} and tls_actor.connections == 1
    finally:
        stop_learner(learner)


def test_index_request_and_stream_verify_the_name_given_for_another_address(certificate):
    # A pod reaches the learner's Service by a name the certificate carries; here, as through
    # a tunnel, the address is an IP and --tls-server-name says which name to verify. Both
    # RPCs an actor makes (AssignIndex, then the stream) must verify that name.
    cert, key = certificate
    port = free_port()
    learner = start_learner(f"127.0.0.1:{port}", credentials=server_credentials(cert, key))
    try:
        with open(cert, "rb") as fh:
            trusted = grpc.ssl_channel_credentials(root_certificates=fh.read())
        address = f"127.0.0.1:{port}"
        index = asyncio.run(
            asyncio.wait_for(
                request_index(
                    address,
                    "test-exp",
                    "named-actor",
                    trusted,
                    Backoff(0.01, 0.1),
                    tls_server_name="localhost",
                ),
                timeout=30,
            )
        )
        assert index == 0
        # Without the name, the IP is verified against a certificate for localhost: refused,
        # retried until given up on.
        with pytest.raises(TimeoutError):
            asyncio.run(
                asyncio.wait_for(
                    request_index(
                        address, "test-exp", "unnamed-actor", trusted, Backoff(0.01, 0.1)
                    ),
                    timeout=2.0,
                )
            )
        client = ActorClient(
            EnvBatch(EnvConfig(id="CartPole-v1"), 2, [0, 1]),
            "test-exp",
            "named-actor",
            address,
            credentials=trusted,
            backoff=Backoff(0.01, 0.1),
            actor_index=index,
            tls_server_name="localhost",
        )
        thread = threading.Thread(target=lambda: asyncio.run(client.run()), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while learner.runtime.env_steps <= 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert learner.runtime.env_steps > 50 and client.connections == 1
        learner.runtime.finish("max_env_steps")
        thread.join(30)
    finally:
        stop_learner(learner)
