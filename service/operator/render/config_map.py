"""The ConfigMap holding the resolved Experiment (``config.yaml``), which both roles read.

A running Experiment's pods run the images of the release that first reconciled it
(``status.images``), which may be older than the operator: their parser refuses a field it does
not know. So once the ConfigMap exists, :func:`config_text_like` writes the document in the
shape its current one has: a field added since that release is left out while its value is
what the older document already means (its default), and the sections a run's checkpoints are
bound to are kept as written while they mean the same (they hold fields retired since).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from seedrl.common import resume
from seedrl.common.config import ConfigError, Experiment, dump_experiment, parse_experiment
from seedrl.common.config import to_document
from seedrl.common.config.retired import upgrade_spec
from seedrl.service.operator.render.common import names, object_meta


def config_text(exp: Experiment) -> str:
    """The resolved Experiment the pods read, every default filled in."""
    return dump_experiment(exp)


def config_hash(exp: Experiment) -> str:
    """A short digest of the whole resolved Experiment (what the ConfigMap holds)."""
    return hashlib.sha256(config_text(exp).encode()).hexdigest()[:16]


def read_config(text: str | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A ConfigMap's ``config.yaml`` as written and as this release reads it (retired fields
    rewritten, fields added since at their defaults), or None when this release cannot read
    it."""
    try:
        written = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return None
    if not isinstance(written, dict) or not isinstance(written.get("spec"), Mapping):
        return None
    spec, _ = upgrade_spec(written["spec"])
    try:
        read = to_document(parse_experiment({**written, "spec": spec}))
    except (ConfigError, TypeError):
        return None
    return written, read


def config_text_like(exp: Experiment, previous: str | None) -> str:
    """The ``config.yaml`` of ``exp`` in the shape of the ``previous`` one (see the module
    docstring); the whole resolved Experiment when there is none or it cannot be read, and
    ``previous`` itself when it already means ``exp``."""
    docs = read_config(previous)
    if docs is None:
        return config_text(exp)
    written, read = docs
    wanted = to_document(exp)
    shaped = _shaped(wanted, written, read)
    for key in resume.BOUND_SECTIONS:
        if read["spec"].get(key) == wanted["spec"].get(key) and key in written["spec"]:
            shaped["spec"][key] = written["spec"][key]
    if shaped == written and previous is not None:
        return previous
    return yaml.safe_dump(shaped, sort_keys=False)


def _shaped(wanted: Any, written: Any, read: Any) -> Any:
    """``wanted`` without the keys ``written`` lacks whose value ``read`` (what ``written``
    means) already has."""
    if not isinstance(wanted, Mapping):
        return wanted
    written = written if isinstance(written, Mapping) else {}
    read = read if isinstance(read, Mapping) else {}
    out: dict[str, Any] = {}
    for key, value in wanted.items():
        if key in written:
            out[key] = _shaped(value, written[key], read.get(key))
        elif key not in read or read[key] != value:
            out[key] = value
    return out


def render_config_map(
    exp: Experiment, owner=None, namespace=None, previous: str | None = None
) -> dict[str, Any]:
    """The ConfigMap with the resolved Experiment; ``previous``: the ``config.yaml`` it holds
    now, whose shape is kept (:func:`config_text_like`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(exp, names(exp.metadata.name).config, None, owner, namespace),
        "data": {"config.yaml": config_text_like(exp, previous)},
    }
