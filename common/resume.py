"""What a resumed run must keep: the spec sections its checkpoints are bound to.

A checkpoint's variables only fit the environment and agent (its network included) they were
trained with. So the learner refuses a checkpoint saved under other ``spec.env``/``spec.agent``,
`seedrl train --resume` refuses a changed run directory's config, and the operator refuses a
change of those sections once an Experiment's children exist: all three through this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Sections of ``spec`` a run's checkpoints are bound to.
BOUND_SECTIONS = ("env", "agent")


def bound_part(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The bound sections of a spec document (``to_document(exp.spec)``)."""
    return {key: spec.get(key) for key in BOUND_SECTIONS}


def bound_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], sections: Iterable[str] = BOUND_SECTIONS
) -> list[str]:
    """Dotted paths (``spec.env.id``) of the leaves where two spec documents differ inside the
    bound ``sections`` (a section missing from one of them differs as a whole)."""
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
