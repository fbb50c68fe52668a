"""The ConfigMap holding the resolved Experiment (``config.yaml``), which both roles read."""

from __future__ import annotations

import hashlib
from typing import Any

from seedrl.common.config import Experiment, dump_experiment
from seedrl.service.operator.render.common import names, object_meta


def config_text(exp: Experiment) -> str:
    """The resolved Experiment the pods read, every default filled in."""
    return dump_experiment(exp)


def config_hash(exp: Experiment) -> str:
    """A short digest of the whole resolved Experiment (what the ConfigMap holds)."""
    return hashlib.sha256(config_text(exp).encode()).hexdigest()[:16]


def render_config_map(exp: Experiment, owner=None, namespace=None) -> dict[str, Any]:
    """The ConfigMap with the resolved Experiment."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(exp, names(exp.metadata.name).config, None, owner, namespace),
        "data": {"config.yaml": config_text(exp)},
    }
