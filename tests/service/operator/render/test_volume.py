"""The learner's run directory as a PersistentVolumeClaim (render/volume.py)."""

from __future__ import annotations

import pytest

from seedrl.common.config import ConfigError
from seedrl.service.operator.render import render


def test_the_run_volume_outlives_the_experiment_unless_asked(exp_of, by_kind, owner):
    claim = by_kind(render(exp_of(), owner, "team-a"))["PersistentVolumeClaim"]
    # No owner reference: `kubectl delete experiment` and `helm uninstall` leave the claim,
    # and GKE's default StorageClass (reclaim Delete) keeps its disk.
    assert "ownerReferences" not in claim["metadata"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    deleted = by_kind(
        render(
            exp_of(checkpoint={"volumeRetention": "Delete", "volumeStorageClassName": "ssd"}),
            owner,
            "team-a",
        )
    )["PersistentVolumeClaim"]
    assert deleted["metadata"]["ownerReferences"] == [owner]
    assert deleted["spec"]["storageClassName"] == "ssd"
    with pytest.raises(ConfigError, match="spec.checkpoint.volumeRetention"):
        exp_of(checkpoint={"volumeRetention": "Forget"})


def test_without_a_checkpoint_uri_the_run_directory_outlives_the_pod(exp_of, by_kind):
    objs = by_kind(render(exp_of(checkpoint={"volumeSize": "5Gi"})))
    claim = objs["PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    volumes = {v["name"]: v for v in objs["Job"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["run"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    actor_volumes = {
        v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    }
    assert actor_volumes["run"] == {"name": "run", "emptyDir": {}}
    with_uri = by_kind(render(exp_of(checkpoint={"uri": "gs://bucket/runs/x"})))
    assert "PersistentVolumeClaim" not in with_uri
    volumes = {v["name"]: v for v in with_uri["Job"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["run"] == {"name": "run", "emptyDir": {}}
