"""What an Experiment's ``status`` says (phase, Kubernetes-style conditions, progress), derived
by :func:`compute_status` from what the operator observed: the learner Job, the actor
Deployment, the learner's pods and its ``/status`` JSON (a
:class:`seedrl.common.learner_status.LearnerStatus`). Pure functions only."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Callable, Mapping

from seedrl.common.config import ConfigError, Experiment, ImageDefaults
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.operator.env_spec import EnvSpecProgress
from seedrl.service.operator.reconcile import (
    admitted,
    failure_reason,
    finished_before,
    immutable_changes,
    immutable_part,
    job_condition,
    job_finished,
    job_current,
    job_hash,
    learner_started,
    learner_stuck,
    learner_unschedulable,
)
from seedrl.service.operator.render.actors import actor_replicas
from seedrl.service.operator.render.common import names, selector_labels
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


def merge_patch(current: Any, wanted: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``wanted``: a key of a
    mapping that ``wanted`` lacks becomes a null, the only thing that removes it (a key left out
    of a merge patch keeps its stored value); anything but a mapping is replaced whole."""
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        return wanted
    # A null in ``wanted`` means the key is absent, as a merge patch stores it.
    patch: dict[str, Any] = {k: None for k in current if wanted.get(k) is None}
    for key, value in wanted.items():
        if value is None or (key in current and current[key] == value):
            continue
        nested = merge_patch(current.get(key), value)
        if nested != {} or not isinstance(current.get(key), Mapping):
            patch[key] = nested
    return patch


def status_patch(current: Mapping[str, Any] | None, status: Mapping[str, Any]) -> dict[str, Any]:
    """What to merge-patch into the stored ``current`` status so that each key of ``status``
    reads as computed, nested keys that went included (``status.learnerUsage.runStart`` once a
    run ended); keys of ``current`` that ``status`` does not own are kept. Empty: nothing to
    write."""
    return merge_patch({k: v for k, v in (current or {}).items() if k in status}, dict(status))


#: The status fields that only say when the operator last looked (key, nested key). A status
#: that differs in them alone is written at most every ``heartbeat_seconds``
#: (:func:`worth_writing`): an idle Experiment's status would otherwise be written at every
#: poll.
VOLATILE = (("learnerUsage", "lastSeen"), ("cost", "asOf"))

#: How stale ``learnerUsage.lastSeen`` may get by default. A learner Job that ends unseen
#: (replaced, its run restarted) is counted as active up to it, so this bounds what its
#: deadline can miss.
HEARTBEAT_SECONDS = 60.0


def _without_volatile(status: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(status or {})
    for key, nested in VOLATILE:
        if isinstance(out.get(key), Mapping):
            out[key] = {k: v for k, v in out[key].items() if k != nested}
    return out


def worth_writing(
    current: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
) -> bool:
    """Whether ``status`` says something the stored ``current`` does not: a change besides
    the :data:`VOLATILE` timestamps, or ``learnerUsage.lastSeen`` stored at least
    ``heartbeat_seconds`` before the new one."""
    if status_patch(_without_volatile(current), _without_volatile(status)):
        return True
    stored = ((current or {}).get("learnerUsage") or {}).get("lastSeen")
    seen = (status.get("learnerUsage") or {}).get("lastSeen")
    if not stored or not seen:
        return stored != seen
    try:
        age = datetime.datetime.fromisoformat(seen.replace("Z", "+00:00")) - (
            datetime.datetime.fromisoformat(stored.replace("Z", "+00:00"))
        )
    except ValueError:
        return True
    return age.total_seconds() >= heartbeat_seconds


def condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of that type in a status, or None."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def invalid_status(
    previous: Mapping[str, Any] | None, generation: int | None, error: ConfigError, now: str
) -> dict[str, Any]:
    """Status of an Experiment whose spec does not validate: Valid=False and Ready=False,
    reason ValidationFailed, with a message naming each field.

    One that never ran is Failed. One whose children run (an edit made it invalid) keeps its
    phase: its learner and actors go on as the spec last applied made them, and the phase
    must not read like a run that failed; SpecApplied=False says the edit waits."""
    prev = previous or {}
    conditions = [dict(c) for c in prev.get("conditions") or []]
    message = "; ".join(f"{path}: {reason}" for path, reason in error.problems)
    set_condition(conditions, "Valid", False, "ValidationFailed", message, generation, now)
    set_condition(conditions, "Ready", False, "ValidationFailed", message, generation, now)
    phase = "Failed"
    if prev.get("appliedImmutable") and prev.get("phase") in RUNNING_PHASES:
        phase = prev["phase"]
        set_condition(
            conditions,
            "SpecApplied",
            False,
            "ValidationFailed",
            f"the edit is invalid; the run goes on as last applied: {message}",
            generation,
            now,
        )
    return {"phase": phase, "conditions": conditions, "observedGeneration": generation}


