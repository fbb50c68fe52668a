"""What an Experiment's ``status`` says (phase, Kubernetes-style conditions, progress), derived
by :func:`compute_status` from what the operator observed: the learner Job, the actor
Deployment, the learner's pods and its ``/status`` JSON (a
:class:`seedrl.common.learner_status.LearnerStatus`). Pure functions only."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping

from seedrl.common.config import ConfigError, Experiment, ImageDefaults
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.operator.reconcile import (
    admitted,
    failure_reason,
    finished_before,
    immutable_part,
    job_condition,
    job_finished,
    job_hash,
    learner_started,
    learner_unschedulable,
)
from seedrl.service.operator.render.actors import actor_replicas
from seedrl.service.operator.render.common import selector_labels
from seedrl.service.operator.render.learner_job import learner_hash
from seedrl.service.operator.usage import advance_usage


def images_status(images: ImageDefaults) -> dict[str, str]:
    """``status.images``: the image defaults an Experiment was made with."""
    return {"registry": images.registry, "release": images.release}


def now_rfc3339(now: datetime.datetime | None = None) -> str:
    """A Kubernetes timestamp (UTC, whole seconds)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> None:
    """Sets one condition in place; ``lastTransitionTime`` moves only when status changes."""
    text = "Unknown" if status is None else ("True" if status else "False")
    for cond in conditions:
        if cond.get("type") == type_:
            if cond.get("status") != text:
                cond["lastTransitionTime"] = now
            cond.update(status=text, reason=reason, message=message)
            if generation is not None:
                cond["observedGeneration"] = generation
            return
    cond = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    conditions.append(cond)


def condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of that type in a status, or None."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def invalid_status(
    previous: Mapping[str, Any] | None, generation: int | None, error: ConfigError, now: str
) -> dict[str, Any]:
    """Status of an Experiment whose spec does not validate: Failed / ValidationFailed."""
    conditions = [dict(c) for c in (previous or {}).get("conditions") or []]
    message = "; ".join(f"{path}: {reason}" for path, reason in error.problems)
    set_condition(conditions, "Valid", False, "ValidationFailed", message, generation, now)
    set_condition(conditions, "Ready", False, "ValidationFailed", message, generation, now)
    return {"phase": "Failed", "conditions": conditions, "observedGeneration": generation}


