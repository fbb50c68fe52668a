"""Cloud TPUs for the learner: the table of TPU generations GKE schedules
(:data:`TPU_GENERATIONS`), the ``spec.learner.accelerator.tpu`` section (:class:`TPUConfig`),
and its rule, a slice one learner pod fits on, both in Python (:func:`tpu_problems`) and as the
CRD's CEL twin (:func:`tpu_cel_rules`).
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.fields import param


@dataclasses.dataclass(frozen=True)
class TPUGeneration:
    """One Cloud TPU generation as GKE schedules it.

    Attributes:
      name: the generation, e.g. ``v5e``.
      chips_per_host: the most chips one TPU VM (one Kubernetes node) has.
      single_host_topologies: the topologies of a slice that is one VM, hence one pod: the
        only ones a single learner pod can be scheduled on.
    """

    name: str
    chips_per_host: int
    single_host_topologies: tuple[str, ...]


#: The TPU generations a learner can run on, by GKE accelerator (the node label
#: cloud.google.com/gke-tpu-accelerator, ``spec.learner.accelerator.tpu.type``), with their
#: single-host topologies. From GKE's "Plan TPUs in GKE", the table of TPU versions, machine
#: types and topologies (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus):
#: v4 (ct4p-hightpu-4t) and v5p (ct5p-hightpu-4t) VMs hold 4 chips, so 2x2x1 is their one
#: single-host topology and 2x2x2 already spans 2 VMs; v5e (ct5lp-hightpu-1t/4t/8t) and v6e
#: (ct6e-standard-1t/4t/8t) VMs hold 1, 4 or 8 chips: 1x1, 2x2 and 2x4 are single-host, 4x4
#: and larger span several. (v5e's serving-only tpu-v5-lite-device is left out.) A larger,
#: multi-host slice is several pods, which one learner is not.
TPU_GENERATIONS: dict[str, TPUGeneration] = {
    "tpu-v4-podslice": TPUGeneration("v4", 4, ("2x2x1",)),
    "tpu-v5-lite-podslice": TPUGeneration("v5e", 8, ("1x1", "2x2", "2x4")),
    "tpu-v5p-slice": TPUGeneration("v5p", 4, ("2x2x1",)),
    "tpu-v6e-slice": TPUGeneration("v6e", 8, ("1x1", "2x2", "2x4")),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TPUConfig:
    """A Cloud TPU slice on GKE for the learner (``spec.learner.accelerator.tpu``): a single
    TPU VM host, selected by the node labels cloud.google.com/gke-tpu-accelerator and
    cloud.google.com/gke-tpu-topology."""

    type: str = param(
        "tpu-v5-lite-podslice",
        "GKE TPU accelerator, one of: "
        + ", ".join(f"{name} ({g.name})" for name, g in TPU_GENERATIONS.items())
        + ".",
        pattern=r"tpu-[a-z0-9-]+",
        pattern_hint="a GKE TPU accelerator name such as tpu-v5-lite-podslice",
        max_len=63,
    )
    topology: str = param(
        "2x2",
        "Slice topology: one host's, since the learner is one pod: "
        + "; ".join(
            f"{g.name} " + ", ".join(g.single_host_topologies) for g in TPU_GENERATIONS.values()
        )
        + ". The learner requests its product in google.com/tpu chips.",
        pattern=r"[1-9][0-9]*(x[1-9][0-9]*){1,2}",
        pattern_hint="dimensions joined by x, e.g. 2x4",
        max_len=32,
    )


def tpu_problems(tpu: TPUConfig) -> list[tuple[str, str]]:
    """Why a learner's TPU slice cannot be scheduled as one pod (empty if it can): an unknown
    TPU accelerator, or a topology that is not single-host for its generation (see
    :data:`TPU_GENERATIONS`). Each message lists the valid choices."""
    generation = TPU_GENERATIONS.get(tpu.type)
    if generation is None:
        known = ", ".join(f"{name} ({g.name})" for name, g in TPU_GENERATIONS.items())
        return [
            (
                "spec.learner.accelerator.tpu.type",
                f"unknown TPU accelerator {tpu.type!r}; one of: {known}",
            )
        ]
    if tpu.topology in generation.single_host_topologies:
        return []
    valid = ", ".join(generation.single_host_topologies)
    dims = len(generation.single_host_topologies[0].split("x"))
    chips = tpu_chips(tpu.topology)
    if len(tpu.topology.split("x")) != dims:
        why = f"is not a {generation.name} slice shape ({dims} dimensions)"
    elif chips > generation.chips_per_host:
        hosts = -(-chips // generation.chips_per_host)
        why = f"spans {hosts} hosts"
    else:
        why = "is not a single-host slice"
    return [
        (
            "spec.learner.accelerator.tpu.topology",
            f"{generation.name} {tpu.topology} {why}; single-host {generation.name} "
            f"topologies: {valid}",
        )
    ]


def tpu_cel_rules() -> list[dict[str, str]]:
    """The rules of :func:`tpu_problems` as CEL, for the CRD's ``x-kubernetes-validations`` on
    ``spec.learner.accelerator``, so that the API server refuses what ``seedrl validate``
    refuses (``kubectl apply`` included). One rule per generation: a CRD rule's message is
    fixed text, and each lists that generation's valid topologies."""

    def quoted(items):
        return "[" + ", ".join(f"'{item}'" for item in items) + "]"

    guard = "!has(self.kind) || self.kind != 'tpu' || !has(self.tpu) || !has(self.tpu.type)"
    known = ", ".join(f"{name} ({g.name})" for name, g in TPU_GENERATIONS.items())
    rules = [
        {
            "rule": f"{guard} || self.tpu.type in {quoted(TPU_GENERATIONS)}",
            "message": f"unknown TPU accelerator in tpu.type; one of: {known}",
            "fieldPath": ".tpu.type",
            "reason": "FieldValueInvalid",
        }
    ]
    for name, generation in TPU_GENERATIONS.items():
        valid = generation.single_host_topologies
        rules.append(
            {
                "rule": f"{guard} || self.tpu.type != '{name}' || !has(self.tpu.topology) || "
                f"self.tpu.topology in {quoted(valid)}",
                "message": f"tpu.topology: a {name} learner must fit one {generation.name} host "
                f"({generation.chips_per_host} chips; larger slices span several "
                f"hosts); single-host {generation.name} topologies: "
                f"{', '.join(valid)}",
                "fieldPath": ".tpu.topology",
                "reason": "FieldValueInvalid",
            }
        )
    return rules


def tpu_chips(topology: str) -> int:
    """The number of chips in a TPU topology such as ``2x4`` (the product of its dimensions)."""
    chips = 1
    for dim in topology.split("x"):
        chips *= int(dim)
    return chips