#: Phases of an Experiment whose children exist and run (or wait to).
RUNNING_PHASES = ("Pending", "Running", "Suspended")


#: ``put(type_, status, reason, message)``: :func:`set_condition` on one status's conditions,
#: at one generation and time.
Put = Callable[[str, bool | None, str, str], None]


@dataclasses.dataclass(frozen=True)
class Observation:
    """What :func:`compute_status` derives once from the learner Job, the actor Deployment and
    the previous status, for each of its steps to read.

    Attributes:
      job_status: the Job's ``status`` (empty when there is no Job).
      complete, failed: the Job's Complete or Failed condition when True, else None.
      cleaned_up: the Job is gone after the learner finished (``ttlSecondsAfterFinished``).
      queued: the Job waits for Kueue's admission (and the Experiment is not suspended).
      desired: actor pods wanted now (:func:`actor_replicas`).
      ready_actors: actor pods ready.
      learner_ready: the learner pod is ready.
      phase: the Experiment's phase.
    """

    job_status: Mapping[str, Any]
    complete: dict[str, Any] | None
    failed: dict[str, Any] | None
    cleaned_up: bool
    queued: bool
    desired: int
    ready_actors: int
    learner_ready: bool
    phase: str


def failed_env_spec(job: Mapping[str, Any] | None, env_spec: EnvSpecProgress | None) -> bool:
    """Whether the Experiment failed because its env spec could not be derived (a learner Job
    that finished by itself tells its own outcome)."""
    return env_spec is not None and env_spec.failed is not None and not job_finished(job)


def observation(
    exp: Experiment,
    prev: Mapping[str, Any],
    job: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    learner_pods: list[Mapping[str, Any]] | tuple,
    env_spec: EnvSpecProgress | None = None,
) -> Observation:
    """The facts every condition is derived from, the phase among them (Failed too when,
    without a learner Job, its env spec could not be derived)."""
    job_status = (job or {}).get("status") or {}
    dep_status = (deployment or {}).get("status") or {}
    complete = job_condition(job, "Complete")
    failed = job_condition(job, "Failed")
    if env_spec is not None and failed_env_spec(job, env_spec):
        failed = dict(env_spec.failed or {})
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
    return Observation(
        job_status=job_status,
        complete=complete,
        failed=failed,
        cleaned_up=cleaned_up,
        queued=queued,
        desired=desired,
        ready_actors=ready_actors,
        learner_ready=learner_ready,
        phase=phase,
    )


def set_spec_applied(
    put: Put,
    exp: Experiment,
    job: Mapping[str, Any] | None,
    refused: list[str] | tuple[str, ...],
    forbidden: str | None,
    replacing: bool,
    held: str | None = None,
) -> None:
    """SpecApplied: whether the children run this spec, else why not (an immutable field
    changed, the API server refused, the run volume is an earlier Experiment's, the learner
    is being replaced or finished before it)."""
    if refused:
        put(
            "SpecApplied",
            False,
            "ImmutableFieldChanged",
            f"{', '.join(refused)} cannot change once an experiment has started "
            f"(its checkpoints belong to the old value); revert the change or "
            f"create a new Experiment",
        )
    elif forbidden:
        put(
            "SpecApplied",
            False,
            "Forbidden",
            f"The operator may not make this Experiment's children: {forbidden} Grant its "
            f"role what it lacks (the operator chart's rbac.create renders every rule it "
            f"needs); it retries at every poll.",
        )
    elif held:
        put("SpecApplied", False, "RunVolumeHeld", held)
    elif replacing:
        put(
            "SpecApplied",
            False,
            "ReplacingLearner",
            "The learner Job runs an older spec: it is being replaced, and its new "
            "pod resumes from the checkpoint.",
        )
    elif (
        job is not None
        and job_finished(job)
        and job_hash(job) is not None
        and not job_current(exp, job)
    ):
        put(
            "SpecApplied",
            False,
            "LearnerFinished",
            "The learner finished before this spec: a finished experiment is not run "
            "again; create a new Experiment to train more.",
        )
    else:
        put("SpecApplied", True, "Applied", "The children match the spec.")


