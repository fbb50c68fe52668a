"""Schemas of the Experiment document, generated from the dataclasses of :mod:`.config`.

The dataclasses are the one source of truth for every field: the CRD's structural
``openAPIV3Schema`` (``k8s/crd/``, written by ``make generate``), the Helm chart's
``values.schema.json`` and the local validator all come from them. This module is pure
and imports nothing of ours but :mod:`seedrl.common.config`.

Two flavours:

- :func:`spec_schema` / :func:`experiment_schema`: OpenAPI v3.0 as Kubernetes wants it in a CRD
  (structural: every node has a ``type``; ``nullable`` for optional values; boolean
  ``exclusiveMinimum``; ``x-kubernetes-preserve-unknown-fields`` for free-form mappings).
- :func:`to_json_schema`: the same tree as JSON Schema draft 2020-12, for ``jsonschema`` and
  for Helm (``nullable`` becomes a type list, ``exclusiveMinimum`` a number).

What a schema cannot say (rules across fields, e.g. ppo's minibatches dividing the batch size)
stays in :func:`seedrl.common.config.parse_experiment`, which the operator runs on every Experiment.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any

from seedrl.common import config

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _doc(cls: type) -> str:
    """A class docstring as one paragraph of text."""
    return " ".join((cls.__doc__ or "").split())


def _type_schema(tp: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The schema of one declared type, with the field's constraints applied."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        out = _type_schema(inner[0], meta)
        out["nullable"] = True
        return out
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return dataclass_schema(tp)
    if tp in _SCALARS:
        out = {"type": _SCALARS[tp]}
        _scalar_constraints(out, meta)
        return out
    if origin is list:
        item_meta = {k: v for k, v in meta.items() if k not in ("min_items", "max_items")}
        out = {"type": "array", "items": _type_schema(args[0], item_meta)}
        if meta.get("min_items") is not None:
            out["minItems"] = meta["min_items"]
        if meta.get("max_items") is not None:
            out["maxItems"] = meta["max_items"]
        return out
    if origin is dict:
        if args[1] is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _type_schema(args[1], {})}
    raise TypeError(f"no schema for config type {tp!r}")  # a bug in seedrl.common.config


def _scalar_constraints(out: dict[str, Any], meta: dict[str, Any]) -> None:
    if meta.get("choices") is not None:
        out["enum"] = list(meta["choices"])
    if out["type"] in ("integer", "number"):
        if meta.get("ge") is not None:
            out["minimum"] = _bound(meta["ge"], out["type"])
        if meta.get("gt") is not None:
            out["minimum"] = _bound(meta["gt"], out["type"])
            out["exclusiveMinimum"] = True
        if meta.get("le") is not None:
            out["maximum"] = _bound(meta["le"], out["type"])
    if out["type"] == "string":
        if meta.get("pattern"):
            # parse_experiment matches the whole string; JSON Schema patterns search.
            out["pattern"] = f"^(?:{meta['pattern']})$"
        if meta.get("max_len") is not None:
            out["maxLength"] = meta["max_len"]


def _bound(value: float, kind: str) -> float:
    """A field's declared bound as the schemas carry it: for an integer field, an integer that
    a float64 holds exactly.

    Kubernetes reads every ``minimum``/``maximum`` as a float64 and refuses a CRD whose bound on
    an integer field is no int64 once read so: 2^63-1 reads as 2^63 ("Maximum boundary value
    must be of type integer"), and 2^53+1 would read as another bound. The CRD states no int64
    range: the API server refuses an integer outside it by the type alone, as
    :func:`parse_experiment` does (:func:`to_json_schema` states it, for JSON Schema).
    """
    if kind == "integer" and (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not config.INT64_MIN <= value <= config.INT64_MAX
        or float(value) != value
    ):
        raise TypeError(
            f"integer bound {value!r} is not an int64 that a float64 holds exactly: declare "
            "no bound where the int64 range is meant"
        )  # a bug in seedrl.common.config
    return value


def _default(f: dataclasses.Field) -> Any:
    """The field's default as plain document data, or MISSING when it has none to declare
    (None for one that depends on another field: the API server must leave it out, for the
    operator's parse to fill in)."""
    if f.metadata.get("default_by"):
        return None
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # The section with only what differs from its class's own defaults (usually
            # nothing): the server fills in the rest from the fields' defaults, so a stored
            # Experiment is as complete as the one `seedrl validate` prints.
            return _differences(value, type(value)())
        return config.to_document(value)
    return dataclasses.MISSING


def _differences(value: Any, base: Any) -> dict[str, Any]:
    """The document keys of dataclass ``value`` whose values differ from ``base``'s."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        mine, theirs = getattr(value, f.name), getattr(base, f.name)
        if dataclasses.is_dataclass(mine):
            nested = _differences(mine, theirs)
            if nested:
                out[config.field_key(f)] = nested
        elif mine != theirs:
            out[config.field_key(f)] = config.to_document(mine)
    return out


def dataclass_schema(cls: type) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one config dataclass (a section of the document)."""
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        key = config.field_key(f)
        prop = _type_schema(hints[f.name], dict(f.metadata))
        if f.metadata.get("default_by"):
            prop["nullable"] = True  # null, as left out: the default for the other field
        doc = f.metadata.get("doc", "")
        if dataclasses.is_dataclass(hints[f.name]):
            # A section: its own docstring says more than the one line on the field.
            doc = f"{doc} {_doc(hints[f.name])}".strip()
        prop = {"description": doc, **prop} if doc else prop
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(key)
        elif default is not None:
            prop["default"] = default
        properties[key] = prop
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    rules = config.cel_rules(cls)
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def without_defaults(schema: Any) -> Any:
    """A copy of a schema with every ``default`` left out: for documents that only a program
    writes (an object's ``status``), where the API server should not fill anything in."""
    if isinstance(schema, dict):
        return {k: without_defaults(v) for k, v in schema.items() if k != "default"}
    if isinstance(schema, list):
        return [without_defaults(v) for v in schema]
    return schema


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI v3 schema of an Experiment's ``spec``, with its defaults."""
    out = dataclass_schema(config.Spec)
    return {"description": _doc(config.Spec), **out}


def experiment_schema(status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CRD's whole ``openAPIV3Schema``: apiVersion, kind, metadata, spec and status.

    Kubernetes validates ``metadata`` itself (a CRD may only constrain name and generateName),
    so it stays a bare object here.

    Args:
      status: the schema of ``status`` (the operator's business); a free-form object if None.
    """
    top = {f.name: f for f in dataclasses.fields(config.Experiment)}
    return {
        "description": _doc(config.Experiment),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": top["api_version"].metadata["doc"]},
            "kind": {"type": "string", "description": top["kind"].metadata["doc"]},
            "metadata": {"type": "object"},
            "spec": {**spec_schema(), "default": {}},
            "status": status
            if status is not None
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def to_json_schema(openapi: dict[str, Any], closed: bool = False) -> dict[str, Any]:
    """Converts a structural OpenAPI v3.0 schema to JSON Schema draft 2020-12.

    ``nullable: true`` becomes a type list with ``"null"``, a boolean ``exclusiveMinimum``
    becomes the numeric form, an integer without a bound gets the int64 range's (which the
    API server enforces by the type alone), and ``x-kubernetes-*`` extensions are dropped (a
    free-form object stays a free-form object). The input is not modified.

    Args:
      openapi: the schema to convert.
      closed: also forbid unknown keys in every object that lists its properties, as
        parse_experiment does (Kubernetes prunes them instead; Helm and local checks reject).
    """
    out = copy.deepcopy(openapi)
    _convert(out, closed)
    metadata = out.get("properties", {}).get("metadata")
    if closed and isinstance(metadata, dict) and "properties" in metadata:
        # An object's metadata is the API server's: a CRD may constrain its name, not close it.
        del metadata["additionalProperties"]
    return out


def _convert(node: Any, closed: bool) -> None:
    if isinstance(node, list):
        for item in node:
            _convert(item, closed)
        return
    if not isinstance(node, dict):
        return
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    if node.get("exclusiveMinimum") is True:
        node["exclusiveMinimum"] = node.pop("minimum")
    if node.get("type") in ("integer", ["integer", "null"]):
        # JSON Schema validators compare integers exactly (Helm's and jsonschema), so here the
        # int64 range can be stated: helm refuses a values file's 1e30 before rendering.
        bounds = {"minimum": config.INT64_MIN, "maximum": config.INT64_MAX}
        if "exclusiveMinimum" in node:
            del bounds["minimum"]
        bounds.update({k: v for k, v in node.items() if k in bounds})
        # Where a declared bound would be (before the default), so the file reads the same.
        rest = {k: node.pop(k) for k in list(node) if k in ("default", *bounds)}
        node.update(bounds)
        node.update({k: v for k, v in rest.items() if k not in bounds})
    for key in [k for k in node if k.startswith("x-kubernetes-")]:
        del node[key]
    if closed and "properties" in node:
        node.setdefault("additionalProperties", False)
    for key, value in node.items():
        if key == "properties":
            for sub in value.values():
                _convert(sub, closed)
        elif key in ("items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"):
            _convert(value, closed)
