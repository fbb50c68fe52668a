"""What a resumed run must keep: the spec sections its checkpoints are bound to.

A checkpoint's variables only fit the environment and agent (its network included) they were
trained with. So the learner refuses a checkpoint saved under other ``spec.env``/``spec.agent``,
`seedrl train --resume` refuses a changed run directory's config, and the operator refuses a
change of those sections once an Experiment's children exist: all three through this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from seedrl.common.config import ConfigError, parse_experiment, to_document
from seedrl.common.config.retired import upgrade_spec

#: Sections of ``spec`` a run's checkpoints are bound to.
BOUND_SECTIONS = ("env", "agent")


def bound_part(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The bound sections of a spec document (``to_document(exp.spec)``)."""
    return {key: spec.get(key) for key in BOUND_SECTIONS}


def bound_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], sections: Iterable[str] = BOUND_SECTIONS
) -> list[str]:
    """Dotted paths (``spec.env.id``) of the leaves where two spec documents differ inside the
    bound ``sections`` (a section missing from one of them differs as a whole).

    ``old`` may have been written by an earlier seedrl (a run directory's config, a
    checkpoint, the operator's record of what it applied): a field added since then is
    missing there, and is read as this version reads the document, at its default; a field
    retired since is read as :func:`~seedrl.common.config.retired.upgrade_spec` rewrites it.
    An upgrade that adds or renames fields thus changes nothing; a field this version cannot
    read still differs.
    """
    sections = tuple(sections)
    changed = _differences(old, new, sections)
    # Parsing costs milliseconds and the operator compares at every poll: only a document
    # that differs as written is read again as this version reads it.
    return _differences(_as_read_now(old, new, sections), new, sections) if changed else []


def _differences(
    old: Mapping[str, Any], new: Mapping[str, Any], sections: tuple[str, ...]
) -> list[str]:
    """The leaf paths where the two documents differ as written, inside ``sections``."""
    out: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{path}.{key}")
        elif a != b:
            out.append(path)

    for key in sections:
        walk(old.get(key), new.get(key), f"spec.{key}")
    return out


def _as_read_now(
    old: Mapping[str, Any], new: Mapping[str, Any], sections: Iterable[str]
) -> Mapping[str, Any]:
    """``old``'s bound sections with every field this version reads filled in (defaults where
    ``old`` has none); ``old`` as it is when this version cannot read it."""
    present = [key for key in sections if isinstance(old.get(key), Mapping)]
    if not present:
        return old
    old = upgrade_spec(old)[0]
    # The other sections from ``new``: rules across sections then judge the old ones against
    # the run they are compared with.
    merged = {**new, **{key: old[key] for key in present}}
    try:
        spec = to_document(parse_experiment({"metadata": {"name": "resume"}, "spec": merged}).spec)
    except (ConfigError, TypeError):  # a field this version no longer reads: as written
        return old
    return {**old, **{key: spec[key] for key in present}}
