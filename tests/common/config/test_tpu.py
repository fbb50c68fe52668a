"""TPU slices a learner pod can be scheduled on (common/config/tpu.py)."""

from __future__ import annotations

import pytest

from seedrl.common.config import (
    TPU_GENERATIONS,
    TPUConfig,
    parse_experiment,
    tpu_chips,
    tpu_problems,
)
from support.experiment_docs import assert_one, doc


#: Every TPU shape a user could type that no single-host node pool schedules, with the field
#: refused and what the message must say (it always lists the valid choices).
UNSCHEDULABLE_TPUS = [
    (
        "tpu-v4-podslice",
        "2x2x2",
        "topology",
        "v4 2x2x2 spans 2 hosts; single-host v4 topologies: 2x2x1",
    ),
    (
        "tpu-v4-podslice",
        "2x2x4",
        "topology",
        "v4 2x2x4 spans 4 hosts; single-host v4 topologies: 2x2x1",
    ),
    ("tpu-v4-podslice", "4x4x4", "topology", "spans 16 hosts; single-host v4 topologies: 2x2x1"),
    (
        "tpu-v4-podslice",
        "2x2",
        "topology",
        "v4 2x2 is not a v4 slice shape (3 dimensions); single-host v4 topologies: 2x2x1",
    ),
    (
        "tpu-v5p-slice",
        "2x2x2",
        "topology",
        "v5p 2x2x2 spans 2 hosts; single-host v5p topologies: 2x2x1",
    ),
    (
        "tpu-v5p-slice",
        "2x4x4",
        "topology",
        "v5p 2x4x4 spans 8 hosts; single-host v5p topologies: 2x2x1",
    ),
    (
        "tpu-v5-lite-podslice",
        "2x2x1",
        "topology",
        "v5e 2x2x1 is not a v5e slice shape (2 dimensions); "
        "single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v5-lite-podslice",
        "4x4",
        "topology",
        "v5e 4x4 spans 2 hosts; single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v5-lite-podslice",
        "1x2",
        "topology",
        "v5e 1x2 is not a single-host slice; single-host v5e topologies: 1x1, 2x2, 2x4",
    ),
    (
        "tpu-v6e-slice",
        "4x4",
        "topology",
        "v6e 4x4 spans 2 hosts; single-host v6e topologies: 1x1, 2x2, 2x4",
    ),
    ("tpu-v6e-slice", "8x16", "topology", "spans 16 hosts; single-host v6e topologies"),
    (
        "tpu-v3-podslice",
        "2x2",
        "type",
        "unknown TPU accelerator 'tpu-v3-podslice'; one of: tpu-v4-podslice (v4), "
        "tpu-v5-lite-podslice (v5e), tpu-v5p-slice (v5p), tpu-v6e-slice (v6e)",
    ),
    ("tpu-v7x", "2x2x1", "type", "unknown TPU accelerator 'tpu-v7x'; one of:"),
]


SCHEDULABLE_TPUS = [
    (name, topology) for name, g in TPU_GENERATIONS.items() for topology in g.single_host_topologies
]


@pytest.mark.parametrize("tpu_type,topology,field,message", UNSCHEDULABLE_TPUS)
def test_unschedulable_tpu_shapes_are_refused_with_the_valid_choices(
    tpu_type, topology, field, message
):
    document = doc(
        learner={"accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}}
    )
    assert_one(document, f"spec.learner.accelerator.tpu.{field}", message)
    # The TPU section of a learner that is not on a TPU does not matter.
    document["spec"]["learner"]["accelerator"]["kind"] = "cpu"
    parse_experiment(document)


@pytest.mark.parametrize("tpu_type,topology", SCHEDULABLE_TPUS)
def test_every_single_host_tpu_shape_is_accepted(tpu_type, topology):
    exp = parse_experiment(
        doc(
            learner={
                "accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}
            }
        )
    )
    generation = TPU_GENERATIONS[tpu_type]
    assert tpu_chips(topology) <= generation.chips_per_host
    assert exp.spec.learner.accelerator.tpu.topology == topology


def test_the_tpu_table_is_what_gke_documents():
    # Chips per VM and the single-host shapes of "Plan TPUs in GKE": v4 and v5p VMs hold 4
    # chips, v5e and v6e VMs up to 8.
    assert {
        name: (g.name, g.chips_per_host, g.single_host_topologies)
        for name, g in TPU_GENERATIONS.items()
    } == {
        "tpu-v4-podslice": ("v4", 4, ("2x2x1",)),
        "tpu-v5-lite-podslice": ("v5e", 8, ("1x1", "2x2", "2x4")),
        "tpu-v5p-slice": ("v5p", 4, ("2x2x1",)),
        "tpu-v6e-slice": ("v6e", 8, ("1x1", "2x2", "2x4")),
    }
    # The default TPU section is schedulable.
    assert not tpu_problems(TPUConfig())
