"""How an Experiment field is declared: :func:`param`, :func:`field_key`, :class:`ConfigError`.

Every field of the Experiment (and of other documents parsed the same way, such as the price
table) is a dataclass field made by :func:`param`, which stores its docstring and constraints in
the field's metadata; the parser (:mod:`.parse`) and the schema generator read them from there.
The patterns and bounds that fields of several sections share live here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from seedrl.common.quantity import QUANTITY


#: Integers are int64, as the CRD and the learner's counters store them: any integer field
#: outside this range is refused, whatever its own bounds.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


#: DNS-1123 label: what Kubernetes accepts as an object name that also becomes a label value.
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_REQUIRED = dataclasses.MISSING
#: A request is a non-negative Kubernetes resource quantity, e.g. 500m, 4, 16Gi, 1.5.
QUANTITY_PATTERN = f"[+]?{QUANTITY}"
QUANTITY_HINT = "a Kubernetes quantity such as 500m, 4 or 16Gi, written as a string"
#: A container image reference: [registry/]path[:tag][@digest], no spaces.
IMAGE_PATTERN = r"[a-z0-9][A-Za-z0-9._\-/:@]*"


class ConfigError(ValueError):
    """A rejected Experiment document.

    Attributes:
      problems: list of ``(field_path, reason)`` pairs, section by section: within a section,
        unknown keys first, then the known fields in the order they are declared.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("\n".join(f"{path}: {reason}" for path, reason in self.problems))


def param(
    default: Any = _REQUIRED,
    doc: str = "",
    *,
    factory: Any = None,
    key: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: Sequence[Any] | None = None,
    pattern: str | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
    max_len: int | None = None,
    pattern_hint: str | None = None,
    default_by: tuple[str, Mapping[Any, Any]] | None = None,
) -> Any:
    """Declares one Experiment field: its default, docstring and constraints.

    Args:
      default: the value used when the document omits the field; omit for a required field.
      doc: what the field means, for humans and for the generated schemas.
      factory: a zero-argument callable giving the default (for lists, dicts, sections).
      key: the document key when it is not the camelCase form of the attribute name.
      ge, gt, le: numeric bounds (also applied to each item of a list of numbers); an integer
        is always within int64 (:data:`INT64_MIN`, :data:`INT64_MAX`) besides.
      choices: the allowed values.
      pattern: a regular expression the whole string must match.
      min_items, max_items: the fewest and the most items a list may have.
      max_len: the longest a string may be.
      pattern_hint: what ``pattern`` asks for, in words, for the error message (default: the
        DNS-label wording).
      default_by: ``(path, table)``: a default that depends on another field of the
        Experiment, at document ``path`` (``spec.agent.name``). Where the document leaves this
        field out or null, :func:`parse_experiment` gives it ``table[value of path]``, or
        ``default`` for a value the table lacks. The schemas declare no default for it (the
        API server would otherwise fill in ``default``), and a parsed Experiment always holds
        the value, so a dumped one states it.
    """
    meta = {
        "doc": doc,
        "key": key,
        "ge": ge,
        "gt": gt,
        "le": le,
        "choices": choices,
        "pattern": pattern,
        "min_items": min_items,
        "max_items": max_items,
        "max_len": max_len,
        "pattern_hint": pattern_hint,
        "default_by": default_by,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_key(f: dataclasses.Field) -> str:
    """The document key of a dataclass field: its explicit key or its camelCase name."""
    if f.metadata.get("key"):
        return f.metadata["key"]
    head, *rest = f.name.rstrip("_").split("_")
    return head + "".join(part.capitalize() for part in rest)


#: A rule of an agent's section that involves fields elsewhere in the spec:
#: ``(field path, reason)`` pairs, as :class:`ConfigError` lists them.
Problems = list[tuple[str, str]]


def mode_evaluation_actors() -> Any:
    """``evaluationActors`` of an agent whose evaluators act by the policy's mode (vtrace, ppo):
    one declaration, so the two agents' fields and their docs stay the same."""
    return param(
        0,
        "The last this-many actors act deterministically (the policy's mode) and only "
        "evaluate: their episodes are reported apart (eval_mean_return), judge "
        "spec.budget.targetReturn, and are not trained on.",
        ge=0,
    )


def minibatches_problems(agent: str, minibatches: int, batch_size: int) -> Problems:
    """``spec.agent.<agent>.minibatches`` must divide ``spec.learner.batchSize``: each pass
    over a batch is cut into that many equal minibatches."""
    if batch_size % minibatches:
        return [
            (
                f"spec.agent.{agent}.minibatches",
                f"must divide spec.learner.batchSize ({batch_size}), got {minibatches}",
            )
        ]
    return []
