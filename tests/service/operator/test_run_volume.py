"""The learner's run volume over its life, on the real API server with the real operator
(issue 37 item 5): a claim an earlier Experiment of the same name left is never taken without
``spec.checkpoint.resumeFrom`` naming it; ``volumeRetention`` and ``volumeSize`` edits reach
the running Experiment's claim (owner reference; expansion, or a Warning quoting why not)
without replacing its learner."""

from __future__ import annotations

import copy

import kubernetes
import pytest

from seedrl.common.config import parse_experiment
from seedrl.service.operator.render.common import owner_reference
from seedrl.service.operator.render.volume import ANNOTATION_RUN_OF, render_run_volume
from seedrl.service.operator.status import condition
from support.operator_harness import OperatorHarness, wait_for
from support.operator_live import CARTPOLE, STEP_S, LiveClient

pytestmark = pytest.mark.cluster

NS = "volumes"


def _claim(live: LiveClient, name: str) -> dict | None:
    try:
        claim = live.core.read_namespaced_persistent_volume_claim(name, NS)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return live.api.sanitize_for_serialization(claim)


def _spec_applied(live: LiveClient, name: str) -> dict:
    return condition(live.status(name), "SpecApplied") or {}


def _reasons(live: LiveClient, name: str) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in live.events(name)]


def test_a_claim_an_earlier_experiment_left_is_taken_only_when_named():
    with OperatorHarness(NS) as harness:
        live = LiveClient(harness, NS)
        # What `kubectl delete experiment again` left with volumeRetention Retain: the claim,
        # recording the deleted Experiment's run.
        earlier = copy.deepcopy(CARTPOLE)
        earlier["metadata"] = {"name": "again", "namespace": NS}
        claim = render_run_volume(
            parse_experiment(earlier), owner_reference("again", "uid-of-the-deleted-one"), NS
        )
        live.core.create_namespaced_persistent_volume_claim(NS, claim)

        live.create("again")
        held = wait_for(
            lambda: (c := _spec_applied(live, "again")).get("reason") == "RunVolumeHeld" and c,
            STEP_S,
            "SpecApplied=False, RunVolumeHeld",
        )
        assert held["status"] == "False"
        assert "spec.checkpoint.resumeFrom: again-learner-run" in held["message"]
        assert "seedrl volumes delete again-learner-run -n volumes" in held["message"]
        # Nothing runs meanwhile, over a few polls.
        polls = harness.polls()
        wait_for(lambda: harness.polls() >= polls + 5, STEP_S, "a few polls")
        assert live.job("again") is None
        assert (_claim(live, "again-learner-run") or {})["metadata"]["annotations"][
            ANNOTATION_RUN_OF
        ] == "uid-of-the-deleted-one"

        # Named: resumed from, and recorded as this Experiment's.
        live.patch_spec("again", {"checkpoint": {"resumeFrom": "again-learner-run"}})
        job = wait_for(lambda: live.job("again"), STEP_S, "the learner Job")
        volumes = job["spec"]["template"]["spec"]["volumes"]
        assert {"name": "run", "persistentVolumeClaim": {"claimName": "again-learner-run"}} in (
            volumes
        )
        uid = live.get("again")["metadata"]["uid"]
        recorded = (_claim(live, "again-learner-run") or {})["metadata"]["annotations"]
        assert recorded[ANNOTATION_RUN_OF] == uid
        wait_for(
            lambda: _spec_applied(live, "again").get("status") == "True", STEP_S, "SpecApplied"
        )
        wait_for(
            lambda: any(r == "ResumingFromRunVolume" for r, _ in _reasons(live, "again")),
            STEP_S,
            "a ResumingFromRunVolume Event",
        )

        # A new Experiment without a claim makes its own, recorded as its run.
        live.create("fresh")
        wait_for(lambda: live.job("fresh"), STEP_S, "fresh's learner Job")
        made = wait_for(lambda: _claim(live, "fresh-learner-run"), STEP_S, "fresh's claim")
        assert (
            made["metadata"]["annotations"][ANNOTATION_RUN_OF]
            == (live.get("fresh")["metadata"]["uid"])
        )
        wait_for(
            lambda: _spec_applied(live, "fresh").get("status") == "True", STEP_S, "SpecApplied"
        )


