"""The whole Experiment document: :class:`Experiment` (``apiVersion``, ``kind``,
:class:`Metadata`) and its :class:`Spec`, which gathers the sections of the other modules.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from seedrl.common.config.actors import ActorsConfig, envs_per_stream
from seedrl.common.config.agent import AgentConfig
from seedrl.common.config.budget import BudgetConfig
from seedrl.common.config.checkpoint import CheckpointConfig
from seedrl.common.config.cluster import API_VERSION, KIND
from seedrl.common.config.env import EnvConfig
from seedrl.common.config.fields import DNS_LABEL, param
from seedrl.common.config.learner import LearnerConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """What to train and with which resources (``spec``)."""

    seed: int = param(
        0,
        "Seed of the environments and the learner's sampling: 0 to 2^63-1 (an int64, as the "
        "CRD stores it; the learner's and the actors' generators take any of them).",
        ge=0,
    )
    env: EnvConfig = param(doc="The environment.", factory=EnvConfig)
    agent: AgentConfig = param(doc="The agent and its network.", factory=AgentConfig)
    learner: LearnerConfig = param(doc="The learner.", factory=LearnerConfig)
    actors: ActorsConfig = param(doc="The actors.", factory=ActorsConfig)
    checkpoint: CheckpointConfig = param(doc="Checkpoints.", factory=CheckpointConfig)
    budget: BudgetConfig = param(doc="When to stop.", factory=BudgetConfig)
    # Cluster-only fields: the operator reads them, the local launcher ignores them.
    service_account_name: str = param(
        "",
        "Kubernetes service account of the learner pod, e.g. one bound to a Google "
        "service account through Workload Identity for gs:// checkpoints; empty uses the "
        "namespace's default. The actors do not run as it (spec.actors.serviceAccountName).",
        pattern=f"({DNS_LABEL}(\\.{DNS_LABEL})*)?",
        pattern_hint="a DNS subdomain",
        max_len=253,
    )
    suspend: bool = param(
        False,
        "Suspend the experiment: the learner checkpoints and stops "
        "and the actors scale to zero; false resumes from the "
        "checkpoint.",
    )
    active_deadline_seconds: Optional[int] = param(
        None, "Fail the learner once it has run this long in the cluster; null: no deadline.", ge=1
    )
    backoff_limit: int = param(
        6,
        "Learner restarts (each resuming from the last checkpoint) "
        "before the experiment is marked Failed.",
        ge=0,
    )
    ttl_seconds_after_finished: Optional[int] = param(
        None, "Delete the finished learner Job this long after it ends; null keeps it.", ge=0
    )
    queue_name: str = param(
        "",
        "Kueue LocalQueue to admit the experiment through (label "
        "kueue.x-k8s.io/queue-name on the learner Job); empty: no "
        "queue.",
        pattern=f"({DNS_LABEL})?",
        max_len=63,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Metadata:
    """Kubernetes object metadata (``metadata``)."""

    name: str = param(
        doc="Experiment name: a DNS-1123 label (lowercase letters, digits and "
        "'-'). Required, with no default, because it names the run directory "
        "and every Kubernetes object of the experiment.",
        pattern=DNS_LABEL,
        max_len=63,
    )
    namespace: Optional[str] = param(
        None, "Kubernetes namespace; ignored by the local launcher.", pattern=DNS_LABEL, max_len=63
    )
    labels: dict[str, str] = param(doc="Kubernetes labels, copied onto every object.", factory=dict)
    annotations: dict[str, str] = param(doc="Kubernetes annotations.", factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Experiment:
    """A whole Experiment document."""

    api_version: str = param(
        API_VERSION, "Schema version of this document.", choices=(API_VERSION,)
    )
    kind: str = param(KIND, "Always Experiment.", choices=(KIND,))
    metadata: Metadata = param(doc="Name and Kubernetes metadata.")
    spec: Spec = param(doc="What to train and how.", factory=Spec)


def stream_envs_limit(spec: Spec) -> int:
    """The most envs the learner accepts in one stream's hello: ``spec.learner.maxEnvsPerActor``,
    or, when that is null, what one stream of the Experiment's own actors steps."""
    cap = spec.learner.max_envs_per_actor
    return envs_per_stream(spec.actors) if cap is None else cap
