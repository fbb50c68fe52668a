"""Documents an earlier release wrote, read with the meaning that release gave them.

An Experiment stored by an earlier release (its spec in the API server, the operator's record
``status.appliedImmutable``, the ConfigMap its learner reads) may hold a field this release
retired, and leaves out fields added since. Where the user writes a file (``seedrl validate``,
``seedrl train``) a retired field is refused with how to write it now (:mod:`.parse`); an
object an earlier release already runs is instead rewritten by :func:`upgrade_spec` into this
release's fields with the same meaning, as a conversion between API versions would, so that an
operator upgrade neither refuses nor changes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: ``spec.agent.r2d2.burnIn``'s default in the releases that had ``sequenceLength``.
_OLD_BURN_IN = 40


def upgrade_spec(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``spec`` (an Experiment's ``spec`` document) with each retired field written as this
    release's fields of the same meaning, and a note for each (``path: what it became``);
    ``spec`` itself is not changed.

    - ``agent.r2d2.sequenceLength`` S counted the burn-in B: it is ``trainLength`` S - B,
      ``burnIn`` B, ``sequencePeriod`` S - B (an env's sequences started S - B apart), whatever
      ``trainLength`` and ``sequencePeriod`` say (the CRD's defaults, filled in on read).
    """
    out: dict[str, Any] = copy.deepcopy(dict(spec))
    notes: list[str] = []
    agent = out.get("agent")
    r2d2 = agent.get("r2d2") if isinstance(agent, dict) else None
    if isinstance(r2d2, dict) and "sequenceLength" in r2d2:
        length = r2d2.pop("sequenceLength")
        burn_in = r2d2.get("burnIn")
        if burn_in is None:
            burn_in = _OLD_BURN_IN
        if _is_int(length) and _is_int(burn_in):
            # It wins over trainLength and sequencePeriod: the API server fills those in from
            # the CRD's defaults on every read of an object stored before they existed.
            r2d2.update(
                burnIn=burn_in, trainLength=length - burn_in, sequencePeriod=length - burn_in
            )
            notes.append(
                f"spec.agent.r2d2.sequenceLength: retired; read as trainLength "
                f"{r2d2['trainLength']}, burnIn {burn_in}, sequencePeriod "
                f"{r2d2['sequencePeriod']} (the same sequences)"
            )
        else:  # not a number: left for the parser to refuse, with its path
            r2d2["sequenceLength"] = length
    return out, notes


def fill_absent(written: Any, resolved: Any) -> Any:
    """``written`` with every key it lacks taken from ``resolved`` (recursively, into
    mappings both have): a spec as the user wrote it, completed with the values a release
    resolved for it, so that a default that changed since means what it meant then."""
    if not isinstance(written, Mapping) or not isinstance(resolved, Mapping):
        return written
    out = dict(written)
    for key, value in resolved.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        else:
            out[key] = fill_absent(out[key], value)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