def compute_status(
    exp: Experiment,
    *,
    generation: int | None,
    previous: Mapping[str, Any] | None,
    job: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    learner: LearnerStatus | None,
    learner_error: str | None = None,
    refused: list[str] | tuple[str, ...] = (),
    now: str | None = None,
    learner_pods: list[Mapping[str, Any]] | tuple = (),
    replacing: bool = False,
    images: ImageDefaults | None = None,
    forbidden: str | None = None,
) -> dict[str, Any]:
    """The status of a valid Experiment from what was observed of its children.

    Args:
      exp: the validated Experiment.
      generation: its ``metadata.generation``, recorded as observedGeneration.
      previous: the status as stored (conditions keep their transition times).
      job, deployment: the learner Job and actor Deployment as read, or None if missing.
      learner: the learner's parsed /status, or None if it could not be read.
      learner_error: why it could not be read (for the Progressing condition's message).
      refused: paths of immutable fields whose change was refused (see
        :func:`immutable_changes`); the children then still run the spec they were made from.
      now: the timestamp for transitions.
      learner_pods: the learner's pods as listed (a running learner container makes the phase
        Running before its pod is ready; a failure's reason and message come from
        the last one that failed).
      replacing: the learner Job runs an older spec and is being replaced.
      images: the image defaults the children were rendered with, recorded in
        ``status.images`` (:func:`image_defaults` reads them back).
      forbidden: the API server's message when it refused (403) a call applying the
        children: condition SpecApplied=False, reason Forbidden.

    Returns:
      A status (the keys this function owns; cost is added by the operator).
    """
    now = now or now_rfc3339()
    prev = dict(previous or {})
    conditions = [dict(c) for c in prev.get("conditions") or []]
    set_condition(conditions, "Valid", True, "Validated", "The spec is valid.", generation, now)
    if refused:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "ImmutableFieldChanged",
            f"{', '.join(refused)} cannot change once an experiment has started "
            f"(its checkpoints belong to the old value); revert the change or "
            f"create a new Experiment",
            generation,
            now,
        )
    elif forbidden:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "Forbidden",
            f"The operator may not make this Experiment's children: {forbidden} Grant its "
            f"role what it lacks (the operator chart's rbac.create renders every rule it "
            f"needs); it retries at every poll.",
            generation,
            now,
        )
    elif replacing:
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "ReplacingLearner",
            "The learner Job runs an older spec: it is being replaced, and its new "
            "pod resumes from the checkpoint.",
            generation,
            now,
        )
    elif job is not None and job_finished(job) and job_hash(job) not in (None, learner_hash(exp)):
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "LearnerFinished",
            "The learner finished before this spec: a finished experiment is not run "
            "again; create a new Experiment to train more.",
            generation,
            now,
        )
    else:
        set_condition(
            conditions,
            "SpecApplied",
            True,
            "Applied",
            "The children match the spec.",
            generation,
            now,
        )
    job_status = (job or {}).get("status") or {}
    dep_status = (deployment or {}).get("status") or {}
    complete = job_condition(job, "Complete")
    failed = job_condition(job, "Failed")
    cleaned_up = job is None and finished_before(prev)
    queued = job is not None and not admitted(exp, job) and not exp.spec.suspend
    desired = actor_replicas(exp, bool(complete or failed or cleaned_up), job is None or not queued)
    ready_actors = int(dep_status.get("readyReplicas") or 0)
    learner_ready = int(job_status.get("ready") or 0) >= 1

    if failed:
        phase = "Failed"
    elif complete:
        phase = "Succeeded"
    elif cleaned_up:
        phase = prev["phase"]
    elif exp.spec.suspend:
        phase = "Suspended"
    elif learner_ready or learner_started(learner_pods):
        phase = "Running"
    else:
        phase = "Pending"

    if cleaned_up:
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Finished",
            "The learner finished; its Job was deleted after ttlSecondsAfterFinished.",
            generation,
            now,
        )
    elif job is None:
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Creating",
            "The learner Job does not exist yet.",
            generation,
            now,
        )
    elif learner_ready:
        set_condition(
            conditions,
            "LearnerReady",
            True,
            "PodReady",
            "The learner pod is ready.",
            generation,
            now,
        )
    elif (
        unschedulable := learner_unschedulable(learner_pods)
    ) is not None and not exp.spec.suspend:
        # The scheduler's own words: no node has the accelerator, the capacity, the labels.
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Unschedulable",
            f"The learner pod cannot be scheduled: {unschedulable}",
            generation,
            now,
        )
    else:
        active = int(job_status.get("active") or 0)
        set_condition(
            conditions,
            "LearnerReady",
            False,
            "Suspended"
            if exp.spec.suspend
            else "Queued"
            if queued
            else ("PodNotReady" if active else "NoPod"),
            "The learner is suspended."
            if exp.spec.suspend
            else f"Waiting for Kueue to admit the learner in queue "
            f"{exp.spec.queue_name}; the actors start once it is."
            if queued
            else (
                f"{active} learner pod(s), none ready." if active else "No learner pod is running."
            ),
            generation,
            now,
        )
    if desired == 0:
        actors_ok = ready_actors == 0
        set_condition(
            conditions,
            "ActorsReady",
            actors_ok,
            "ScaledToZero" if actors_ok else "ScalingDown",
            "No actors are wanted now."
            if actors_ok
            else f"{ready_actors} actor pod(s) still running.",
            generation,
            now,
        )
    else:
        actors_ok = ready_actors >= desired
        set_condition(
            conditions,
            "ActorsReady",
            actors_ok,
            "AllReady" if actors_ok else "NotAllReady",
            f"{ready_actors} of {desired} actor pods ready.",
            generation,
            now,
        )

    idle = learner.seconds_without_env_steps if learner is not None else None
    limit = exp.spec.budget.no_progress_seconds
    if (
        learner is not None
        and learner.state != "finished"
        and limit
        and idle is not None
        and idle >= limit
    ):
        # The same condition `seedrl train` fails a local run on (spec.budget.noProgressSeconds).
        refusals = (
            f" {learner.refused_streams} actor stream(s) refused, the last: {learner.last_refusal}"
            if learner.refused_streams
            else " No actor stream was refused: are the actor pods running?"
        )
        set_condition(
            conditions,
            "Progressing",
            False,
            "NoProgress",
            f"No env steps for {idle:.0f} s (spec.budget.noProgressSeconds = {limit:g}).{refusals}",
            generation,
            now,
        )
    elif learner is not None and learner.state == "running":
        set_condition(
            conditions,
            "Progressing",
            True,
            "Training",
            f"{learner.env_steps} env steps, {learner.learner_steps} learner steps "
            f"with {learner.actors} actor stream(s).",
            generation,
            now,
        )
    elif learner is not None and learner.state == "waiting_for_actors":
        set_condition(
            conditions,
            "Progressing",
            False,
            "WaitingForActors",
            "The learner waits for its first actor.",
            generation,
            now,
        )
    elif learner is not None:
        set_condition(
            conditions,
            "Progressing",
            False,
            "LearnerFinished",
            f"The learner finished ({learner.stop_reason or 'no reason given'}).",
            generation,
            now,
        )
    elif phase == "Running":
        set_condition(
            conditions,
            "Progressing",
            None,
            "StatusUnavailable",
            learner_error or "The learner's status endpoint did not answer.",
            generation,
            now,
        )
    else:
        set_condition(
            conditions,
            "Progressing",
            False,
            phase,
            f"The experiment is {phase.lower()}.",
            generation,
            now,
        )

    set_condition(
        conditions,
        "Suspended",
        exp.spec.suspend,
        "SpecSuspended" if exp.spec.suspend else "NotSuspended",
        "spec.suspend is true: the learner checkpointed and stopped; actors are at zero."
        if exp.spec.suspend
        else "The experiment is not suspended.",
        generation,
        now,
    )
    if complete:
        set_condition(
            conditions,
            "Complete",
            True,
            complete.get("reason") or "Completed",
            complete.get("message") or "The learner reached its budget.",
            generation,
            now,
        )
    if failed:
        reason, message = failure_reason(failed, learner_pods)
        set_condition(conditions, "Failed", True, reason, message, generation, now)
    ready = phase == "Running" and learner_ready and actors_ok
    set_condition(
        conditions,
        "Ready",
        ready,
        "Ready" if ready else phase,
        "Learner and actors are ready." if ready else f"Phase {phase}.",
        generation,
        now,
    )

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": generation,
        "replicas": ready_actors,
        "selector": ",".join(
            f"{k}={v}" for k, v in selector_labels(exp.metadata.name, "actor").items()
        ),
        "actors": {
            "desired": desired,
            "ready": ready_actors,
            "connected": learner.actors if learner else 0,
        },
    }
    if not refused:
        status["appliedImmutable"] = immutable_part(exp)
    if images is not None:
        status["images"] = images_status(images)
    status["learnerUsage"] = advance_usage(prev.get("learnerUsage"), job, now)
    start = prev.get("startTime") or job_status.get("startTime")
    if start:
        status["startTime"] = start
    if phase in ("Succeeded", "Failed"):
        status["completionTime"] = (
            prev.get("completionTime")
            or job_status.get("completionTime")
            or (failed or {}).get("lastTransitionTime")
            or now
        )
    if learner is not None:
        status.update(learner_with_frames(exp, learner).to_experiment_status())
    return status


def learner_with_frames(exp: Experiment, learner: LearnerStatus) -> LearnerStatus:
    """``learner``, with its env frames counted from its steps when it reported none.

    A learner image older than the operator (an Experiment running through an operator
    upgrade) reports only ``env_steps``; without frames its cost per million frames would read
    n/a to the end, termination message included. Steps without frames cannot come from a
    learner that counts frames (every step is at least one frame).
    """
    if learner.env_frames or not learner.env_steps:
        return learner
    return dataclasses.replace(learner, env_frames=learner.env_steps * exp.spec.env.frames_per_step)
