"""Kubernetes quantities: the pattern the config validates requests with and their values."""

import re

import pytest

from seedrl.common.config import ConfigError, parse_experiment
from seedrl.common.quantity import QUANTITY, cpu_cores, memory_gib, parse_quantity


@pytest.mark.parametrize(
    "text, value",
    [
        ("500m", 0.5),
        ("2", 2.0),
        ("0.25", 0.25),
        ("4Gi", 4 * 1024**3),
        ("512Mi", 512 * 1024**2),
        ("1G", 1e9),
        ("100k", 1e5),
        ("1e3", 1000.0),
        ("1.5Gi", 1.5 * 1024**3),
        ("250u", 0.00025),
        ("3Ki", 3072.0),
        ("1E", 1e18),
        ("2Ei", 2 * 2**60),
        ("-1", -1.0),
        ("+.5", 0.5),
        (2, 2.0),
        (0.5, 0.5),
    ],
)
def test_kubernetes_quantities(text, value):
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["4GB", "abc", "", "1.2.3", "Gi", "1e", True])
def test_bad_quantities_are_refused(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_cpu_and_memory_units():
    assert cpu_cores("1500m") == 1.5
    assert memory_gib("512Mi") == 0.5
    assert memory_gib("1G") == pytest.approx(1e9 / 2**30)


def test_the_config_takes_the_unsigned_quantities_the_parser_reads():
    for text in ("500m", "16Gi", "1.5", "1e3"):
        assert re.fullmatch(QUANTITY, text)
        exp = parse_experiment(
            {"metadata": {"name": "q"}, "spec": {"learner": {"resources": {"cpu": text}}}}
        )
        assert cpu_cores(exp.spec.learner.resources.cpu) == parse_quantity(text)
    with pytest.raises(ConfigError):
        parse_experiment(
            {"metadata": {"name": "q"}, "spec": {"learner": {"resources": {"cpu": "-1"}}}}
        )
