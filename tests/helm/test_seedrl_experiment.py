"""The seedrl-experiment chart: one Experiment from values, valid against the CRD."""

from __future__ import annotations

import helm_python as helm_sdk
import pytest

from seedrl.common import config
from support.charts import (
    EXPERIMENT_CHART,
    ROOT,
    lint,
    load_manifests,
    render,
    template,
    validate_all,
    validate_experiment,
)

pytestmark = pytest.mark.helm

#: A learner on one TPU VM host (v5e, 2x2 = 4 chips) with Spot actors: the GKE case.
TPU = {
    "name": "pong-tpu",
    "labels": {"team": "rl"},
    "annotations": {"seedrl.dev/owner": "alice"},
    "spec": {
        "env": {"id": "ALE/Pong-v5"},
        "agent": {"name": "vtrace", "network": {"name": "nature_cnn"}},
        "learner": {
            "batchSize": 32,
            "inferenceBatchSize": 256,
            "accelerator": {
                "kind": "tpu",
                "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2"},
            },
            "resources": {"cpu": "20", "memory": "64Gi"},
            "optimizer": {"learningRate": 6e-4, "epsilon": 1e-7},
        },
        "actors": {
            "replicas": 64,
            "envsPerActor": 32,
            "spot": True,
            "resources": {"cpu": "2", "memory": "4Gi"},
        },
        "budget": {"maxEnvSteps": 200_000_000, "targetReturn": 20.0},
    },
}


#: A learner on two NVIDIA L4 GPUs.
GPU = {
    "name": "pong-gpu",
    "spec": {
        "env": {"id": "ALE/Pong-v5"},
        "learner": {"accelerator": {"kind": "gpu", "gpu": {"type": "nvidia-l4", "count": 2}}},
    },
}


def _example_values(path):
    doc = config.load_yaml(path.read_text(), str(path))
    return {"name": doc["metadata"]["name"], "spec": doc.get("spec") or {}}


EXAMPLES = sorted(
    [*(ROOT / "examples").glob("*.yaml"), *(ROOT / "k8s" / "examples").glob("*.yaml")]
)


def _experiment(manifests):
    (exp,) = manifests
    assert (exp["apiVersion"], exp["kind"]) == ("seedrl.dev/v1alpha1", "Experiment")
    return exp


@pytest.mark.parametrize("values", [{}, TPU], ids=["defaults", "tpu"])
def test_lints_strict_and_renders_a_valid_experiment(values, tmp_path):
    lint(EXPERIMENT_CHART, values, tmp_path)
    manifests = render(
        EXPERIMENT_CHART, release="cartpole", namespace="rl", values=values, tmp_path=tmp_path
    )
    validate_all(manifests)
    exp = _experiment(manifests)
    assert exp["metadata"]["namespace"] == "rl"


def test_defaults_name_the_experiment_after_the_release():
    exp = _experiment(render(EXPERIMENT_CHART, release="cartpole", namespace="rl"))
    assert exp["metadata"]["name"] == "cartpole"
    parsed = config.parse_experiment(exp)
    # values.yaml holds every default, so the Experiment is the dataclasses' own defaults.
    assert parsed.spec == config.Spec()
    assert parsed.metadata.labels["app.kubernetes.io/instance"] == "cartpole"


