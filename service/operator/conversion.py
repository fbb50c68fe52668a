"""The Experiment's API versions and the conversion webhook between them.

``v1alpha1`` is what every release so far served and stored; ``v1beta1`` is the same spec
without the fields ``v1alpha1`` retired (:mod:`seedrl.common.config.retired`). With both in the
CRD (:func:`seedrl.service.operator.crd.versioned_crd`, ``v1beta1`` stored), the API server asks
this webhook to convert an object whenever it is read or written in a version other than the
one it is stored in (Kubernetes, "Versions in CustomResourceDefinitions": a ``ConversionReview``
of ``apiextensions.k8s.io/v1`` POSTed over TLS, answered with the converted objects in the same
order, or a failure that fails the request).

- ``v1alpha1`` to ``v1beta1``: retired fields rewritten as their release meant them
  (:func:`~seedrl.common.config.retired.upgrade_spec`); everything else as it is.
- ``v1beta1`` to ``v1alpha1``: as it is (``v1alpha1`` has every ``v1beta1`` field), but for
  the retired fields the other way kept in an annotation (:data:`ANNOTATION`), put back
  while what they became is unchanged: the API server converts an object to the version it
  is written in and back to the one it is stored in, so without this a ``kubectl scale``
  through ``v1beta1`` would rewrite a stored ``v1alpha1`` object in fields an earlier release
  cannot read after a rollback.

Migrating what is stored: once the CRD stores ``v1beta1``, read and write back every
Experiment (``kubectl get experiments.v1beta1.seedrl.dev -A -o json | kubectl replace -f -``),
then drop ``v1alpha1`` from the CRD's ``status.storedVersions``; a later release may then stop
serving ``v1alpha1``.
"""

from __future__ import annotations

import copy
import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping

from seedrl.common.config import GROUP
from seedrl.common.config.retired import upgrade_spec

log = logging.getLogger(__name__)

#: The versions served, oldest first; the last is stored.
VERSIONS = ("v1alpha1", "v1beta1")
STORAGE_VERSION = VERSIONS[-1]
#: Where the webhook answers.
PATH = "/convert"
#: The largest ConversionReview read (the API server sends at most a list's page of objects).
MAX_BODY = 64 * 1024 * 1024


class ConversionError(ValueError):
    """An object that cannot be converted (the message says why)."""


#: Where a ``v1alpha1`` object's retired fields are kept while it is read as ``v1beta1``.
ANNOTATION = f"{GROUP}/v1alpha1-fields"
#: The keys each retired field's rewrite touches, by section: what the annotation keeps.
ROUND_TRIP: dict[tuple[str, ...], tuple[str, ...]] = {
    ("agent", "r2d2"): ("sequenceLength", "trainLength", "burnIn", "sequencePeriod"),
}


def _section(spec: Any, path: tuple[str, ...]) -> dict[str, Any] | None:
    for key in path:
        spec = spec.get(key) if isinstance(spec, dict) else None
    return spec if isinstance(spec, dict) else None


def _nested(path: tuple[str, ...], value: dict[str, Any]) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def _to_v1beta1(out: dict[str, Any]) -> None:
    """Retired fields rewritten as meant; what they were, kept in :data:`ANNOTATION`."""
    spec = out["spec"]
    out["spec"], notes = upgrade_spec(spec)
    kept = {}
    for path, keys in ROUND_TRIP.items():
        before, after = _section(spec, path), _section(out["spec"], path)
        if notes and before is not None and before != after:
            kept[".".join(path)] = {k: before[k] for k in keys if k in before}
    if kept:
        metadata = out.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[ANNOTATION] = json.dumps(kept, sort_keys=True)


def _to_v1alpha1(out: dict[str, Any]) -> None:
    """Retired fields put back from :data:`ANNOTATION` where ``v1beta1`` still says what
    their rewrite made of them, so that an object written through ``v1beta1`` (a ``kubectl
    scale``, a suspend) keeps the form an earlier release reads after a rollback."""
    annotations = (out.get("metadata") or {}).get("annotations") or {}
    if ANNOTATION not in annotations:
        return
    try:
        kept = json.loads(annotations.pop(ANNOTATION))
    except ValueError:
        kept = {}
    if not annotations:
        out["metadata"].pop("annotations")
    for dotted, original in kept.items() if isinstance(kept, dict) else ():
        path = tuple(dotted.split("."))
        keys = ROUND_TRIP.get(path)
        section = _section(out.get("spec"), path)
        if keys is None or section is None or not isinstance(original, dict):
            continue
        made = _section(upgrade_spec(_nested(path, dict(original)))[0], path) or {}
        if all(section.get(k) == made.get(k) for k in keys):
            for k in keys:
                if k in original:
                    section[k] = original[k]
                else:
                    section.pop(k, None)


def convert(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (an Experiment) in ``api_version`` (``seedrl.dev/v1beta1``)."""
    group, _, version = api_version.partition("/")
    if group != GROUP or version not in VERSIONS:
        raise ConversionError(f"cannot convert to {api_version}: served are {VERSIONS}")
    source = str(obj.get("apiVersion") or "").partition("/")[2]
    if source not in VERSIONS:
        raise ConversionError(f"cannot convert from {obj.get('apiVersion') or 'no apiVersion'}")
    out = copy.deepcopy(dict(obj))
    if source != version and isinstance(out.get("spec"), dict):
        if version == VERSIONS[0]:
            _to_v1alpha1(out)
        else:
            _to_v1beta1(out)
    out["apiVersion"] = api_version
    return out


def review(request: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to a ``ConversionReview``: every object converted, or a failure naming the
    first that could not be (the API server then fails the whole request)."""
    body = request.get("request") or {}
    response: dict[str, Any] = {"uid": body.get("uid", "")}
    try:
        desired = str(body.get("desiredAPIVersion") or "")
        response["convertedObjects"] = [convert(o, desired) for o in body.get("objects") or []]
        response["result"] = {"status": "Success"}
    except ConversionError as exc:
        response["convertedObjects"] = []
        response["result"] = {"status": "Failure", "message": str(exc)}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": response,
    }


class ConversionWebhook:
    """The webhook over HTTPS (``POST /convert``), in a daemon thread.

    Args:
      host, port: where to listen (port 0: any free one, :attr:`port` says which).
      cert, key: PEM files of its serving certificate (the CRD's ``caBundle`` signs it) and key.
    """

    def __init__(self, host: str, port: int, cert: Path, key: Path):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                if self.path.split("?")[0] != PATH or not 0 < length <= MAX_BODY:
                    self.send_error(404 if self.path.split("?")[0] != PATH else 413)
                    return
                try:
                    answer = review(json.loads(self.rfile.read(length)))
                except (ValueError, AttributeError) as exc:
                    self.send_error(400, f"not a ConversionReview: {exc}")
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("conversion webhook: " + format, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.reload()
        self.server.socket = self.context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])

    def reload(self) -> None:
        """Serves the certificate and key now in the files (a renewal) to every connection
        accepted from here on."""
        self.context.load_cert_chain(str(self.cert), str(self.key))

    def start(self) -> "ConversionWebhook":
        """Answers from a daemon thread until :meth:`stop`."""
        threading.Thread(
            target=self.server.serve_forever, daemon=True, name="conversion-webhook"
        ).start()
        return self

    def stop(self) -> None:
        """Stops answering and frees the port."""
        self.server.shutdown()
        self.server.server_close()