def set_learner_ready(
    put: Put,
    exp: Experiment,
    job: Mapping[str, Any] | None,
    seen: Observation,
    learner_pods: list[Mapping[str, Any]] | tuple,
    queue_message: str | None = None,
    env_spec: EnvSpecProgress | None = None,
    before: Mapping[str, Any] | None = None,
) -> None:
    """LearnerReady: whether the learner pod is ready, else what it waits for (while queued,
    with Kueue's ``queue_message`` when there is one; before the learner starts, its env
    spec: ``env_spec``). ``before``: LearnerReady as stored."""
    before = before or {}
    if seen.cleaned_up and before.get("reason") == "EnvSpecFailed":
        put("LearnerReady", False, "EnvSpecFailed", str(before.get("message") or ""))
    elif seen.cleaned_up:
        put(
            "LearnerReady",
            False,
            "Finished",
            "The learner finished; its Job was deleted after ttlSecondsAfterFinished.",
        )
    elif env_spec is not None and (
        failed_env_spec(job, env_spec) or (job is None and not env_spec.ready)
    ):
        set_env_spec_pending(put, exp, env_spec)
    elif job is None:
        put("LearnerReady", False, "Creating", "The learner Job does not exist yet.")
    elif seen.learner_ready:
        put("LearnerReady", True, "PodReady", "The learner pod is ready.")
    elif (
        unschedulable := learner_unschedulable(learner_pods)
    ) is not None and not exp.spec.suspend:
        # The scheduler's own words: no node has the accelerator, the capacity, the labels.
        put(
            "LearnerReady",
            False,
            "Unschedulable",
            f"The learner pod cannot be scheduled: {unschedulable}",
        )
    elif (stuck := learner_stuck(learner_pods)) is not None and not exp.spec.suspend:
        # The kubelet's own words: an image it cannot pull, a Secret that is missing.
        put("LearnerReady", False, stuck[0], f"The learner pod cannot start: {stuck[1]}")
    elif env_spec is not None and not env_spec.ready and not exp.spec.suspend:
        # Its pod waits for the env spec to mount (ContainerCreating) meanwhile.
        set_env_spec_pending(put, exp, env_spec)
    else:
        active = int(seen.job_status.get("active") or 0)
        put(
            "LearnerReady",
            False,
            "Suspended"
            if exp.spec.suspend
            else "Queued"
            if seen.queued
            else ("PodNotReady" if active else "NoPod"),
            "The learner is suspended."
            if exp.spec.suspend
            else f"Waiting for Kueue to admit the learner in queue "
            f"{exp.spec.queue_name}; the actors start once it is."
            + (f" Kueue: {queue_message}" if queue_message else "")
            if seen.queued
            else (
                f"{active} learner pod(s), none ready." if active else "No learner pod is running."
            ),
        )


def set_env_spec_pending(put: Put, exp: Experiment, env_spec: EnvSpecProgress) -> None:
    """LearnerReady while the env-spec Job derives the env spec the learner Job needs: the
    reason it failed, or a pod of it cannot be scheduled or started, or that it runs."""
    job = names(exp.metadata.name).env_spec
    if env_spec.failed is not None:
        put(
            "LearnerReady",
            False,
            "EnvSpecFailed",
            f"No learner was started: the env-spec Job {job} could not derive the env spec "
            f"(condition Failed says why).",
        )
    elif (unschedulable := learner_unschedulable(env_spec.pods)) is not None:
        put(
            "LearnerReady",
            False,
            "Unschedulable",
            f"The env-spec pod (Job {job}) cannot be scheduled: {unschedulable}",
        )
    elif (stuck := learner_stuck(env_spec.pods)) is not None:
        message = f"The env-spec pod (Job {job}) cannot start: {stuck[1]}"
        put("LearnerReady", False, stuck[0], message)
    else:
        put(
            "LearnerReady",
            False,
            "DerivingEnvSpec",
            f"Job {job} makes the env with the actor image to derive its spec; the learner "
            f"starts once it has.",
        )


