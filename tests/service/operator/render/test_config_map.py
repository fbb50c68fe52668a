"""The ConfigMap holding the resolved Experiment (render/config_map.py)."""

from __future__ import annotations

import yaml

from seedrl.common.config import parse_experiment
from seedrl.service.operator.render import render


def test_config_map_holds_the_resolved_experiment(exp_of, by_kind):
    exp = exp_of(actors={"replicas": 3})
    cm = by_kind(render(exp))["ConfigMap"]
    assert parse_experiment(yaml.safe_load(cm["data"]["config.yaml"])) == exp
