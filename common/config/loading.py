"""An Experiment from a file and back: ``--set`` overrides (:func:`apply_overrides`),
:func:`load_experiment`, and :func:`to_document` / :func:`dump_experiment`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import yaml

from seedrl.common.config.experiment import Experiment
from seedrl.common.config.fields import ConfigError, field_key
from seedrl.common.config.validate import parse_experiment
from seedrl.common.config.yaml_io import yaml_error_line, yaml_load_all, read_yaml_file


def set_path(document: dict, dotted: str, value: Any) -> None:
    """Sets ``a.b.c`` in a plain nested dict, creating mappings on the way (like helm --set)."""
    parts = dotted.split(".")
    if not dotted or any(not p for p in parts):
        raise ConfigError([(dotted or "<override>", "override path must look like a.b.c")])
    node = document
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(
                [
                    (
                        ".".join(parts[: i + 1]),
                        f"cannot set a field inside a non-mapping value {nxt!r}",
                    )
                ]
            )
        node = nxt
    node[parts[-1]] = value


def apply_overrides(document: Any, overrides: Sequence[str]) -> Any:
    """Applies ``path=value`` overrides to a plain document; values are parsed as YAML."""
    if not isinstance(document, dict):
        return document
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError([(item, "override must be written path=value")])
        try:
            docs = yaml_load_all(raw) if raw.strip() else [""]
            value = docs[0] if len(docs) == 1 else raw
        except yaml.YAMLError as exc:
            raise ConfigError(
                [(path, f"override value is not valid YAML: {yaml_error_line(exc)}")]
            ) from None
        set_path(document, path.strip(), value)
    return document


def load_experiment(path: str, overrides: Sequence[str] = ()) -> Experiment:
    """Reads an Experiment YAML file, applies ``--set`` overrides and validates it."""
    document = apply_overrides(read_yaml_file(path, "Experiment"), overrides)
    return parse_experiment(document)


def to_document(obj: Any) -> Any:
    """Turns an Experiment (or any section of one) back into plain camelCase data."""
    if dataclasses.is_dataclass(obj):
        return {field_key(f): to_document(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_document(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_document(v) for k, v in obj.items()}
    return obj


def dump_experiment(exp: Experiment) -> str:
    """The resolved Experiment (every default filled in) as YAML text."""
    return yaml.safe_dump(to_document(exp), sort_keys=False)