def set_actors_ready(put: Put, seen: Observation) -> bool:
    """ActorsReady: whether as many actor pods are ready as are wanted (none, when none are).

    Returns:
      That condition's status.
    """
    ready_actors, desired = seen.ready_actors, seen.desired
    if desired == 0:
        actors_ok = ready_actors == 0
        put(
            "ActorsReady",
            actors_ok,
            "ScaledToZero" if actors_ok else "ScalingDown",
            "No actors are wanted now."
            if actors_ok
            else f"{ready_actors} actor pod(s) still running.",
        )
    else:
        actors_ok = ready_actors >= desired
        put(
            "ActorsReady",
            actors_ok,
            "AllReady" if actors_ok else "NotAllReady",
            f"{ready_actors} of {desired} actor pods ready.",
        )
    return actors_ok


def set_progressing(
    put: Put,
    exp: Experiment,
    learner: LearnerStatus | None,
    learner_error: str | None,
    phase: str,
) -> None:
    """Progressing: what the learner's status says of its training (no env steps for
    ``spec.budget.noProgressSeconds`` turns it False), or why it cannot be read."""
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
        put(
            "Progressing",
            False,
            "NoProgress",
            f"No env steps for {idle:.0f} s (spec.budget.noProgressSeconds = {limit:g}).{refusals}",
        )
    elif learner is not None and learner.state == "running":
        put(
            "Progressing",
            True,
            "Training",
            f"{learner.env_steps} env steps, {learner.learner_steps} learner steps "
            f"with {learner.actors} actor stream(s).",
        )
    elif learner is not None and learner.state == "waiting_for_actors":
        put("Progressing", False, "WaitingForActors", "The learner waits for its first actor.")
    elif learner is not None:
        put(
            "Progressing",
            False,
            "LearnerFinished",
            f"The learner finished ({learner.stop_reason or 'no reason given'}).",
        )
    elif phase == "Running":
        put(
            "Progressing",
            None,
            "StatusUnavailable",
            learner_error or "The learner's status endpoint did not answer.",
        )
    else:
        put("Progressing", False, phase, f"The experiment is {phase.lower()}.")


def set_suspended(put: Put, exp: Experiment) -> None:
    """Suspended: ``spec.suspend``."""
    put(
        "Suspended",
        exp.spec.suspend,
        "SpecSuspended" if exp.spec.suspend else "NotSuspended",
        "spec.suspend is true: the learner checkpointed and stopped; actors are at zero."
        if exp.spec.suspend
        else "The experiment is not suspended.",
    )


def set_actors_limited(put: Put, limited: str | None, prev: Mapping[str, Any]) -> None:
    """ActorsLimited: ``spec.actors.replicas`` (``kubectl scale``, an HPA) asks for more
    actors than the learner serves, and the operator runs the most it serves instead of
    failing the Experiment. Absent until that first happens."""
    if limited:
        put("ActorsLimited", True, "LearnerLimit", limited)
    elif condition(prev, "ActorsLimited"):
        put("ActorsLimited", False, "WithinLimit", "Every actor spec.actors.replicas asks runs.")


def set_outcome(put: Put, seen: Observation, learner_pods: list[Mapping[str, Any]] | tuple) -> None:
    """Complete or Failed, once the learner Job has either (Failed with the cause the last
    failed learner pod tells: :func:`failure_reason`); neither before."""
    if seen.complete:
        put(
            "Complete",
            True,
            seen.complete.get("reason") or "Completed",
            seen.complete.get("message") or "The learner reached its budget.",
        )
    if seen.failed:
        reason, message = failure_reason(seen.failed, learner_pods)
        put("Failed", True, reason, message)


def set_ready(put: Put, seen: Observation, actors_ok: bool) -> None:
    """Ready: running, with the learner and every wanted actor ready."""
    ready = seen.phase == "Running" and seen.learner_ready and actors_ok
    put(
        "Ready",
        ready,
        "Ready" if ready else seen.phase,
        "Learner and actors are ready." if ready else f"Phase {seen.phase}.",
    )


