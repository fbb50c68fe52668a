"""The cluster fields of the Experiment (common/config/experiment.py and the sections it
gathers), read by the operator and ignored by the local launcher."""

from __future__ import annotations

import pytest

from seedrl.common.config import parse_experiment
from support.experiment_docs import assert_one, doc, with_path


def test_cluster_defaults():
    spec = parse_experiment(doc()).spec
    assert spec.learner.accelerator.kind == "cpu"
    assert spec.learner.metrics_port == 9090
    assert spec.learner.resources.cpu == "4" and spec.learner.resources.memory == "16Gi"
    assert spec.actors.resources.cpu == "1" and not spec.actors.spot
    assert spec.service_account_name == "" and spec.suspend is False
    assert spec.active_deadline_seconds is None and spec.ttl_seconds_after_finished is None
    assert spec.backoff_limit == 6 and spec.queue_name == ""


def test_cluster_fields_parse():
    spec = parse_experiment(
        doc(
            learner={
                "accelerator": {"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"}},
                "resources": {"cpu": "8", "memory": "64Gi", "cpuLimit": "16"},
                "image": "europe-docker.pkg.dev/p/r/learner:v1@sha256:ab",
            },
            actors={"spot": True, "resources": {"cpu": "500m", "memory": "1.5Gi"}},
            serviceAccountName="seedrl-wi",
            suspend=True,
            activeDeadlineSeconds=3600,
            backoffLimit=2,
            ttlSecondsAfterFinished=0,
            queueName="team-a",
        )
    ).spec
    assert spec.learner.accelerator.tpu.topology == "2x4"
    assert spec.learner.resources.cpu_limit == "16"
    assert spec.actors.spot and spec.actors.resources.cpu == "500m"
    assert spec.suspend and spec.active_deadline_seconds == 3600 and spec.queue_name == "team-a"


@pytest.mark.parametrize(
    "dotted, value, fragment",
    [
        ("spec.learner.resources.memory", "lots", "Kubernetes quantity"),
        ("spec.learner.resources.cpu", 4, "must be a string"),
        ("spec.learner.accelerator.kind", "fpga", "must be one of cpu, gpu, tpu"),
        ("spec.learner.accelerator.tpu.topology", "2by2", "e.g. 2x4"),
        ("spec.learner.accelerator.tpu.type", "v5e", "GKE TPU accelerator"),
        ("spec.learner.accelerator.gpu.count", 0, "must be >= 1"),
        ("spec.learner.image", "has space", "image reference"),
        ("spec.serviceAccountName", "Bad_Name", "DNS subdomain"),
        ("spec.activeDeadlineSeconds", 0, "must be >= 1"),
        ("spec.queueName", "Q", "must match"),
    ],
)
def test_bad_cluster_fields_name_the_field(dotted, value, fragment):
    assert_one(with_path(dotted, value), dotted, fragment)
