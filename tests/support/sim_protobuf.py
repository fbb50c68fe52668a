"""Kubernetes' protobuf encoding, as far as the simulated API server (:mod:`support.sim_apiserver`)
needs it: client-go's typed clients send some objects that way (helm's release Secrets,
``kubectl create namespace``, ``kubectl drain``'s evictions and deletions), and clients ask for
the OpenAPI v2 document in it. As kubernetes.io's "API Concepts: Protobuf encoding" documents
it, a body is the four bytes ``k8s\\0`` and a runtime.Unknown envelope (typeMeta, raw bytes,
content type) around the object's own message; the wire format is protobuf's (varints and
length-delimited fields), the field numbers those of Kubernetes' generated.proto files.
"""

from __future__ import annotations

import base64
from typing import Any


class ProtobufError(ValueError):
    """A body this module cannot decode."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def pb_string(number: int, text: str) -> bytes:
    return pb_field(number, text.encode())


def _pb_parse(data: bytes) -> dict[int, list]:
    """A protobuf message's fields: number -> values (varints as ints, the rest as bytes)."""
    out: dict[int, list] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value: Any = varint()
        elif wire == 2:
            length = varint()
            value, i = data[i : i + length], i + length
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ProtobufError(f"protobuf wire type {wire} not supported")
        out.setdefault(number, []).append(value)
    return out


def _pb_map(entries: list[bytes], text: bool = True) -> dict:
    out = {}
    for entry in entries:
        fields = _pb_parse(entry)
        key = fields.get(1, [b""])[0].decode()
        value = fields.get(2, [b""])[0]
        out[key] = value.decode() if text else base64.b64encode(value).decode()
    return out


def _pb_object_meta(data: bytes) -> dict:
    f = _pb_parse(data)
    meta: dict[str, Any] = {}
    for number, key in (
        (1, "name"),
        (2, "generateName"),
        (3, "namespace"),
        (5, "uid"),
        (6, "resourceVersion"),
    ):
        if f.get(number) and f[number][0]:
            meta[key] = f[number][0].decode()
    if f.get(11):
        meta["labels"] = _pb_map(f[11])
    if f.get(12):
        meta["annotations"] = _pb_map(f[12])
    if f.get(14):
        meta["finalizers"] = [v.decode() for v in f[14]]
    return meta


def _pb_delete_options(data: bytes) -> dict:
    """DeleteOptions: gracePeriodSeconds = 1 (int64), propagationPolicy = 4."""
    options = _pb_parse(data)
    out: dict[str, Any] = {}
    if options.get(1):
        grace = options[1][0]
        out["gracePeriodSeconds"] = grace - (1 << 64) if grace >= 1 << 63 else grace
    if options.get(4):
        out["propagationPolicy"] = options[4][0].decode()
    return out


def decode_protobuf(raw: bytes) -> dict:
    """A Secret, ConfigMap, Namespace or Eviction sent in Kubernetes' protobuf encoding (as
    client-go's typed clients send them: helm's release storage, kubectl create namespace,
    kubectl drain): the ``k8s\\0`` magic, a runtime.Unknown envelope, and the object's
    generated.proto message."""
    if not raw.startswith(b"k8s\x00"):
        raise ProtobufError("not a Kubernetes protobuf body")
    envelope = _pb_parse(raw[4:])
    type_meta = _pb_parse(envelope.get(1, [b""])[0])
    api_version = type_meta.get(1, [b""])[0].decode()
    kind = type_meta.get(2, [b""])[0].decode()
    if kind == "DeleteOptions":
        return {
            "apiVersion": api_version,
            "kind": kind,
            **_pb_delete_options(envelope.get(2, [b""])[0]),
        }
    body = _pb_parse(envelope.get(2, [b""])[0])
    meta = body.get(1, [b""])[0]
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": _pb_object_meta(meta if isinstance(meta, bytes) else b""),
    }
    if kind == "Secret":
        if body.get(2):
            obj["data"] = _pb_map(body[2], text=False)
        if body.get(3):
            obj["type"] = body[3][0].decode()
        if body.get(4):
            obj["stringData"] = _pb_map(body[4])
    elif kind == "ConfigMap":
        if body.get(2):
            obj["data"] = _pb_map(body[2])
        if body.get(3):
            obj["binaryData"] = _pb_map(body[3], text=False)
    elif kind == "Namespace":
        pass  # metadata is all kubectl create namespace sends
    elif kind == "Eviction":
        obj["deleteOptions"] = _pb_delete_options(body.get(2, [b""])[0])
    else:
        raise ProtobufError(f"protobuf {kind} is not decoded here: send JSON")
    return obj
