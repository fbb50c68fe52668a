"""The actors that step environments (``spec.actors``): how many, their envs and streams,
their image (:func:`actor_image`) and their pods.
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.cluster import ACTOR_IMAGE, RELEASE_IMAGES, ImageDefaults
from seedrl.common.config.fields import DNS_LABEL, IMAGE_PATTERN, param
from seedrl.common.config.placement import PlacementConfig, ResourcesConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorsConfig:
    """The actors that step environments (``spec.actors``)."""

    replicas: int = param(
        2,
        "Actor processes (pods in a cluster), one gRPC stream each; at most 2^31-1, as the "
        "scale subresource (kubectl scale, HorizontalPodAutoscalers) counts them in an int32.",
        ge=1,
        le=2**31 - 1,
    )
    envs_per_actor: int = param(
        8,
        "Environments stepped by each actor; one message carries one step of all of them.",
        ge=1,
        le=4096,
    )
    streams_per_actor: int = param(
        1,
        "gRPC streams each actor keeps in flight, each with its share of the envs: while the "
        "learner answers one stream, the actor steps the envs of another. Helps when env "
        "steps are slow next to a round trip; for CartPole, 2 measured slower than 1.",
        ge=1,
        le=64,
    )
    processes_per_actor: int = param(
        0,
        "Worker processes that step each actor's environments in parallel, exchanging "
        "arrays through shared memory; 0 steps them inside the actor process (best for "
        "environments much cheaper than a process wake-up, like CartPole).",
        ge=0,
        le=256,
    )
    image: str = param(
        "",
        f"Container image of the actors in a cluster; empty: the release's actor image "
        f"({ACTOR_IMAGE} for this release, from the operator's registry), the same release "
        f"as the learner's.",
        pattern=f"({IMAGE_PATTERN})?",
        pattern_hint="an image reference, or empty",
        max_len=512,
    )
    resources: ResourcesConfig = param(
        doc="Each actor container's resources in a cluster.", factory=ResourcesConfig
    )
    placement: PlacementConfig = param(
        doc="Where the actor pods may run in a cluster.", factory=PlacementConfig
    )
    spot: bool = param(
        False,
        "Run actors on GKE Spot VMs (node label cloud.google.com/gke-"
        "spot): much cheaper, and a preempted actor only costs its "
        "in-flight unrolls.",
    )
    service_account_name: str = param(
        "",
        "Kubernetes service account of the actor pods; empty uses the namespace's default. "
        "Never spec.serviceAccountName (the learner's): actors run environment code and "
        "need no cloud credentials, so with Workload Identity they must not get the "
        "learner's access to the checkpoint bucket.",
        pattern=f"({DNS_LABEL}(\\.{DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    metrics_port: int = param(
        9091,
        "TCP port of each actor's HTTP endpoint in a cluster: GET "
        "/metrics (Prometheus). The local launcher picks free "
        "ports instead.",
        ge=1,
        le=65535,
    )


def actor_image(actors: ActorsConfig, defaults: ImageDefaults = RELEASE_IMAGES) -> str:
    """The actors' container image: ``spec.actors.image`` when set, else the release's."""
    return actors.image or defaults.actors()


def envs_per_stream(actors: ActorsConfig) -> int:
    """The most envs one stream of an actor steps: its envs split over its streams, the
    larger share first (``envsPerActor / streamsPerActor``, rounded up)."""
    return -(-actors.envs_per_actor // max(1, min(actors.streams_per_actor, actors.envs_per_actor)))