def test_tpu_values_pass_through_unchanged(tmp_path):
    exp = _experiment(
        render(EXPERIMENT_CHART, release="r1", namespace="rl", values=TPU, tmp_path=tmp_path)
    )
    assert exp["metadata"]["name"] == "pong-tpu"
    assert exp["metadata"]["labels"]["team"] == "rl"
    assert exp["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert exp["metadata"]["annotations"] == {"seedrl.dev/owner": "alice"}
    # The rendered spec is the chart's defaults with the given values merged over them.
    expected = config.parse_experiment({"metadata": {"name": "x"}, "spec": TPU["spec"]}).spec
    assert config.parse_experiment(exp).spec == expected
    accel = exp["spec"]["learner"]["accelerator"]
    assert accel["kind"] == "tpu" and accel["tpu"]["topology"] == "2x2"
    assert exp["spec"]["learner"]["optimizer"]["epsilon"] == 1e-7
    assert exp["spec"]["budget"]["maxEnvSteps"] == 200_000_000  # not 2e+08


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_example_renders_through_the_chart(example, tmp_path):
    values = _example_values(example)
    exp = _experiment(render(EXPERIMENT_CHART, values=values, tmp_path=tmp_path))
    validate_experiment(exp)
    own = config.parse_experiment({"metadata": {"name": "x"}, "spec": values["spec"]}).spec
    assert config.parse_experiment(exp).spec == own


@pytest.mark.parametrize(
    "setting, message",
    [
        ("spec.actors.replicas=-1", "at '/spec/actors/replicas': minimum: got -1, want 1"),
        ("spec.actors.replicaz=3", "at '/spec/actors': additional properties 'replicaz'"),
        ("spec.agent.name=dqn", "at '/spec/agent/name'"),
        (
            "spec.learner.accelerator.tpu.topology=big",
            "at '/spec/learner/accelerator/tpu/topology'",
        ),
        ("name=Bad_Name", "at '/name'"),
        # The operator suffixes child names (<name>-learner): longer names could not be run.
        ("name=" + "a" * 56, "at '/name': maxLength: got 56, want 55"),
        ("nam=x", "additional properties 'nam'"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(setting, message):
    proc = template(EXPERIMENT_CHART, sets=[setting], check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_a_missing_helm_binary_fails_with_the_way_to_install_it(monkeypatch):
    monkeypatch.setenv("HELM", "/nonexistent/helm")
    with pytest.raises(pytest.fail.Exception, match="run `make helm`"):
        template(EXPERIMENT_CHART)


def test_helm_sdk_renders_the_same_experiment_and_the_notes():
    # Another Helm release (the SDK's) renders the same document, and the NOTES it prints
    # after `helm install` say how to follow the run.
    with helm_sdk.Chart.load(EXPERIMENT_CHART) as chart:
        rendered = chart.render(TPU, name="r1", namespace="rl")
        with pytest.raises(helm_sdk.HelmValuesError, match="/spec/actors/replicas"):
            chart.validate_schema({"spec": {"actors": {"replicas": 0}}})
    notes = rendered.pop("seedrl-experiment/templates/NOTES.txt")
    (exp,) = load_manifests("\n---\n".join(rendered.values()))
    validate_experiment(exp)
    assert exp["spec"]["learner"]["accelerator"]["kind"] == "tpu"
    assert "kubectl get experiment pong-tpu -n rl -w" in notes
    assert "learner on tpu" in notes
    assert "seedrl.dev/experiment=pong-tpu" in notes
    assert "helm uninstall r1 -n rl" in notes


@pytest.mark.parametrize(
    "values,image,resource,count,selector",
    [
        (
            TPU,
            "ghcr.io/seedrl/learner:0.1.0-tpu",
            "google.com/tpu",
            "4",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
        ),
        (
            GPU,
            "ghcr.io/seedrl/learner:0.1.0-gpu",
            "nvidia.com/gpu",
            "2",
            {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        ),
    ],
    ids=["tpu", "gpu"],
)
def test_the_operator_runs_the_charts_accelerator_experiment_on_its_accelerator(
    values, image, resource, count, selector, tmp_path
):
    # The chart's Experiment (no image given) as the operator renders its learner: the
    # accelerator's build of the learner, the device requested, the node pool selected.
    from seedrl.service.operator import reconcile

    exp = _experiment(
        render(EXPERIMENT_CHART, release="r1", namespace="rl", values=values, tmp_path=tmp_path)
    )
    assert exp["spec"]["learner"]["image"] == ""
    job = next(o for o in reconcile.render(reconcile.validate(exp)) if o["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == image
    assert (
        container["resources"]["requests"][resource]
        == container["resources"]["limits"][resource]
        == count
    )
    assert pod["nodeSelector"] == selector
    assert {"key": resource, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    command = container["command"]
    assert (
        command[command.index("--accelerator") + 1]
        == values["spec"]["learner"]["accelerator"]["kind"]
    )
