"""`seedrl submit` and `seedrl status` against the real kube-apiserver, with the
operator running. The CLI finds the cluster through a real kubeconfig file, as it would
anywhere else."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import kubernetes
import pytest
import yaml

from seedrl.common.config import GROUP, PLURAL, VERSION
from seedrl.common.exit_codes import ExitCode
from seedrl.service.cli import main as cli, cluster
from seedrl.service.operator import reconcile
from seedrl.service.operator.render.volume import render_run_volume
from seedrl.service.operator.status import condition
from support.operator_harness import OperatorHarness, wait_for

#: The real control plane, and helm to render the operator chart's RBAC.
pytestmark = [pytest.mark.cluster, pytest.mark.helm]

ROOT = Path(__file__).parents[3]
EXAMPLE = ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml"


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness("ml", "ml2", "ml3") as h:
        yield h


@pytest.fixture
def kubeconfig(harness, tmp_path):
    return str(harness.cluster.kubeconfig(tmp_path / "kubeconfig", namespace="ml"))


def get(harness, namespace, name):
    return kubernetes.client.CustomObjectsApi(harness.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


def test_submit_applies_and_status_shows_progress(harness, kubeconfig, capsys):
    assert (
        cli.main(
            ["submit", str(EXAMPLE), "--kubeconfig", kubeconfig, "--set", "metadata.name=cli-cart"]
        )
        == ExitCode.OK
    )
    assert "experiment.seedrl.dev/cli-cart applied in namespace ml" in capsys.readouterr().out
    stored = get(harness, "ml", "cli-cart")
    assert stored["spec"]["actors"]["replicas"] == 4
    # The operator picks it up; its learner and actors come up and report progress.
    wait_for(lambda: get(harness, "ml", "cli-cart").get("status", {}).get("phase"), what="a phase")
    batch = kubernetes.client.BatchV1Api(harness.api)
    apps = kubernetes.client.AppsV1Api(harness.api)
    batch.patch_namespaced_job_status(
        "cli-cart-learner", "ml", {"status": {"active": 1, "ready": 1}}
    )
    apps.patch_namespaced_deployment_status(
        "cli-cart-actors", "ml", {"status": {"replicas": 4, "readyReplicas": 4}}
    )
    harness.learners.statuses[("ml", "cli-cart")] = {
        "state": "running",
        "env_steps": 1_234_567,
        "learner_steps": 3000,
        "episodes": 900,
        "mean_return": 187.25,
        "actors": 4,
    }
    # The operator sees the Job and Deployment through its watch cache and polls the learner:
    # wait until one refresh has all three.

    def shows_progress():
        status = get(harness, "ml", "cli-cart").get("status", {})
        return (
            status.get("envSteps")
            and status.get("phase") == "Running"
            and (status.get("actors") or {}).get("ready") == 4
        )

    wait_for(shows_progress, what="progress")
    capsys.readouterr()
    assert cli.main(["status", "--kubeconfig", kubeconfig]) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PHASE",
        "AGENT",
        "ENV",
        "ACTORS",
        "STEPS",
        "RETURN",
        "COST",
        "AGE",
    ]
    row = next(line.split() for line in lines[1:] if line.startswith("cli-cart "))
    # The operator prices the Experiment's pods; no kubelet runs any here, so nothing yet.
    assert row[:8] == [
        "cli-cart",
        "Running",
        "vtrace",
        "CartPole-v1",
        "4/4",
        "1.2M",
        "187.2",
        "$0.00",
    ]


def test_submit_again_updates_in_place(harness, kubeconfig, capsys):
    args = [
        "submit",
        str(EXAMPLE),
        "--kubeconfig",
        kubeconfig,
        "-n",
        "ml2",
        "--set",
        "metadata.name=again",
    ]
    assert cli.main(args) == ExitCode.OK
    assert cli.main(args + ["--set", "spec.actors.replicas=6"]) == ExitCode.OK
    stored = get(harness, "ml2", "again")
    assert stored["spec"]["actors"]["replicas"] == 6 and stored["metadata"]["generation"] == 2
    wait_for(
        lambda: (
            kubernetes.client.AppsV1Api(harness.api)
            .read_namespaced_deployment("again-actors", "ml2")
            .spec.replicas
            == 6
        ),
        what="6 actors",
    )


def test_submit_refuses_an_invalid_file_naming_the_field(harness, kubeconfig, capsys):
    assert (
        cli.main(
            [
                "submit",
                str(EXAMPLE),
                "--kubeconfig",
                kubeconfig,
                "--set",
                "metadata.name=bad-one",
                "--set",
                "spec.learner.accelerator.kind=fpga",
            ]
        )
        == ExitCode.BAD_CONFIG
    )
    err = capsys.readouterr().err
    assert "spec.learner.accelerator.kind: must be one of cpu, gpu, tpu" in err
    with pytest.raises(kubernetes.client.ApiException) as e:
        get(harness, "ml", "bad-one")
    assert e.value.status == 404


def test_submit_applies_the_clusters_name_limit(harness, kubeconfig, capsys):
    name = "n" * 60  # a valid DNS label, but <name>-learner would not be
    assert (
        cli.main(
            ["submit", str(EXAMPLE), "--kubeconfig", kubeconfig, "--set", f"metadata.name={name}"]
        )
        == ExitCode.BAD_CONFIG
    )
    assert "metadata.name: must be at most 55 characters" in capsys.readouterr().err


def test_submit_dry_run_touches_nothing(harness, kubeconfig, capsys):
    assert (
        cli.main(
            [
                "submit",
                str(EXAMPLE),
                "--kubeconfig",
                kubeconfig,
                "--dry-run",
                "--set",
                "metadata.name=dry",
            ]
        )
        == ExitCode.OK
    )
    captured = capsys.readouterr()
    printed = yaml.safe_load(captured.out)
    assert printed["metadata"] == {"name": "dry", "namespace": "ml"}
    with pytest.raises(kubernetes.client.ApiException):
        get(harness, "ml", "dry")
    # The example keeps its checkpoints on the learner's claim: the user is told what that
    # means, and how to delete them on purpose.
    assert not printed["spec"].get("checkpoint", {}).get("uri")
    assert "spec.checkpoint.uri is empty" in captured.err and "gs://" in captured.err
    assert "emptyDir" not in captured.err
    assert "seedrl volumes delete dry-learner-run -n ml" in captured.err, captured.err
    assert (
        cli.main(
            [
                "submit",
                str(EXAMPLE),
                "--kubeconfig",
                kubeconfig,
                "--dry-run",
                "--set",
                "metadata.name=dry",
                "--set",
                "spec.checkpoint.uri=gs://my-bucket/dry",
            ]
        )
        == ExitCode.OK
    )
    assert "spec.checkpoint.uri is empty" not in capsys.readouterr().err


@pytest.mark.parametrize("retention", ["Retain", "Delete"])
def test_the_checkpoint_notice_names_the_claim_and_what_deleting_the_experiment_does(retention):
    # Without spec.checkpoint.uri the operator keeps the checkpoints on a claim of the
    # learner's: the notice `seedrl submit` prints names it, and says truly whether it
    # outlives the Experiment (no owner reference, so the garbage collector leaves it).
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"].setdefault("checkpoint", {})["volumeRetention"] = retention
    exp = reconcile.validate(document)
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Experiment", "name": "x", "uid": "u"}
    claim = render_run_volume(exp, owner, "ml")
    name = claim["metadata"]["name"]
    notice = cluster.checkpoint_notice(exp, "ml")
    assert "spec.checkpoint.uri is empty" in notice and "gs://" in notice
    assert f"PersistentVolumeClaim {name} (10Gi, the cluster's default StorageClass)" in notice
    assert "emptyDir" not in notice
    kept = "ownerReferences" not in claim["metadata"]
    assert kept == (retention == "Retain")
    assert (f"`seedrl volumes delete {name} -n ml`" in notice) == kept, notice
    assert ("It is kept when the Experiment is deleted" in notice) == kept, notice
    assert ("deleted, checkpoints and all, with the Experiment" in notice) == (not kept), notice
    document["spec"]["checkpoint"]["uri"] = "gs://my-bucket/runs/x"
    assert cluster.checkpoint_notice(reconcile.validate(document), "ml") is None


def test_status_marks_a_rejected_spec_and_lists_all_namespaces(harness, kubeconfig, capsys):
    # Applied behind the CLI's back (kubectl apply): the operator rejects it.
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = "rejected"
    body["spec"]["learner"]["metricsPort"] = 8686  # the gRPC port: the schema cannot tell
    kubernetes.client.CustomObjectsApi(harness.api).create_namespaced_custom_object(
        GROUP, VERSION, "ml3", PLURAL, body
    )
    wait_for(
        lambda: condition(get(harness, "ml3", "rejected").get("status"), "Valid"),
        what="Valid condition",
    )
    capsys.readouterr()
    assert cli.main(["status", "--kubeconfig", kubeconfig, "-n", "ml3"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "rejected   Failed (ValidationFailed)" in out
    assert cli.main(["status", "--kubeconfig", kubeconfig, "-A"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("NAMESPACE")
    assert any(line.startswith("ml3 ") and "rejected" in line for line in out.splitlines())
    assert cli.main(["status", "--kubeconfig", kubeconfig, "-n", "empty"]) == ExitCode.OK
    assert "no experiments in namespace empty" in capsys.readouterr().out


def test_status_without_a_cluster_says_why(tmp_path, capsys):
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "nowhere",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "nowhere", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    assert cli.main(["status", "--kubeconfig", str(config)]) == ExitCode.FAILED
    assert "could not list experiments" in capsys.readouterr().err


def test_table_formatting():
    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    rows = cluster.status_rows(
        [
            {
                "metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {
                    "agent": {"name": "r2d2"},
                    "env": {"id": "ALE/Pong-v5"},
                    "actors": {"replicas": 8},
                },
                "status": {
                    "phase": "Running",
                    "learnerState": "running",
                    "envSteps": 950,
                    "meanReturn": -20.5,
                    "cost": {"totalUsd": 1234.5},
                    "actors": {"ready": 7, "desired": 8},
                },
            }
        ],
        now,
    )
    assert rows[1] == [
        "x",
        "Running",
        "r2d2",
        "ALE/Pong-v5",
        "7/8",
        "950",
        "-20.5",
        "$1,234.50",
        "24h",
    ]
    table = cluster.format_table(rows)
    assert table.splitlines()[0].startswith("NAME   PHASE     AGENT")


def test_eval_of_an_experiment_uses_the_checkpoint_its_status_reports(
    harness, kubeconfig, trained_runs, gcs_bucket, gcs_emulator, tmp_path, monkeypatch, capsys
):
    from support.trained_runs import copy_store_to_gcs

    store = copy_store_to_gcs(str(trained_runs["vtrace"] / "checkpoints"), gcs_bucket)
    newest = json.loads((trained_runs["vtrace"] / "checkpoints" / "MANIFEST.json").read_text())
    last = f"{store}/{newest['checkpoints'][-1]['name']}"
    assert (
        cli.main(
            [
                "submit",
                str(EXAMPLE),
                "--kubeconfig",
                kubeconfig,
                "--set",
                "metadata.name=cli-eval",
                "--set",
                f"spec.checkpoint.uri={store}",
            ]
        )
        == ExitCode.OK
    )
    wait_for(lambda: get(harness, "ml", "cli-eval").get("status", {}).get("phase"), what="phase")
    batch = kubernetes.client.BatchV1Api(harness.api)
    batch.patch_namespaced_job_status(
        "cli-eval-learner", "ml", {"status": {"active": 1, "ready": 1}}
    )
    harness.learners.statuses[("ml", "cli-eval")] = {
        "state": "running",
        "env_steps": 3000,
        "learner_steps": 90,
        "episodes": 20,
        "actors": 2,
        "last_checkpoint": last,
    }
    wait_for(
        lambda: get(harness, "ml", "cli-eval").get("status", {}).get("lastCheckpoint") == last,
        what="the learner's last checkpoint in the status",
    )
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = cli.main(
        [
            "eval",
            "--experiment",
            "cli-eval",
            "--kubeconfig",
            kubeconfig,
            "--episodes",
            "2",
            "--quiet",
        ]
    )
    assert code == ExitCode.OK
    assert f"experiment cli-eval in ml: {last}" in capsys.readouterr().err
    assert json.loads((tmp_path / "eval.json").read_text())["checkpoint"] == last


def test_an_experiment_checkpointing_on_its_volume_cannot_be_evaluated_from_outside():
    obj = {"metadata": {"name": "pvc-run"}, "spec": {"checkpoint": {}}, "status": {}}
    with pytest.raises(ValueError, match="PersistentVolumeClaim pvc-run-learner-run, which only"):
        cluster.checkpoint_location(obj)
    # Before the learner reports a checkpoint: the newest in spec.checkpoint.uri.
    obj["spec"]["checkpoint"]["uri"] = "gs://b/exp"
    assert cluster.checkpoint_location(obj) == "gs://b/exp"
