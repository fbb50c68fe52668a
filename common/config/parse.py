"""The generic parser: a plain document into a dataclass of :func:`~.fields.param` fields.

Types and each field's own constraints are checked here, for any such dataclass (an Experiment
section, the price table); every problem is collected as ``(field path, reason)`` so that one
:class:`~.fields.ConfigError` names them all. Rules across fields of the Experiment are in
:mod:`.validate`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from seedrl.common.config.fields import INT64_MAX, INT64_MIN, ConfigError, field_key

T = TypeVar("T")


#: Fields an earlier release had, by (section class, key): what to write instead. Each is
#: refused (its meaning changed, so reading it silently would train something else), with this.
_RETIRED = {
    ("R2D2Config", "sequenceLength"): (
        "; it counted the burn-in: now trainLength counts the trained steps and burnIn "
        "precedes them, so sequenceLength S with burnIn B is trainLength S - B and "
        "sequencePeriod S - B"
    ),
}


class _Invalid:
    """Marks a value that failed parsing, so that parsing can go on and report everything."""


#: What :func:`parse_dataclass` returns for a section that failed: its problems are listed and
#: the rules across fields (:mod:`.validate`) are not checked on it.
INVALID = _Invalid()


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _fmt(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def _check_constraints(
    value: Any, meta: Mapping[str, Any], path: str, problems: list[tuple[str, str]]
) -> None:
    if isinstance(value, list):
        if meta.get("min_items") is not None and len(value) < meta["min_items"]:
            problems.append(
                (path, f"must have at least {meta['min_items']} item(s), got {len(value)}")
            )
        if meta.get("max_items") is not None and len(value) > meta["max_items"]:
            problems.append(
                (path, f"must have at most {meta['max_items']} item(s), got {len(value)}")
            )
        for i, item in enumerate(value):
            _check_scalar(item, meta, f"{path}[{i}]", problems)
        return
    _check_scalar(value, meta, path, problems)


def _check_scalar(
    value: Any, meta: Mapping[str, Any], path: str, problems: list[tuple[str, str]]
) -> None:
    if value is None or isinstance(value, (dict, list)):
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        problems.append((path, f"must be one of {', '.join(map(str, choices))}; got {value!r}"))
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if meta.get("ge") is not None and value < meta["ge"]:
            problems.append((path, f"must be >= {_fmt(meta['ge'])}, got {_fmt(value)}"))
        if meta.get("gt") is not None and value <= meta["gt"]:
            problems.append((path, f"must be > {_fmt(meta['gt'])}, got {_fmt(value)}"))
        if meta.get("le") is not None and value > meta["le"]:
            problems.append((path, f"must be <= {_fmt(meta['le'])}, got {_fmt(value)}"))
        if value != value or value in (float("inf"), float("-inf")):
            problems.append((path, f"must be a finite number, got {value}"))
    if isinstance(value, str):
        if meta.get("max_len") is not None and len(value) > meta["max_len"]:
            problems.append(
                (path, f"must be at most {meta['max_len']} characters, got {len(value)}")
            )
        elif meta.get("pattern") and not re.fullmatch(meta["pattern"], value):
            hint = meta.get("pattern_hint") or "lowercase letters, digits and '-'"
            problems.append((path, f"must match {meta['pattern']} ({hint}), got {value!r}"))


def _is_json_like(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, list):
        return all(_is_json_like(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_like(v) for k, v in value.items())
    return False


def _parse_value(tp: Any, value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """Converts one document value to the declared type, recording problems instead of raising."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if value is None:
            return None
        return _parse_value(inner[0], value, path, problems)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return parse_dataclass(tp, value, path, problems)
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append((path, f"must be true or false, got {_describe(value)}"))
        return INVALID
    if tp is int:
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ):
            problems.append((path, f"must be an integer, got {_describe(value)}"))
            return INVALID
        if not INT64_MIN <= value <= INT64_MAX:
            # The learner's counters and the CRD are int64: a larger value would overflow them.
            problems.append(
                (path, f"must be an integer within int64 (-2^63 to 2^63-1), got {_fmt(value)}")
            )
            return INVALID
        return int(value)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        problems.append((path, f"must be a number, got {_describe(value)}"))
        return INVALID
    if tp is str:
        if isinstance(value, str):
            return value
        problems.append((path, f"must be a string, got {_describe(value)}"))
        return INVALID
    if origin is list:
        if not isinstance(value, list):
            problems.append((path, f"must be a list, got {_describe(value)}"))
            return INVALID
        if dataclasses.is_dataclass(args[0]) and None in value:
            # An item is an object: null is no item's defaults (the API server refuses it).
            i = value.index(None)
            problems.append((f"{path}[{i}]", "must be a mapping, got NoneType None"))
            return INVALID
        items = [_parse_value(args[0], v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        return INVALID if any(i is INVALID for i in items) else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.append((path, f"must be a mapping, got {_describe(value)}"))
            return INVALID
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                problems.append((path, f"keys must be strings, got {_describe(k)}"))
                return INVALID
            if v is None and args[1] is not Any:
                continue  # a null entry is no entry, as the API server prunes it
            if args[1] is Any:
                if not _is_json_like(v):
                    problems.append(
                        (
                            f"{path}.{k}",
                            f"must be plain data (numbers, strings, "
                            f"booleans, lists, mappings), got "
                            f"{_describe(v)}",
                        )
                    )
                    return INVALID
                out[k] = v
            else:
                out[k] = _parse_value(args[1], v, f"{path}.{k}", problems)
        return out
    raise TypeError(f"unsupported config type {tp!r} at {path}")  # a bug in this module


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)


def parse_dataclass(cls: type, value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """``value`` (a mapping, or None for all defaults) as dataclass ``cls`` at document ``path``;
    every problem found is appended to ``problems`` and :data:`INVALID` returned for them."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.append((path or "<document>", f"must be a mapping, got {_describe(value)}"))
        return INVALID
    hints = typing.get_type_hints(cls)
    fields = {field_key(f): f for f in dataclasses.fields(cls)}
    prefix = f"{path}." if path else ""
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = (
                f"; did you mean {close[0]}?" if close else f"; known fields: {', '.join(fields)}"
            )
            hint = _RETIRED.get((cls.__name__, key), hint)
            problems.append((f"{prefix}{key}", "unknown field" + hint))
    kwargs = {}
    ok = True
    for key, f in fields.items():
        fpath = f"{prefix}{key}"
        # Null is the field's absence unless the field may be null: the API server prunes such
        # a null and fills in the default (so does helm when it merges values): a section's
        # own default, not its class's (spec.learner.resources asks for 4 CPUs, not 1). A
        # dependent default's null is resolved by parse_experiment. A required section's null
        # is parsed as an empty one below, which names the required fields it lacks.
        tp = hints[f.name]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if key not in value or (
            value[key] is None
            and (f.metadata.get("default_by") or not _nullable(tp))
            and not (required and dataclasses.is_dataclass(tp))
        ):
            if required:
                problems.append((fpath, "required field is missing"))
                ok = False
            continue
        parsed = _parse_value(tp, value[key], fpath, problems)
        if parsed is INVALID:
            ok = False
            continue
        _check_constraints(parsed, f.metadata, fpath, problems)
        kwargs[f.name] = parsed
    return cls(**kwargs) if ok else INVALID


def parse_section(cls: type[T], value: Any, path: str, problems: list[tuple[str, str]]) -> T | None:
    """Parses ``value`` into ``cls``, any dataclass whose fields are declared with
    :func:`param` (an Experiment section, or another document such as the price table), with
    the Experiment's rules: camelCase keys, unknown keys refused, types and constraints checked.

    Appends ``(field path, reason)`` to ``problems`` rather than raising, so that a caller can
    add checks of its own before reporting everything at once; returns None when invalid.
    """
    out = parse_dataclass(cls, value, path, problems)
    return None if out is INVALID else out


def parse_document(cls: type[T], value: Any, path: str = "") -> T:
    """:func:`parse_section` that raises.

    Raises:
      ConfigError: naming every problem's field path.
    """
    problems: list[tuple[str, str]] = []
    out = parse_section(cls, value, path, problems)
    if problems or out is None:
        raise ConfigError(problems or [(path or "<document>", "invalid")])
    return out
