"""The labels and owner references every child carries (render/common.py)."""

from __future__ import annotations

from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import LABEL_EXPERIMENT


def test_children_have_owner_references_and_labels(exp_of, owner):
    objects = render(exp_of(), owner, "team-a")
    assert [o["kind"] for o in objects] == [
        "ConfigMap",
        "PersistentVolumeClaim",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Job",
        "Deployment",
    ]
    for obj in objects:
        # The run volume holds the checkpoints: the garbage collector must not take it with
        # the Experiment (test_the_run_volume_outlives_the_experiment_unless_asked).
        owned = obj["kind"] != "PersistentVolumeClaim"
        assert obj["metadata"].get("ownerReferences") == ([owner] if owned else None)
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"][LABEL_EXPERIMENT] == "exp"
