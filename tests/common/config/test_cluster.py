"""The custom resource's coordinates (common/config/cluster.py)."""

from __future__ import annotations

from seedrl.common.config import API_VERSION, KIND


def test_the_custom_resource_coordinates_make_the_api_version():
    from seedrl.common.config import GROUP, PLURAL, SINGULAR, VERSION

    assert API_VERSION == f"{GROUP}/{VERSION}" == "seedrl.dev/v1alpha1"
    assert (PLURAL, SINGULAR, KIND) == ("experiments", "experiment", "Experiment")
