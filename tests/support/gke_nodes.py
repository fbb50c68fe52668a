"""The nodes of a GKE Standard cluster, as the tests' kubelet (:mod:`support.kubelet`)
registers them: labels, taints, capacity and allocatable as GKE sets them.

Sources (cloud.google.com/kubernetes-engine/docs): "Spot VMs" (label
``cloud.google.com/gke-spot: "true"``, no taint unless the pool asks for one), "Preemptible VMs"
(``cloud.google.com/gke-preemptible: "true"``), "About GPUs in GKE" (``nvidia.com/gpu`` chips,
the ``cloud.google.com/gke-accelerator`` label, the ``nvidia.com/gpu=present:NoSchedule`` taint),
"Plan TPUs in GKE" (``google.com/tpu`` chips, ``cloud.google.com/gke-tpu-accelerator`` and
``-topology`` labels, the ``google.com/tpu=present:NoSchedule`` taint; single-host slices
ct5lp-hightpu-4t for v5e and ct6e-standard-4t for v6e, 4 chips each in a 2x2 topology), and
"Plan GKE Standard node sizes" (what the kubelet keeps back from allocatable: CPU, memory and
the 100 MiB eviction threshold, :func:`gke_allocatable`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

REGION = "us-central1"
ZONES = (f"{REGION}-a", f"{REGION}-b", f"{REGION}-c")

#: Machine types: (vCPUs, memory GiB).
MACHINES = {
    "e2-standard-8": (8, 32),
    "g2-standard-8": (8, 32),
    "ct5lp-hightpu-4t": (24, 48),
    "ct6e-standard-4t": (180, 720),
}


def gke_allocatable(cpus: int, memory_gib: float) -> tuple[str, str]:
    """(cpu, memory) allocatable on a GKE node of this shape ("Plan GKE Standard node sizes:
    Allocatable resources"): CPU less 6% of the first core, 1% of the next, 0.5% of the next
    two and 0.25% of the rest; memory less 25% of the first 4 GiB, 20% of the next 4, 10% of
    the next 8, 6% of the next 112 and 2% above 128 GiB, and less the 100 MiB eviction
    threshold."""
    cores: list[tuple[float, float]] = [(1, 0.06), (1, 0.01), (2, 0.005), (cpus, 0.0025)]
    left: float = cpus
    reserved_cpu = 0.0
    for size, share in cores:
        take = min(left, size)
        reserved_cpu += take * share
        left -= take
    tiers = [(4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (memory_gib, 0.02)]
    left_gib, reserved_gib = memory_gib, 0.0
    for size, share in tiers:
        take = min(left_gib, size)
        reserved_gib += take * share
        left_gib -= take
    cpu_m = int(cpus * 1000 - round(reserved_cpu * 1000))
    memory_ki = int((memory_gib - reserved_gib) * 2**20) - 100 * 2**10
    return f"{cpu_m}m", f"{memory_ki}Ki"


@dataclass(frozen=True)
class NodePool:
    """A GKE node pool: its machine type, provisioning, accelerator labels, taint and chips."""

    name: str
    machine: str
    provisioning: str = "standard"  # "spot", "preemptible" (legacy) or "standard"
    labels: dict[str, str] = field(default_factory=dict)
    taint: dict[str, str] | None = None
    chips: dict[str, str] = field(default_factory=dict)


POOLS = {
    pool.name: pool
    for pool in (
        NodePool("cpu", "e2-standard-8"),
        NodePool("spot", "e2-standard-8", "spot"),
        NodePool("preemptible", "e2-standard-8", "preemptible"),
        NodePool(
            "gpu",
            "g2-standard-8",
            labels={
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "cloud.google.com/gke-gpu": "true",
            },
            taint={"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            chips={"nvidia.com/gpu": "1"},
        ),
        NodePool(
            "tpu-v5e",
            "ct5lp-hightpu-4t",
            labels={
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            taint={"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
            chips={"google.com/tpu": "4"},
        ),
        NodePool(
            "tpu-v6e",
            "ct6e-standard-4t",
            labels={
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            taint={"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
            chips={"google.com/tpu": "4"},
        ),
    )
}


@dataclass(frozen=True)
class NodeSpec:
    """One node to register: its name, pool and zone."""

    name: str
    pool: str
    zone: str = ZONES[0]

    def labels(self) -> dict[str, str]:
        """The labels GKE's kubelet registers the node with."""
        pool = POOLS[self.pool]
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": pool.machine,
            "topology.kubernetes.io/region": REGION,
            "topology.kubernetes.io/zone": self.zone,
            "cloud.google.com/gke-nodepool": pool.name,
            "cloud.google.com/gke-os-distribution": "cos",
            "cloud.google.com/machine-family": pool.machine.split("-")[0],
            "cloud.google.com/gke-provisioning": pool.provisioning,
            **pool.labels,
        }
        if pool.provisioning == "spot":
            labels["cloud.google.com/gke-spot"] = "true"
        elif pool.provisioning == "preemptible":
            labels["cloud.google.com/gke-preemptible"] = "true"
        return labels

    def taints(self) -> list[dict[str, str]]:
        """The taints the pool registers its nodes with."""
        taint = POOLS[self.pool].taint
        return [dict(taint)] if taint else []

    def resources(self) -> tuple[dict[str, str], dict[str, str]]:
        """(capacity, allocatable)."""
        pool = POOLS[self.pool]
        cpus, memory_gib = MACHINES[pool.machine]
        cpu, memory = gke_allocatable(cpus, memory_gib)
        capacity = {
            "cpu": str(cpus),
            "memory": f"{memory_gib * 2**20}Ki",
            "pods": "110",
            "ephemeral-storage": "100Gi",
            **pool.chips,
        }
        allocatable = {**capacity, "cpu": cpu, "memory": memory, "ephemeral-storage": "90Gi"}
        return capacity, allocatable

    @property
    def preemptible(self) -> bool:
        """Whether GKE may reclaim the VM (Spot, or legacy preemptible)."""
        return POOLS[self.pool].provisioning in ("spot", "preemptible")


#: A cluster of every kind of node: two on-demand CPU nodes and one Spot node in each of three
#: zones (a learner pinned to a zone by its disk still has a node to go to when one drains), a
#: legacy preemptible node, an L4 node and a v5e and a v6e TPU host.
GKE_CLUSTER = (
    *(NodeSpec(f"gke-cpu-{i}", "cpu", ZONES[i // 2]) for i in range(2 * len(ZONES))),
    *(NodeSpec(f"gke-spot-{i}", "spot", zone) for i, zone in enumerate(ZONES)),
    NodeSpec("gke-preemptible-0", "preemptible", ZONES[0]),
    NodeSpec("gke-gpu-0", "gpu", ZONES[1]),
    NodeSpec("gke-tpu-v5e-0", "tpu-v5e", ZONES[0]),
    NodeSpec("gke-tpu-v6e-0", "tpu-v6e", ZONES[1]),
)

__all__ = ["GKE_CLUSTER", "POOLS", "ZONES", "NodePool", "NodeSpec", "gke_allocatable"]