def test_retention_and_size_edits_reach_the_claim_and_replace_no_learner():
    with OperatorHarness(NS) as harness:
        live = LiveClient(harness, NS)
        live.create("kept")
        job = wait_for(lambda: live.job("kept"), STEP_S, "the learner Job")
        claim = wait_for(lambda: _claim(live, "kept-learner-run"), STEP_S, "the claim")
        uid = live.get("kept")["metadata"]["uid"]
        assert not claim["metadata"].get("ownerReferences")  # Retain, the default

        live.patch_spec("kept", {"checkpoint": {"volumeRetention": "Delete"}})
        wait_for(
            lambda: (
                [
                    r["uid"]
                    for r in (_claim(live, "kept-learner-run") or {})["metadata"].get(
                        "ownerReferences"
                    )
                    or []
                ]
                == [uid]
            ),
            STEP_S,
            "the claim owned by its Experiment (deleted with it)",
        )
        live.patch_spec("kept", {"checkpoint": {"volumeRetention": "Retain"}})
        wait_for(
            lambda: not (_claim(live, "kept-learner-run") or {})["metadata"].get("ownerReferences"),
            STEP_S,
            "the claim retained again",
        )

        # An unbound claim cannot grow (the API server changes only a bound claim's request):
        # a Warning says why, and the run goes on.
        live.patch_spec("kept", {"checkpoint": {"volumeSize": "20Gi"}})
        warning = wait_for(
            lambda: [m for r, m in _reasons(live, "kept") if r == "VolumeNotExpanded"],
            STEP_S,
            "a VolumeNotExpanded Warning",
        )
        assert "stays 10Gi" in warning[0] and "not bound" in warning[0], warning
        # Smaller than the claim: said once, nothing asked of the API server.
        live.patch_spec("kept", {"checkpoint": {"volumeSize": "5Gi"}})
        wait_for(
            lambda: [m for r, m in _reasons(live, "kept") if r == "VolumeNotShrunk"],
            STEP_S,
            "a VolumeNotShrunk Warning",
        )
        assert (live.job("kept") or {})["metadata"]["uid"] == job["metadata"]["uid"]
        assert _spec_applied(live, "kept")["status"] == "True"


def test_a_bound_claim_of_an_expandable_class_grows_with_volume_size(tmp_path):
    with OperatorHarness(NS, controllers=("persistentvolume-binder-controller",)) as harness:
        live = LiveClient(harness, NS)
        storage = kubernetes.client.StorageV1Api(harness.api)
        storage.create_storage_class(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "expandable"},
                "provisioner": "pd.csi.storage.gke.io",
                "allowVolumeExpansion": True,
                "volumeBindingMode": "Immediate",
            }
        )
        # A disk made for the claim, which the real PersistentVolume controller binds.
        live.core.create_persistent_volume(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "grow-disk"},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "expandable",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "claimRef": {"namespace": NS, "name": "grow-learner-run"},
                    "hostPath": {"path": str(tmp_path)},
                },
            }
        )
        live.create("grow", checkpoint={"volumeStorageClassName": "expandable"})
        job = wait_for(lambda: live.job("grow"), STEP_S, "the learner Job")
        wait_for(
            lambda: (
                (_claim(live, "grow-learner-run") or {}).get("status", {}).get("phase") == "Bound"
            ),
            STEP_S,
            "the claim bound",
        )
        live.patch_spec(
            "grow", {"checkpoint": {"volumeStorageClassName": "expandable", "volumeSize": "20Gi"}}
        )
        wait_for(
            lambda: (
                (_claim(live, "grow-learner-run") or {})["spec"]["resources"]["requests"]["storage"]
                == "20Gi"
            ),
            STEP_S,
            "the claim asked to grow",
        )
        wait_for(
            lambda: any(r == "VolumeExpanding" for r, _ in _reasons(live, "grow")),
            STEP_S,
            "a VolumeExpanding Event",
        )
        assert (live.job("grow") or {})["metadata"]["uid"] == job["metadata"]["uid"]
