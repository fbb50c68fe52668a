"""The learner's run volume once its claim exists: whose run it holds, its size and retention.

A claim that ``spec.checkpoint.volumeRetention: Retain`` kept outlives its Experiment, and an
Experiment of the same name would find it under the name it makes its own claim by
(``<name>-learner-run``) and resume from checkpoints that are not its own, or fail when they
were bound to another env or agent. So each claim records whose run it holds
(:data:`~seedrl.service.operator.render.volume.ANNOTATION_RUN_OF`, an Experiment's uid), and a
claim of another Experiment is used only when ``spec.checkpoint.resumeFrom`` names it; it is
then this Experiment's, recorded so. A claim made by an earlier release has no record: it is
the Experiment's own when made after it (the operator makes the claim for an Experiment that
exists), an earlier Experiment's otherwise.

Edits that the claim can follow are made on it: a larger ``volumeSize`` asks for the claim's
expansion (which the API server allows for a bound claim whose StorageClass has
``allowVolumeExpansion``; otherwise a Warning Event says why and the run goes on at the old
size), and ``volumeRetention`` adds or removes the Experiment's owner reference.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import kubernetes

from seedrl.common.config import Experiment
from seedrl.common.quantity import parse_quantity
from seedrl.service.operator.render.volume import ANNOTATION_RUN_OF, run_volume_claim

if TYPE_CHECKING:
    from seedrl.service.operator.children import Children

log = logging.getLogger(__name__)


def held_by_another(
    claim: Mapping[str, Any], uid: str, experiment_created: str | None
) -> str | None:
    """The uid (or ``"an earlier Experiment"``) whose run ``claim`` holds when that is not
    the Experiment ``uid`` created at ``experiment_created`` (RFC 3339); None when it is its
    own."""
    meta = claim.get("metadata") or {}
    recorded = (meta.get("annotations") or {}).get(ANNOTATION_RUN_OF)
    if recorded is not None:
        return None if recorded == uid else str(recorded)
    made = str(meta.get("creationTimestamp") or "")
    # RFC 3339 in UTC with whole seconds, as the API server writes both: ordered as text.
    if experiment_created and made and made < experiment_created:
        return "an earlier Experiment"
    return None


def held_message(claim_name: str, holder: str, namespace: str) -> str:
    """What SpecApplied says of a claim an earlier Experiment left."""
    return (
        f"The PersistentVolumeClaim {claim_name} holds the checkpoints of an earlier "
        f"Experiment ({holder}), which volumeRetention Retain kept. To resume from them, set "
        f"spec.checkpoint.resumeFrom: {claim_name}; to start afresh, delete it "
        f"(seedrl volumes delete {claim_name} -n {namespace}) or name another claim. "
        f"Nothing runs until then."
    )


class RunVolumes:
    """Checks and follows an Experiment's existing run-volume claim (see the module)."""

    def __init__(self, children: "Children"):
        self.children = children
        #: The Warnings posted, so that each is posted once (not at every poll).
        self._warned: set[tuple[Any, str, str]] = set()

    def check(
        self,
        exp: Experiment,
        namespace: str,
        owner: Mapping[str, Any],
        body: Mapping[str, Any],
    ) -> str | None:
        """Why the Experiment may not use its claim (SpecApplied's message), or None: no
        claim yet (it is made with the other children), or one it may use, adopted where
        ``resumeFrom`` names it, resized and owned as the spec says."""
        name = run_volume_claim(exp)
        claim = self.children.read("PersistentVolumeClaim", namespace, name)
        if claim is None:
            return None
        uid = str(owner["uid"])
        meta = claim.get("metadata") or {}
        holder = held_by_another(claim, uid, body["metadata"].get("creationTimestamp"))
        if holder is not None:
            if exp.spec.checkpoint.resume_from != name:
                return held_message(name, holder, namespace)
            self.children.merge(
                "PersistentVolumeClaim",
                namespace,
                name,
                {"metadata": {"annotations": {ANNOTATION_RUN_OF: uid}}},
            )
            self.children.event(
                body,
                "Normal",
                "ResumingFromRunVolume",
                f"Resuming from the checkpoints on {name}, which {holder} left.",
            )
            log.info("Experiment %s/%s resumes from claim %s", namespace, exp.metadata.name, name)
        elif (meta.get("annotations") or {}).get(ANNOTATION_RUN_OF) is None:
            # An earlier release's claim of this Experiment: recorded now.
            self.children.merge(
                "PersistentVolumeClaim",
                namespace,
                name,
                {"metadata": {"annotations": {ANNOTATION_RUN_OF: uid}}},
            )
        self._retention(exp, namespace, claim, owner)
        self._size(exp, namespace, claim, body)
        return None

    def _retention(
        self, exp: Experiment, namespace: str, claim: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> None:
        refs = list((claim.get("metadata") or {}).get("ownerReferences") or [])
        owned = any(r.get("uid") == owner["uid"] for r in refs)
        wanted = exp.spec.checkpoint.volume_retention == "Delete"
        if owned == wanted:
            return
        others = [r for r in refs if r.get("uid") != owner["uid"]]
        refs = [*others, dict(owner)] if wanted else others
        name = claim["metadata"]["name"]
        self.children.merge(
            "PersistentVolumeClaim", namespace, name, {"metadata": {"ownerReferences": refs}}
        )
        log.info(
            "Experiment %s/%s: claim %s %s", namespace, exp.metadata.name, name,
            "deleted with it" if wanted else "retained after it",
        )  # fmt: skip

    def _size(
        self, exp: Experiment, namespace: str, claim: Mapping[str, Any], body: Mapping[str, Any]
    ) -> None:
        wanted_text = exp.spec.checkpoint.volume_size
        asked = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage"
        )
        try:
            wanted, current = parse_quantity(wanted_text), parse_quantity(asked)
        except ValueError:
            return
        if wanted == current:
            return
        name = claim["metadata"]["name"]
        if wanted < current:
            message = (
                f"spec.checkpoint.volumeSize {wanted_text} is smaller than claim {name} "
                f"({asked}): a claim never shrinks; it stays {asked}."
            )
            self._warn_once(body, "VolumeNotShrunk", message)
            return
        if not (claim.get("spec") or {}).get("volumeName"):
            # The API server lets only a bound claim's request change.
            message = (
                f"Claim {name} was not expanded to {wanted_text} (it stays {asked}): it is not "
                f"bound to a volume yet; it can grow once bound (its learner pod scheduled)."
            )
            self._warn_once(body, "VolumeNotExpanded", message)
            return
        try:
            self.children.merge(
                "PersistentVolumeClaim",
                namespace,
                name,
                {"spec": {"resources": {"requests": {"storage": wanted_text}}}},
            )
        except kubernetes.client.ApiException as exc:
            if exc.status not in (403, 422):
                raise
            message = (
                f"Claim {name} was not expanded to {wanted_text} (it stays {asked}): {_reason(exc)}"
            )
            self._warn_once(body, "VolumeNotExpanded", message)
            return
        log.info("Experiment %s/%s: claim %s expanding to %s", namespace,
                 exp.metadata.name, name, wanted_text)  # fmt: skip
        self.children.event(
            body, "Normal", "VolumeExpanding", f"Claim {name} asked to grow to {wanted_text}."
        )

    def _warn_once(self, body: Mapping[str, Any], reason: str, message: str) -> None:
        key = (body["metadata"].get("uid"), reason, message)
        if key in self._warned:
            return
        self._warned.add(key)
        self.children.event(body, "Warning", reason, message)


def _reason(exc: Exception) -> str:
    """The API server's message, its first line (a validation error goes on with a diff)."""
    try:
        message = str(json.loads(getattr(exc, "body", "") or "{}").get("message") or exc)
    except ValueError:
        message = str(exc)
    return message.strip().splitlines()[0] if message.strip() else message
