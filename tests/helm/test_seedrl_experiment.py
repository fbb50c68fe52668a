"""The seedrl-experiment chart: one Experiment from values, valid against the CRD."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm_sdk
import pytest
import yaml

from seedrl.common import config
from support.control_plane import wait_until_served
from support.charts import (
    chart_at_version,
    HelmCluster,
    CRD_FILE,
    EXPERIMENT_CHART,
    ROOT,
    lint,
    load_manifests,
    render,
    run_helm,
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


EXAMPLES = sorted(
    [*(ROOT / "examples").glob("*.yaml"), *(ROOT / "k8s" / "examples").glob("*.yaml")]
)
CARTPOLE = ROOT / "examples" / "cartpole-vtrace.yaml"
EXPERIMENTS = ("seedrl.dev", "v1alpha1", "experiments")


def _template_file(
    path: Path, release: str = "x", namespace: str = "default", sets=(), check: bool = True
):
    """``helm template`` with one values file given as it is (``-f path``), as a platform
    engineer passes the Experiment file that `seedrl train` and `kubectl apply` take."""
    args = ["template", release, str(EXPERIMENT_CHART), "-n", namespace, "-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return run_helm(*args, check=check)


def _document(path: Path) -> dict:
    return config.load_yaml(path.read_text(), str(path))


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
def test_every_example_renders_through_the_chart(example):
    # The file as it is, apiVersion, kind and metadata included: the same one `seedrl train`
    # and `kubectl apply -f` take.
    doc = _document(example)
    exp = _experiment(load_manifests(_template_file(example).stdout))
    validate_experiment(exp)
    assert exp["metadata"]["name"] == doc["metadata"]["name"]
    assert exp["metadata"]["labels"].items() >= doc["metadata"].get("labels", {}).items()
    assert config.parse_experiment(exp).spec == config.parse_experiment(doc).spec


def test_a_whole_experiment_file_renders_one_experiment_equal_to_it():
    doc = _document(CARTPOLE)
    manifests = load_manifests(_template_file(CARTPOLE, release="x", namespace="rl").stdout)
    exp = _experiment(manifests)
    # The file's metadata.name names the Experiment, not the release.
    assert exp["metadata"]["name"] == "cartpole-vtrace"
    assert exp["metadata"]["namespace"] == "rl"
    assert config.parse_experiment(exp).spec == config.parse_experiment(doc).spec

    # Every value the file sets is rendered as the file sets it (the rest are the defaults).
    def leaves(value, path=()):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from leaves(v, (*path, k))
        else:
            yield path, value

    for path, value in leaves(doc["spec"]):
        rendered = exp["spec"]
        for key in path:
            rendered = rendered[key]
        assert rendered == value, ".".join(path)


@pytest.mark.parametrize(
    "values, name, labels, annotations",
    [
        # metadata.* (an Experiment file's) wins over the chart's top-level keys...
        (
            {
                "name": "top",
                "labels": {"team": "top", "tier": "top"},
                "annotations": {"a": "top", "b": "top"},
                "metadata": {"name": "meta", "labels": {"team": "meta"}, "annotations": {"a": "m"}},
            },
            "meta",
            {"team": "meta", "tier": "top"},
            {"a": "m", "b": "top"},
        ),
        # ...which win over the release name.
        ({"name": "top"}, "top", {}, None),
        ({"metadata": {"name": ""}}, "rel", {}, None),
        # The chart's own labels win over both: helm must find what it installed.
        (
            {"metadata": {"labels": {"app.kubernetes.io/instance": "mine"}}},
            "rel",
            {"app.kubernetes.io/instance": "rel"},
            None,
        ),
    ],
    ids=["metadata-wins", "name", "release", "chart-labels-win"],
)
def test_metadata_name_labels_and_annotations_precedence(
    values, name, labels, annotations, tmp_path
):
    exp = _experiment(
        render(EXPERIMENT_CHART, release="rel", namespace="rl", values=values, tmp_path=tmp_path)
    )
    assert exp["metadata"]["name"] == name
    assert exp["metadata"]["labels"].items() >= labels.items()
    assert exp["metadata"].get("annotations") == annotations


def test_metadata_namespace_must_be_the_release_namespace(tmp_path):
    same = {"metadata": {"name": "cp", "namespace": "rl"}}
    exp = _experiment(render(EXPERIMENT_CHART, namespace="rl", values=same, tmp_path=tmp_path))
    assert exp["metadata"]["namespace"] == "rl"
    other = {"metadata": {"name": "cp", "namespace": "team-a"}}
    proc = template(EXPERIMENT_CHART, namespace="rl", values=other, tmp_path=tmp_path, check=False)
    assert proc.returncode != 0
    assert "metadata.namespace is team-a but the release's namespace is rl" in proc.stderr
    assert "-n team-a" in proc.stderr, proc.stderr


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
        # An Experiment file's own keys: only what the Experiment itself allows.
        ("apiVersion=seedrl.dev/v1", "at '/apiVersion'"),
        ("kind=Experiments", "at '/kind'"),
        ("metadata.name=Bad_Name", "at '/metadata/name'"),
        ("metadata.name=" + "a" * 56, "at '/metadata/name': maxLength: got 56, want 55"),
        ("metadata.namespace=Bad_NS", "at '/metadata/namespace'"),
        ("metadata.uid=1234", "at '/metadata': additional properties 'uid'"),
        # Issue 27, item 8: network sizes no learner should try to allocate.
        ("spec.agent.network.lstmSize=4097", "at '/spec/agent/network/lstmSize': maximum"),
        (
            "spec.agent.network.hiddenSizes={100000000}",
            "at '/spec/agent/network/hiddenSizes/0': maximum",
        ),
    ],
)
def test_bad_values_are_rejected_naming_the_field(setting, message):
    proc = template(EXPERIMENT_CHART, sets=[setting], check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "key, bad, wanted",
    [("apiVersion", "seedrl.dev/v1beta1", "seedrl.dev/v1alpha1"), ("kind", "Job", "Experiment")],
)
def test_an_experiment_file_of_another_api_version_or_kind_is_refused(key, bad, wanted, tmp_path):
    doc = _document(CARTPOLE)
    doc[key] = bad
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _template_file(path, check=False)
    assert proc.returncode != 0
    assert f"at '/{key}'" in proc.stderr and wanted in proc.stderr, proc.stderr


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
    # Scaling and suspending are kubectl's: a helm upgrade keeps what they set.
    assert "kubectl scale experiment/pong-tpu -n rl --replicas=" in notes
    assert "kubectl patch experiment/pong-tpu -n rl --type=merge" in notes
    assert "--set spec.suspend" not in notes
    # Without spec.checkpoint.uri the checkpoints are on a claim that outlives the release.
    assert "kubectl delete pvc pong-tpu-learner-run -n rl" in notes


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
    from seedrl.service.operator.reconcile import validate
    from seedrl.service.operator.render import render as render_children

    exp = _experiment(
        render(EXPERIMENT_CHART, release="r1", namespace="rl", values=values, tmp_path=tmp_path)
    )
    assert exp["spec"]["learner"]["image"] == ""
    job = next(o for o in render_children(validate(exp)) if o["kind"] == "Job")
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


def _values_file(tmp_path: Path, name: str, spec: dict) -> Path:
    path = tmp_path / f"{name}-values.yaml"
    path.write_text(yaml.safe_dump({"name": name, "spec": spec}))
    return path


def _installed(c: "HelmCluster", tmp_path: Path, ns: str, name: str, spec: dict) -> Path:
    """The CRD served, then ``helm install`` of a values file of ``name`` and ``spec``."""
    c.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    wait_until_served(c.plane, "experiments.seedrl.dev")
    values = _values_file(tmp_path, name, spec)
    c.helm(
        "install", name, str(EXPERIMENT_CHART), "-n", ns, "--create-namespace", "-f", str(values)
    )
    return values


def _suspend(c: "HelmCluster", ns: str, name: str, suspend: bool = True) -> None:
    patch = json.dumps({"spec": {"suspend": suspend}})
    c.kubectl("patch", f"experiment/{name}", "-n", ns, "--type=merge", "-p", patch)


def _scale_and_suspend(c: "HelmCluster", ns: str, name: str) -> None:
    c.kubectl("scale", f"experiment/{name}", "-n", ns, "--replicas=5")
    _suspend(c, ns, name)


@pytest.mark.cluster
def test_no_upgrade_rollback_or_gitops_apply_reverts_a_scale_or_a_suspend(control_plane, tmp_path):
    # Real helm (4, server-side apply) and kubectl against the real kube-apiserver with the
    # CRD (its scale subresource on spec.actors.replicas); no operator is needed to see what
    # each way of applying the chart does to the two fields the cluster owns.
    ns, name = "helm-upgrade", "cartpole"
    c = HelmCluster(control_plane)
    values = _installed(c, tmp_path, ns, name, {"budget": {"maxEnvSteps": 10**6}})
    exp = c.get(ns, name)
    assert (exp["spec"]["actors"]["replicas"], exp["spec"]["suspend"]) == (2, False)  # CRD's
    (recorded,) = load_manifests(c.helm("get", "manifest", name, "-n", ns).stdout)
    assert "replicas" not in recorded["spec"].get("actors", {})
    assert "suspend" not in recorded["spec"]

    def scaled_and_suspended(max_env_steps: int) -> None:
        exp = c.get(ns, name)
        assert exp["spec"]["actors"]["replicas"] == 5
        assert exp["spec"]["suspend"] is True
        assert exp["spec"]["budget"]["maxEnvSteps"] == max_env_steps

    _scale_and_suspend(c, ns, name)
    # An upgrade to a new chart version with another value changed.
    chart = chart_at_version(EXPERIMENT_CHART, "99.0.0", tmp_path)
    upgrade = ("-n", ns, "-f", str(values), "--set", "labels.rollout=two")
    c.helm("upgrade", name, str(chart), *upgrade, "--set", "spec.budget.maxEnvSteps=2000000")
    scaled_and_suspended(2_000_000)
    assert c.get(ns, name)["metadata"]["labels"]["helm.sh/chart"] == "seedrl-experiment-99.0.0"
    # helm rollback applies revision 1's recorded manifest (no rendering, no lookup).
    c.helm("rollback", name, "1", "-n", ns)
    scaled_and_suspended(1_000_000)
    # Resumed with kubectl, it stays running through the next upgrade.
    _suspend(c, ns, name, False)
    c.helm("upgrade", name, str(chart), *upgrade)
    assert c.get(ns, name)["spec"]["suspend"] is False
    _suspend(c, ns, name)
    # Argo CD renders with `helm template` (lookup is empty there) and applies the result:
    # server-side (its ServerSideApply=true, forcing conflicts) or client-side (its default).
    rendered = tmp_path / "argo.yaml"
    rendered.write_text(
        c.helm(
            "template",
            name,
            str(chart),
            "--is-upgrade",
            *upgrade,
            "--set",
            "spec.budget.maxEnvSteps=3000000",
        ).stdout
    )
    c.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=argocd-controller",
        "-f",
        str(rendered),
    )
    scaled_and_suspended(3_000_000)
    rendered.write_text(rendered.read_text().replace("3000000", "4000000"))
    c.kubectl("apply", "-f", str(rendered))
    scaled_and_suspended(4_000_000)
    c.helm("uninstall", name, "-n", ns)


@pytest.mark.cluster
def test_values_that_set_the_count_own_it_and_a_clash_fails_naming_it(control_plane, tmp_path):
    # A values file that sets spec.actors.replicas makes helm its owner (a GitOps
    # repository that sizes its runs): upgrades change it; one that would undo a
    # `kubectl scale` fails before anything is applied, saying what to do.
    ns, name = "helm-owned", "owned"
    c = HelmCluster(control_plane)
    values = _installed(c, tmp_path, ns, name, {"actors": {"replicas": 3}, "suspend": True})
    assert c.get(ns, name)["spec"]["actors"]["replicas"] == 3
    c.helm(
        "upgrade",
        name,
        str(EXPERIMENT_CHART),
        "-n",
        ns,
        "-f",
        str(values),
        "--set",
        "spec.actors.replicas=4",
    )
    assert c.get(ns, name)["spec"]["actors"]["replicas"] == 4
    _scale_and_suspend(c, ns, name)  # suspend stays True: same value, no clash
    history = c.helm("history", name, "-n", ns, "-o", "json").stdout
    refused = c.helm(
        "upgrade",
        name,
        str(EXPERIMENT_CHART),
        "-n",
        ns,
        "-f",
        str(values),
        "--set",
        "spec.actors.replicas=4",
        check=False,
    )
    assert refused.returncode != 0
    assert (
        "spec.actors.replicas: the values set 4, but the live Experiment has 5, set by "
        "kubectl (scale)"
    ) in refused.stderr, refused.stderr
    assert "Remove spec.actors.replicas from the values" in refused.stderr
    assert c.get(ns, name)["spec"]["actors"]["replicas"] == 5
    assert c.helm("history", name, "-n", ns, "-o", "json").stdout == history
    # Told the live count, the upgrade goes through and helm shares the field.
    c.helm(
        "upgrade",
        name,
        str(EXPERIMENT_CHART),
        "-n",
        ns,
        "-f",
        str(values),
        "--set",
        "spec.actors.replicas=5",
    )
    assert c.get(ns, name)["spec"]["actors"]["replicas"] == 5
    c.helm("uninstall", name, "-n", ns)
