"""The field reference pages, ``docs/reference/experiment.md`` and ``docs/reference/status.md``,
generated from the Experiment CRD's own ``openAPIV3Schema``
(:func:`seedrl.service.operator.crd.crd`).

The CRD's schema is built from the dataclasses and ``param(...)`` declarations of
:mod:`seedrl.common.config` (:mod:`seedrl.common.schema`), so walking it documents every field by
the path the API server validates, with the type, default, bounds and doc the cluster enforces;
what a schema cannot carry comes from the declarations themselves: the defaults that depend on
another field (``default_by``), and the learner's status document
(:mod:`seedrl.common.learner_status`), which the operator copies part of into ``status``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Iterator
from typing import Any

from seedrl.common import config, learner_status
from seedrl.common.schema import dataclass_schema
from seedrl.service.generate import markdown as md
from seedrl.service.operator import crd

#: The pages, relative to the repository root.
EXPERIMENT_PAGE = "docs/reference/experiment.md"
STATUS_PAGE = "docs/reference/status.md"

_HEADER = ("Field", "Type", "Default", "Allowed", "Description")


@dataclasses.dataclass(frozen=True)
class Section:
    """One object of the schema that lists its properties: a heading and a table on the page.

    Attributes:
      path: its dotted path in the document (``spec.agent.vtrace``; ``[]`` marks the items of
        an array, ``status.conditions[]``).
      node: its schema.
      default: the default the API server gives it (its fields' effective defaults when the
        section's own default sets them), or None.
    """

    path: str
    node: dict[str, Any]
    default: Any


def openapi_schema() -> dict[str, Any]:
    """The CRD's whole ``openAPIV3Schema`` (apiVersion, kind, metadata, spec, status)."""
    version = crd.crd()["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]


def sections(node: dict[str, Any], path: str, default: Any = None) -> Iterator[Section]:
    """Every section under ``node`` (itself first), depth first in declaration order."""
    yield Section(path, node, default)
    for key, child in node.get("properties", {}).items():
        inner = _effective_default(child, key, default)
        if "properties" in child:
            yield from sections(child, _join(path, key), inner)
        items = child.get("items", {})
        if child.get("type") == "array" and "properties" in items:
            yield from sections(items, _join(path, key) + "[]")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _effective_default(child: dict[str, Any], key: str, parent_default: Any) -> Any:
    """The default of a property: what its section's default sets it to, else its own (the API
    server fills in the section's default first, then the defaults of what it leaves out)."""
    if isinstance(parent_default, dict) and key in parent_default:
        return parent_default[key]
    return child.get("default")


def type_name(node: dict[str, Any]) -> str:
    """The type of a schema node in words: ``integer``, ``array of string``, ``map of string``,
    ``string (date-time) or null``."""
    kind = node.get("type", "any")
    if kind == "array":
        out = f"array of {type_name(node.get('items', {}))}"
    elif kind == "object" and "additionalProperties" in node:
        out = f"map of {type_name(node['additionalProperties'])}"
    elif kind == "object" and node.get("x-kubernetes-preserve-unknown-fields"):
        out = "object (any keys)"
    else:
        out = f"{kind} ({node['format']})" if node.get("format") else kind
    return f"{out} or null" if node.get("nullable") else out


def _number(value: Any) -> str:
    return json.dumps(value)


def allowed(node: dict[str, Any]) -> str:
    """The node's bounds, choices, pattern and sizes in words (Markdown)."""
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(md.code(json.dumps(v)) for v in node["enum"]))
    # The int64 range of every integer is the type's, said once on the page (no schema states it).
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None:
        parts.append(f"{'>' if node.get('exclusiveMinimum') else '≥'} {_number(low)}")
    if high is not None:
        parts.append(f"≤ {_number(high)}")
    choices = re.fullmatch(r"\^\(\?:([\w.-]+(?:\|[\w.-]+)*)\)\$", node.get("pattern", ""))
    if choices:
        # A nullable choice, which the CRD states as a pattern (an enum would refuse null).
        parts.append("one of " + ", ".join(md.code(json.dumps(v)) for v in choices[1].split("|")))
    elif "pattern" in node:
        parts.append(f"matches {md.code(node['pattern'])}")
    if "maxLength" in node:
        parts.append(f"at most {node['maxLength']} characters")
    if "minItems" in node and "maxItems" in node:
        parts.append(f"{node['minItems']} to {node['maxItems']} items")
    elif "minItems" in node:
        parts.append(f"at least {node['minItems']} items")
    elif "maxItems" in node:
        parts.append(f"at most {node['maxItems']} items")
    inner = node.get("items") or node.get("additionalProperties")
    if isinstance(inner, dict) and inner.get("type") not in ("object", "array"):
        each = allowed(inner)
        if each:
            parts.append(f"each {each}")
    return "; ".join(parts)


def _dependent_defaults() -> dict[str, str]:
    """The defaults declared with ``default_by``, in words, by dotted path: the schema has no
    default for them (the operator's parse fills them in from the field they depend on)."""
    out = {}
    for path, f in config.dependent_default_fields(config.Experiment):
        source, by_value = f.metadata["default_by"]
        cases = [
            f"{md.code(json.dumps(v))} if {md.code(source)} is {md.code(json.dumps(k))}"
            for k, v in by_value.items()
        ]
        out[".".join(path)] = "; ".join(cases) + f"; else {md.code(json.dumps(f.default))}"
    return out


def _default_cell(
    path: str, child: dict[str, Any], default: Any, required: bool, dependent: dict[str, str]
) -> str:
    if path in dependent:
        return dependent[path]
    if required:
        return "required"
    if "properties" in child:
        return ""  # a section: each of its fields says its own
    if default is not None:
        return md.code(json.dumps(default))
    return md.code("null") if child.get("nullable") else ""


def section_markdown(
    section: Section, dependent: dict[str, str], depth: int, defaults: bool = True
) -> str:
    """One section: a heading, its description and rules, and a table of its properties
    (without the Default column where nothing has one: ``status``, which only the operator
    writes)."""
    node = section.node
    level = "#" * min(max(depth, 2), 4)  # spec.env and spec at one level: a flat outline
    out = [f"{level} {md.code(section.path) if section.path else 'The document'}\n"]
    if node.get("description"):
        out.append(md.text(node["description"]) + "\n")
    rules = node.get("x-kubernetes-validations", [])
    if rules:
        out.append("Rules the API server checks:\n")
        out.append("\n".join(f"- {md.text(rule['message'])}" for rule in rules) + "\n")
    rows = []
    required = set(node.get("required", ()))
    for key, child in node.get("properties", {}).items():
        path = _join(section.path, key)
        default = _effective_default(child, key, section.default)
        description = md.text(child.get("description", ""))
        if "properties" in child or "properties" in child.get("items", {}):
            description += " (fields below)" if description else "Fields below."
        if not defaults and key in required:
            description += " Always present."  # said in the Default column elsewhere
        row = [md.code(path), type_name(child), allowed(child), description]
        if defaults:
            row.insert(2, _default_cell(path, child, default, key in required, dependent))
        rows.append(row)
    if rows:
        out.append(md.table(_HEADER if defaults else _HEADER[:2] + _HEADER[3:], rows))
    return "\n".join(out)


def _sections_markdown(node: dict[str, Any], path: str, defaults: bool = True) -> str:
    dependent = _dependent_defaults()
    return "\n".join(
        section_markdown(s, dependent, s.path.count(".") + 1 if s.path else 0, defaults)
        for s in sections(node, path, node.get("default"))
    )


_EXPERIMENT_INTRO = """\
# Experiment fields

Every field of an Experiment ({api_version}, kind {kind}), by its path in the document
(`spec.agent.vtrace.discount` is `discount` under `vtrace` under `agent` under `spec`), with its
type, its default, the values it allows and what it means. The same declarations generate the
CRD's schema (what the API server checks and fills in), the experiment chart's values and schema,
and what `seedrl validate` checks, so this page, the cluster and `seedrl train` agree.

- **Default**: what a document that leaves the field out gets. *required*: there is none.
  A default that depends on another field (the agent's, say) is given case by case; the API
  server leaves such a field out and the operator fills it in.
- **Allowed**: bounds, choices, patterns and sizes. Every integer is also an int64
  (−2^63 to 2^63−1); a pattern must match the whole value.
- Rules across fields that no schema can say (ppo's minibatches dividing the batch size, say)
  are checked by `seedrl validate`, `seedrl train` and the operator, which name the field at
  fault.
"""


def experiment_page() -> str:
    """``docs/reference/experiment.md``: every Experiment field, section by section."""
    schema = openapi_schema()
    top = {**schema, "properties": {k: v for k, v in schema["properties"].items() if k != "status"}}
    # The CRD leaves metadata a bare object (Kubernetes validates it, and a CRD may constrain
    # only the name); the keys seedrl itself checks come from their own declaration.
    metadata = {
        **dataclass_schema(config.Metadata),
        "description": f"{config.Metadata.__doc__} The API server validates it itself; seedrl "
        "checks these keys when it parses an Experiment (`seedrl validate`, the operator).",
    }
    # apiVersion and kind likewise: Kubernetes checks them, seedrl's parse allows one value.
    declared = dataclass_schema(config.Experiment)["properties"]
    root = {
        **top,
        "properties": {
            **top["properties"],
            "apiVersion": declared["apiVersion"],
            "kind": declared["kind"],
            "metadata": metadata,
        },
    }
    body = _sections_markdown(root, "")
    intro = _EXPERIMENT_INTRO.format(
        api_version=md.code(f"apiVersion: {config.API_VERSION}"), kind=md.code(config.KIND)
    )
    return md.generated_line("the dataclasses of `common/config/` (the CRD's schema)") + (
        f"\n{intro}\n{body}"
    )


def _python_type(tp: Any) -> str:
    """A status field's Python type in the words :func:`type_name` uses for schemas."""
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    args = typing.get_args(tp)
    if type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return f"{_python_type(inner)} or null"
    if typing.get_origin(tp) is dict:
        return f"map of {_python_type(args[1])}"
    return names.get(tp, str(tp))


def learner_status_markdown() -> str:
    """The learner's status document (``GET /status``, ``status.json``), field by field."""
    hints = typing.get_type_hints(learner_status.LearnerStatus)
    rows = []
    for f in dataclasses.fields(learner_status.LearnerStatus):
        if f.default is not dataclasses.MISSING:
            default = md.code(json.dumps(f.default))
        elif f.default_factory is not dataclasses.MISSING:
            default = md.code(json.dumps(f.default_factory()))
        else:
            default = "required"
        key = f.metadata["experiment_key"]
        rows.append(
            (
                md.code(f.name),
                _python_type(hints[f.name]),
                default,
                md.code(f"status.{key}") if key else "",
                md.text(f.metadata["doc"]),
            )
        )
    states = ", ".join(md.code(s) for s in learner_status.STATES)
    return "\n".join(
        [
            "## The learner's status document\n",
            md.paragraphs(learner_status.__doc__ or ""),
            f"`state` is one of {states}, in the order a run goes through them.\n",
            md.table(("Key", "Type", "Default", "Copied to", "Description"), rows),
        ]
    )


_STATUS_INTRO = """\
# Experiment status

What the operator reports in an Experiment's `status` (`kubectl get experiment NAME -o yaml`,
`seedrl status`), and the learner's own status document that part of it is copied from. Only
the operator writes `status`; a field it has nothing for yet is left out.
"""


def status_page() -> str:
    """``docs/reference/status.md``: the CRD's ``status`` and the learner's status document."""
    status = openapi_schema()["properties"]["status"]
    return md.generated_line(
        "the CRD's status schema (`service/operator/crd.py`) and `common/learner_status.py`"
    ) + "\n".join(
        [
            f"\n{_STATUS_INTRO}",
            _sections_markdown(status, "status", defaults=False),
            learner_status_markdown(),
        ]
    )


def outputs() -> dict[str, str]:
    """Both pages and their text."""
    return {EXPERIMENT_PAGE: experiment_page(), STATUS_PAGE: status_page()}
