"""YAML text into plain data, safely: YAML 1.2 floats, and a guard against documents that
are too large, too deep, or that aliases expand exponentially ("billion laughs").
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from seedrl.common.config.fields import ConfigError


#: Largest Experiment or price file read, in bytes: checked before parsing, so a huge file
#: costs nothing (a real Experiment is a few kilobytes).
MAX_YAML_BYTES = 1 << 20
#: Most values (scalars, lists, mappings) a document may expand to through YAML aliases: a
#: "billion laughs" document is a few hundred bytes that aliases expand exponentially, and
#: everything that walks the parsed document (validation, printing) pays for the expansion.
MAX_YAML_VALUES = 100_000
#: Deepest nesting of lists and mappings accepted (an Experiment nests about 6 deep).
MAX_YAML_DEPTH = 64


class _YAMLBomb(yaml.YAMLError):
    """A document refused for its shape (recursive, too deep, or expanding too far)."""


def _check_expansion(root: yaml.Node) -> None:
    """Refuses a composed document whose aliases recurse, nest too deep, or expand it beyond
    :data:`MAX_YAML_VALUES` values (or twice its distinct values, for a large plain document).

    Composition shares aliased nodes, so this walk is linear in the distinct nodes: each
    node's expanded size is computed once (as an exact integer, however large).
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        line = node.start_mark.line + 1
        if key in active:
            raise _YAMLBomb(f"line {line}: a recursive alias (a value that contains itself)")
        if depth > MAX_YAML_DEPTH:
            raise _YAMLBomb(f"line {line}: nested deeper than {MAX_YAML_DEPTH} levels")
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        active.add(key)
        total = 1 + sum(size(child, depth + 1) for child in children)
        active.discard(key)
        sizes[key] = total
        return total

    expanded = size(root, 0)
    if expanded > max(MAX_YAML_VALUES, 2 * len(sizes)):
        raise _YAMLBomb(
            f"aliases expand the document from {len(sizes)} to {expanded:.3g} "
            f"values, over the limit of {MAX_YAML_VALUES}; write the values out "
            f"instead"
        )


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats: ``3e-4`` is a number, as in kubectl.

    PyYAML follows YAML 1.1, where a float needs a dot (``3.0e-4``), so the usual way of writing
    a learning rate would otherwise arrive as a string. Aliases are allowed but bounded: each
    document is checked by :func:`_check_expansion` before it is turned into Python values.
    """

    def compose_document(self):
        node = super().compose_document()
        _check_expansion(node)
        return node


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_load_all(text: str) -> list[Any]:
    """Every document of ``text``.

    Raises:
      yaml.YAMLError: a syntax error, or a document refused for its shape; deep nesting that
        exhausts PyYAML's recursive parser is reported the same way.
    """
    if len(text) > MAX_YAML_BYTES:
        raise _YAMLBomb(f"{len(text)} characters, over the limit of {MAX_YAML_BYTES}")
    try:
        return list(yaml.load_all(text, Loader=_Loader))  # a SafeLoader subclass
    except RecursionError:
        raise _YAMLBomb("nested too deeply to parse") from None


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line (PyYAML's own messages span several, with a caret drawing)."""
    if isinstance(exc, _YAMLBomb):
        return str(exc)
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def load_yaml(text: str, source: str = "<string>") -> Any:
    """Parses YAML text into plain data, turning syntax errors into a ConfigError.

    Raises:
      ConfigError: invalid YAML, more or fewer than one document, text over
        :data:`MAX_YAML_BYTES`, or aliases that recurse or expand past :data:`MAX_YAML_VALUES`.
    """
    try:
        docs = [d for d in yaml_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError([(source, f"not valid YAML: {yaml_error_line(exc)}")]) from None
    if len(docs) != 1:
        raise ConfigError([(source, f"must hold exactly one YAML document, found {len(docs)}")])
    return docs[0]


def read_yaml_file(path: str, what: str = "file") -> Any:
    """Reads and parses a YAML file of at most :data:`MAX_YAML_BYTES`, refusing a larger one
    before reading it whole.

    Raises:
      ConfigError: the file cannot be read, is too large, or is not valid YAML (see
        :func:`load_yaml`).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise ConfigError([(path, f"cannot read the {what}: {exc.strerror}")]) from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError([(path, f"the {what} is over {MAX_YAML_BYTES} bytes; refused unread")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([(path, f"not UTF-8 text: {exc.reason} at byte {exc.start}")]) from None
    return load_yaml(text, path)
