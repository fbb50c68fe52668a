"""Deriving an Experiment's env spec before its learner Job exists: the env-spec Job
(:mod:`seedrl.service.operator.render.env_spec`) makes the env with the actors' image and
identity and reports the spec in its pod's termination message; :class:`EnvSpecs` copies it
into the ConfigMap the learner pod mounts, and says where that stands
(:class:`EnvSpecProgress`), which the status reports until the learner Job is created.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from seedrl.common.config import Experiment, ImageDefaults
from seedrl.service.operator.render.common import (
    ENV_SPEC_CONTAINER,
    ENV_SPEC_ROLE,
    LABEL_ROLE,
    names,
)
from seedrl.service.operator.render.env_spec import (
    render_env_spec_config_map,
    render_env_spec_job,
)

if TYPE_CHECKING:  # the status module reads the progress without the kubernetes client
    from seedrl.service.operator.children import Children

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EnvSpecProgress:
    """Where the env spec of a learner not started yet stands.

    Attributes:
      ready: its ConfigMap holds the spec: the learner pod can mount it.
      failed: when the derivation failed, a Failed condition (``reason``, ``message``,
        ``lastTransitionTime``): the env-spec Job's own, or the operator's when the spec the
        pod reported cannot be read.
      job: the env-spec Job as read (None once the spec is ready, or before it is made).
      pods: that Job's pods, for the reason a pod waits or failed.
      spec_json: the spec its pod reported (JSON, or compressed when long:
        :meth:`~seedrl.common.wire.EnvSpec.to_message`), once the Job has succeeded, to copy
        into the ConfigMap.
    """

    ready: bool
    failed: Mapping[str, Any] | None = None
    job: Mapping[str, Any] | None = None
    pods: tuple[Mapping[str, Any], ...] = ()
    spec_json: str | None = None

    @property
    def actionable(self) -> bool:
        """Whether the operator has work to do: make the Job, copy its spec, make it again
        (its pod is gone) or stop a learner whose spec will never come."""
        if self.ready:
            return False
        return self.job is None or self.failed is not None or self.complete

    @property
    def complete(self) -> bool:
        """The env-spec Job has succeeded."""
        return job_condition(self.job, "Complete") is not None


#: The progress of an Experiment whose env spec is in its ConfigMap.
READY = EnvSpecProgress(ready=True)


def job_condition(job: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """A Job's condition of that type when True, else None."""
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


#: The most the kubelet keeps of a termination message.
TERMINATION_MESSAGE_BYTES = 4096


def reported_spec(pods: list[Mapping[str, Any]] | tuple) -> tuple[str | None, str | None]:
    """(the env spec message, None) from the termination message of the env-spec Job's pod
    that succeeded, or (None, why not) when there is none. The message is copied as it is:
    the learner reads it (:meth:`seedrl.common.wire.EnvSpec.read`) and refuses one that is no
    spec with BAD_CONFIG, which fails the run with its reason (the operator image has none
    of the wire format's packages)."""
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != ENV_SPEC_CONTAINER:
                continue
            term = (status.get("state") or {}).get("terminated") or {}
            message = (term.get("message") or "").strip()
            if not message or len(message.encode()) > TERMINATION_MESSAGE_BYTES:
                return None, f"pod {pod['metadata']['name']} reported no env spec"
            return message + "\n", None
    return None, "no pod of the env-spec Job that succeeded is left to read"


class EnvSpecs:
    """Makes sure an Experiment's env spec is in its ConfigMap before its learner Job is
    created, running the env-spec Job when it is not."""

    def __init__(self, children: "Children"):
        self.children = children
        #: uids of the Experiments whose spec is in their ConfigMap: not looked up again.
        self._ready: set[str] = set()

    def progress(
        self,
        exp: Experiment,
        namespace: str,
        now: str,
        uid: str = "",
        cached: tuple[dict | None, list[dict]] | None = None,
    ) -> EnvSpecProgress:
        """Where the env spec stands, as read (nothing is written).

        ``cached``: the env-spec Job and the Experiment's pods as the watches delivered them
        (the poller's cache), read instead of the API server. A learner pod may wait for a
        node for hours; reading the Job and its pods at every poll meanwhile was three
        requests per poll. The ConfigMap is then read only once the Job has completed (the
        operator writes it after that), and never again once found."""
        n = names(exp.metadata.name)
        if uid and uid in self._ready:
            return READY
        job: dict | None
        if cached is not None:
            job = cached[0]
            waiting = job is not None and job_condition(job, "Complete") is None
        else:
            job, waiting = None, False
        if not waiting and self.children.read("ConfigMap", namespace, n.env_spec) is not None:
            if uid:
                self._ready.add(uid)
            return READY
        if cached is None:
            job = self.children.read("Job", namespace, n.env_spec)
        if job is None:
            return EnvSpecProgress(ready=False)
        if cached is not None:
            pods = tuple(
                p
                for p in cached[1]
                if (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == ENV_SPEC_ROLE
            )
        else:
            pods = tuple(self.children.pods(namespace, f"job-name={n.env_spec}"))
        failed = job_condition(job, "Failed")
        if failed is not None or job_condition(job, "Complete") is None:
            return EnvSpecProgress(ready=False, failed=failed, job=job, pods=pods)
        if not any((p.get("status") or {}).get("phase") == "Succeeded" for p in pods):
            return EnvSpecProgress(ready=False, job=job, pods=pods)
        text, why = reported_spec(pods)
        if text is None:
            failed = {
                "type": "Failed",
                "status": "True",
                "reason": "EnvSpecUnreadable",
                "message": f"The env-spec Job {n.env_spec} succeeded, but {why}.",
                "lastTransitionTime": now,
            }
        return EnvSpecProgress(ready=False, failed=failed, job=job, pods=pods, spec_json=text)

    def ensure(
        self,
        exp: Experiment,
        namespace: str,
        owner: Mapping[str, Any],
        images: ImageDefaults,
        now: str,
    ) -> EnvSpecProgress:
        """Does what :meth:`progress` finds to do: creates the env-spec Job, or, once it has
        succeeded, copies its pod's spec into the ConfigMap (or, its pod gone, deletes it to
        derive the spec again). Returns where that leaves it."""
        progress = self.progress(exp, namespace, now)
        if not progress.actionable or progress.failed is not None:
            return progress
        n = names(exp.metadata.name)
        if progress.job is None:
            self.children.create(render_env_spec_job(exp, owner, namespace, images))
            log.info("Experiment %s/%s: deriving its env spec", namespace, exp.metadata.name)
            return progress
        if progress.spec_json is None:
            # Its pod is gone (the pod garbage collector's threshold, a manual delete): derive
            # the spec again rather than fail a run for it.
            self.children.delete("Job", namespace, n.env_spec)
            return EnvSpecProgress(ready=False, pods=progress.pods)
        self.children.create(render_env_spec_config_map(exp, progress.spec_json, owner, namespace))
        log.info("Experiment %s/%s: env spec derived", namespace, exp.metadata.name)
        if owner.get("uid"):
            self._ready.add(str(owner["uid"]))
        return READY

    def forget(self, uid: str | None) -> None:
        """Drops what is remembered of a gone Experiment."""
        self._ready.discard(uid or "")


__all__ = [
    "READY",
    "EnvSpecProgress",
    "EnvSpecs",
    "job_condition",
    "reported_spec",
]
