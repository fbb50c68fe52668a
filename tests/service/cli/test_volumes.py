"""`seedrl volumes` against the real kube-apiserver with the operator running (issue 37 item
5): every run volume listed with whose run it holds and whether that Experiment still uses
it; a retained one deleted, one in use refused."""

from __future__ import annotations

import copy

import kubernetes
import pytest

from seedrl.common.config import parse_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.service.cli import main as cli
from seedrl.service.cli.volumes import volume_rows
from seedrl.service.operator.render.common import owner_reference
from seedrl.service.operator.render.volume import render_run_volume
from support.operator_harness import OperatorHarness, wait_for
from support.operator_live import CARTPOLE, STEP_S, LiveClient

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

NS = "vols"


def _experiment(name: str, uid: str, **checkpoint) -> dict:
    body = copy.deepcopy(CARTPOLE)
    body["metadata"] = {"name": name, "namespace": NS, "uid": uid}
    body["spec"].setdefault("checkpoint", {}).update(checkpoint)
    return body


def _claim(name: str, uid: str) -> dict:
    exp = parse_experiment({**_experiment(name, uid), "metadata": {"name": name}})
    claim = render_run_volume(exp, owner_reference(name, uid), NS)
    claim["metadata"]["creationTimestamp"] = "2026-12-01T00:00:00Z"
    return claim


def test_each_claim_says_whose_run_it_holds_and_whether_that_one_uses_it():
    claims = [_claim("live", "u-live"), _claim("gone", "u-gone"), _claim("again", "u-old")]
    experiments = [_experiment("live", "u-live"), _experiment("again", "u-new")]
    rows = {r["NAME"]: r for r in volume_rows(claims, experiments)}
    assert rows["live-learner-run"]["STATE"] == "in use by live"
    assert rows["gone-learner-run"]["STATE"] == "retained"
    # An Experiment of the same name that has not named it: waiting on the user.
    assert rows["again-learner-run"]["STATE"] == "retained, named by none"
    assert rows["live-learner-run"]["SIZE"] == "10Gi" and rows["gone-learner-run"]["AGE"]
    # Named in resumeFrom by the new one, which then holds it.
    adopted = [_experiment("again", "u-old", resumeFrom="again-learner-run")]
    assert volume_rows([claims[2]], adopted)[0]["STATE"] == "in use by again"


def test_volumes_lists_and_reclaims_retained_claims(tmp_path, capsys):
    # The claim-protection controller lets a deleted claim go once no pod uses it.
    with OperatorHarness(
        NS, controllers=("persistentvolumeclaim-protection-controller",)
    ) as harness:
        live = LiveClient(harness, NS)
        kubeconfig = str(harness.cluster.kubeconfig(tmp_path / "kubeconfig", namespace=NS))
        live.create("kept")
        wait_for(lambda: live.job("kept"), STEP_S, "kept's learner Job")
        # What a deleted Experiment left.
        live.core.create_namespaced_persistent_volume_claim(NS, _claim("gone", "u-gone"))
        assert cli.main(["volumes", "--kubeconfig", kubeconfig]) == ExitCode.OK
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == ["NAMESPACE", "NAME", "SIZE", "EXPERIMENT", "STATE", "AGE"]
        rows = {line.split()[1]: line for line in table[1:]}
        assert "in use by kept" in rows["kept-learner-run"]
        assert "retained" in rows["gone-learner-run"]

        # One in use is refused, the claim left alone.
        assert (
            cli.main(["volumes", "--kubeconfig", kubeconfig, "delete", "kept-learner-run"])
            == ExitCode.BAD_CONFIG
        )
        assert "delete that Experiment first" in capsys.readouterr().err
        live.core.read_namespaced_persistent_volume_claim("kept-learner-run", NS)
        # A claim that is no run volume is not ours to delete.
        assert (
            cli.main(["volumes", "--kubeconfig", kubeconfig, "delete", "someone-elses"])
            == ExitCode.BAD_CONFIG
        )
        assert "not a run volume" in capsys.readouterr().err
        # The retained one goes.
        assert (
            cli.main(["volumes", "--kubeconfig", kubeconfig, "delete", "gone-learner-run"])
            == ExitCode.OK
        )
        assert "deleted run volume gone-learner-run" in capsys.readouterr().out

        def gone() -> bool:
            try:
                live.core.read_namespaced_persistent_volume_claim("gone-learner-run", NS)
            except kubernetes.client.ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, STEP_S, "the retained claim deleted")
