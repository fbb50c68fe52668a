"""The container registries the tests' kubelet (:mod:`support.kubelet`) pulls from: the
images a test declares exist, and the registries that want credentials.

A pull ("Images": image pull policy; "Pull an Image from a Private Registry") fails as
containerd's does: an unknown image with NotFound, a private registry's image without an
``imagePullSecrets`` entry whose ``.dockerconfigjson`` (or ``.dockercfg``) has that registry's
credentials with 401 Unauthorized. An image the node already holds is not pulled again under
``IfNotPresent`` (the default unless the tag is ``latest``), as the kubelet does.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field


def normalize(image: str) -> str:
    """The full reference: ``docker.io/library/NAME:latest`` for a bare name, as containerd
    resolves it."""
    name, digest = (image.split("@", 1) + [""])[:2]
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    if not digest and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def registry_of(image: str) -> str:
    """The registry host of an image reference."""
    return normalize(image).split("/", 1)[0]


class PullError(Exception):
    """A failed pull, with the message the kubelet reports under ErrImagePull."""


@dataclass
class Registries:
    """What can be pulled.

    Args:
      images: image reference -> the command it runs when the container names none (its
        ENTRYPOINT and CMD); the processes run on this machine, so e.g. ``["python", "-m",
        "seedrl.learner"]``.
      credentials: registry host -> (username, password) it requires.
    """

    images: dict[str, list[str]] = field(default_factory=dict)
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)

    def entrypoint(self, image: str) -> list[str]:
        """The command of a pullable image."""
        known = {normalize(k): v for k, v in self.images.items()}
        return list(known.get(normalize(image), []))

    def pull(self, image: str, pull_secrets: list[dict]) -> None:
        """Pulls ``image`` with these Secrets' credentials; raises PullError as containerd."""
        ref = normalize(image)
        known = {normalize(k) for k in self.images}
        host = registry_of(image)
        prefix = f'failed to pull and unpack image "{ref}": failed to resolve reference "{ref}"'
        wanted = self.credentials.get(host)
        if wanted is not None and wanted not in _credentials(pull_secrets, host):
            raise PullError(
                f"rpc error: code = Unknown desc = {prefix}: pull access denied, repository "
                "does not exist or may require authorization: server message: "
                "insufficient_scope: authorization failed: 401 Unauthorized"
            )
        if ref not in known:
            raise PullError(f"rpc error: code = NotFound desc = {prefix}: {ref}: not found")


def _credentials(secrets: list[dict], host: str) -> list[tuple[str, str]]:
    found = []
    for secret in secrets:
        data = secret.get("data") or {}
        raw = data.get(".dockerconfigjson") or data.get(".dockercfg")
        if not raw:
            continue
        try:
            config = json.loads(base64.b64decode(raw))
        except ValueError:
            continue
        auths = config.get("auths", config) if isinstance(config, dict) else {}
        for server, entry in auths.items():
            if server.removeprefix("https://").removeprefix("http://").split("/")[0] != host:
                continue
            user, password = entry.get("username"), entry.get("password")
            if "auth" in entry:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            found.append((user, password))
    return found


__all__ = ["PullError", "Registries", "normalize", "registry_of"]