def status_fields(
    exp: Experiment,
    prev: Mapping[str, Any],
    job: Mapping[str, Any] | None,
    seen: Observation,
    learner: LearnerStatus | None,
    refused: list[str] | tuple[str, ...],
    images: ImageDefaults | None,
    now: str,
) -> dict[str, Any]:
    """The status's keys besides the conditions: the phase, the actors' counts and selector,
    the applied immutable part, the images, the learner's usage, start and completion times
    and the learner's progress."""
    status: dict[str, Any] = {
        "phase": seen.phase,
        "replicas": seen.ready_actors,
        "selector": ",".join(
            f"{k}={v}" for k, v in selector_labels(exp.metadata.name, "actor").items()
        ),
        "actors": {
            "desired": seen.desired,
            "ready": seen.ready_actors,
            "connected": learner.actors if learner else 0,
        },
    }
    if not refused:
        # As an earlier release wrote it while it means the same (immutable_changes reads it
        # as this one does): that release reads it back after a rollback.
        applied = prev.get("appliedImmutable")
        keep = (
            isinstance(applied, Mapping)
            and all(key in applied for key in ("env", "agent"))
            and not immutable_changes(applied, exp)
        )
        status["appliedImmutable"] = applied if keep else immutable_part(exp)
    if images is not None:
        status["images"] = images_status(images)
    status["learnerUsage"] = advance_usage(prev.get("learnerUsage"), job, now)
    start = prev.get("startTime") or seen.job_status.get("startTime")
    if start:
        status["startTime"] = start
    if seen.phase in ("Succeeded", "Failed"):
        status["completionTime"] = (
            prev.get("completionTime")
            or seen.job_status.get("completionTime")
            or (seen.failed or {}).get("lastTransitionTime")
            or now
        )
    if learner is not None:
        status.update(learner_with_frames(exp, learner).to_experiment_status())
    return status


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
    limited: str | None = None,
    queue_message: str | None = None,
    env_spec: EnvSpecProgress | None = None,
    held: str | None = None,
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
      limited: why fewer actors run than ``spec.actors.replicas`` asks
        (:func:`~seedrl.service.operator.reconcile.actors_limited`): condition
        ActorsLimited=True, reason LearnerLimit.
      queue_message: why Kueue has not admitted the queued learner yet (its Workload's
        QuotaReserved message: :func:`~seedrl.service.operator.reconcile.workload_pending`),
        appended to LearnerReady's Queued message.
      env_spec: where the env spec of a learner not started yet stands (the env-spec Job
        runs, or failed: LearnerReady says so, and a failure fails the Experiment).
      held: why the Experiment may not use the run volume an earlier one left
        (:class:`~seedrl.service.operator.run_volume.RunVolumes`): SpecApplied=False,
        reason RunVolumeHeld.

    Returns:
      A status (the keys this function owns; cost is added by the operator).
    """
    now = now or now_rfc3339()
    prev = dict(previous or {})
    conditions = [dict(c) for c in prev.get("conditions") or []]

    def put(type_: str, status: bool | None, reason: str, message: str) -> None:
        set_condition(conditions, type_, status, reason, message, generation, now)

    put("Valid", True, "Validated", "The spec is valid.")
    set_spec_applied(put, exp, job, refused, forbidden, replacing, held)
    seen = observation(exp, prev, job, deployment, learner_pods, env_spec)
    before = condition(prev, "LearnerReady")
    set_learner_ready(put, exp, job, seen, learner_pods, queue_message, env_spec, before)
    actors_ok = set_actors_ready(put, seen)
    set_progressing(put, exp, learner, learner_error, seen.phase)
    set_suspended(put, exp)
    set_actors_limited(put, limited, prev)
    set_outcome(put, seen, env_spec.pods if failed_env_spec(job, env_spec) else learner_pods)
    set_ready(put, seen, actors_ok)
    fields = status_fields(exp, prev, job, seen, learner, refused, images, now)
    # The keys in the order the status always had: phase, conditions, observedGeneration, ...
    return {
        "phase": fields.pop("phase"),
        "conditions": conditions,
        "observedGeneration": generation,
        **fields,
    }


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
