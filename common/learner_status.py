"""The learner's status: one typed snapshot of a run's progress, declared once for every reader.

The learner builds it (:meth:`seedrl.learner.runtime.LearnerRuntime.status`, plus its
checkpointer's fields) and serves it as JSON on ``GET /status`` and in the run directory's
``status.json`` (and each line of ``metrics.jsonl``). The local launcher and `seedrl train`'s
progress line read ``status.json`` back; the operator reads ``/status`` and copies part of it into
the Experiment's ``status`` (:meth:`LearnerStatus.to_experiment_status`), which ``seedrl status``
and ``kubectl get experiments`` show. All of them parse with :meth:`LearnerStatus.from_json`, so a
field is added or renamed here and nowhere else.

The JSON keys are the field names. Groups of fields that a run does not have (the evaluation
actors', the checkpointer's, the file's write time) are left out of the JSON rather than written
as null, and read back as None.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Mapping
from typing import Any, Optional

#: The learner's states, in the order a run goes through them.
STATES = ("waiting_for_actors", "running", "finished")

# Fields present in the JSON only when the run has them (see the module docstring): each group
# is keyed by the field whose None means the whole group is absent.
_GROUPS = {
    "eval_episodes": ("eval_episodes", "eval_mean_return"),
    "checkpoint_failures": (
        "last_checkpoint",
        "last_checkpoint_time",
        "checkpoint_age_s",
        "checkpoint_seconds",
        "checkpoint_failures",
    ),
    "time": ("time",),
}


def _field(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    experiment_key: str = "",
    factory: Any = None,
) -> Any:
    """A status field: its default, its meaning, and its key in the Experiment's ``status``
    when the operator copies it there (``experiment_key``)."""
    meta = {"doc": doc, "experiment_key": experiment_key}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class LearnerStatus:
    """A snapshot of a learner's progress."""

    state: str = _field(
        doc="The learner's own state: waiting_for_actors, running or finished.",
        experiment_key="learnerState",
    )
    experiment: str = _field("", "The Experiment's name.")
    run_id: str = _field("", "Random id of this learner process (changes at each restart).")
    env_steps: int = _field(
        0,
        "Agent steps taken by all actors together (one action each; what spec.budget."
        "maxEnvSteps counts).",
        experiment_key="envSteps",
    )
    env_frames: int = _field(
        0,
        "Environment frames: agent steps times the env's frame skip (4 for Atari, 1 "
        "otherwise), the unit RL papers report.",
        experiment_key="envFrames",
    )
    learner_steps: int = _field(
        0, "Training steps taken by the learner.", experiment_key="learnerSteps"
    )
    episodes: int = _field(
        0, "Episodes finished by all actors together.", experiment_key="episodes"
    )
    mean_return: Optional[float] = _field(
        None, "Mean return of the last returnWindow episodes.", experiment_key="meanReturn"
    )
    return_window: int = _field(0, "Episodes the mean return is over (up to returnWindow).")
    elapsed: float = _field(0.0, "Seconds of training, those before a resume included.")
    actors: int = _field(0, "Actor streams connected now.")
    mean_inference_batch: float = _field(0.0, "Env steps per inference call, on average.")
    inference_batches: int = _field(0, "Inference calls so far.")
    inference_steps: int = _field(0, "Env steps inferred so far.")
    queued_unrolls: int = _field(0, "Unrolls waiting for the trainer.")
    messages: int = _field(
        0,
        "Step messages received from actors (one per step of all of an "
        "actor stream's envs): a learner's load is messages, not env "
        "steps.",
    )
    first_actions_time: Optional[float] = _field(
        None, "Unix time of the first actions sent to an actor (start-up ends there; None before)."
    )
    seconds_without_env_steps: Optional[float] = _field(
        None,
        "Seconds since an env step last arrived (since the learner started, before the "
        "first): past spec.budget.noProgressSeconds the run cannot make progress.",
    )
    refused_streams: int = _field(
        0, "Actor streams refused at their hello or failed for a bad message."
    )
    last_refusal: Optional[str] = _field(None, "The latest refusal: the actor id and the reason.")
    skipped_updates: int = _field(
        0, "Training steps skipped because their gradients were not finite."
    )
    invalid_actions: int = _field(
        0, "Actions inference produced outside the action space (replaced before use)."
    )
    unverified_episodes: int = _field(
        0,
        "Episodes reported that began before their stream "
        "(not counted: nothing could verify them).",
    )
    env_restarts: int = _field(
        0,
        "Envs the actors recreated after they raised (since this learner started): each cuts "
        "an episode short. Actors give up when their envs keep raising (see actors/envs.py).",
    )
    metrics: dict[str, Optional[float]] = _field(
        doc="The last training step's metrics (losses, gradient norm, ...).", factory=dict
    )
    eval_episodes: Optional[int] = _field(
        None, "Episodes of the evaluation actors (None: the run has none)."
    )
    eval_mean_return: Optional[float] = _field(
        None, "Mean return of the evaluation actors' episodes.", experiment_key="evalMeanReturn"
    )
    stop_reason: Optional[str] = _field(
        None, "Why the learner stopped (budget, target return, ...).", experiment_key="stopReason"
    )
    last_checkpoint: Optional[str] = _field(
        None, "The learner's latest checkpoint.", experiment_key="lastCheckpoint"
    )
    last_checkpoint_time: Optional[float] = _field(None, "Unix time of the latest checkpoint.")
    checkpoint_age_s: Optional[float] = _field(
        None, "Seconds since the latest checkpoint (or the learner's start)."
    )
    checkpoint_seconds: Optional[float] = _field(None, "Seconds the latest checkpoint took.")
    checkpoint_failures: Optional[int] = _field(
        None, "Checkpoints that failed (None: the run keeps no checkpoints)."
    )
    write_failures: int = _field(
        0,
        "Writes of the learner's own files (status.json, metrics.jsonl, summary.json, "
        "TensorBoard's event files) that failed, a full disk say: each is logged and training "
        "goes on.",
    )
    time: Optional[float] = _field(None, "Unix time the snapshot was written to a file.")

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready mapping (keys as the field names; absent groups left out)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["metrics"] = dict(self.metrics)
        for marker, names in _GROUPS.items():
            if out[marker] is None:
                for name in names:
                    del out[name]
        return out

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> LearnerStatus:
        """Parses the JSON :meth:`to_json` writes (text, or an already decoded mapping).

        Keys it does not know are ignored (a newer learner may report more); missing ones take
        their defaults; non-finite numbers read as None where a field may be None.

        Raises:
          ValueError: if it is not a JSON object, ``state`` is not one of :data:`STATES`, or a
            field has the wrong type.
        """
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"learner status is not JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise ValueError("learner status must be a JSON object")
        state = data.get("state")
        if state not in STATES:
            raise ValueError(
                f"learner status: state must be one of {', '.join(STATES)}, got {state!r}"
            )
        hints = typing.get_type_hints(cls)
        values = {
            f.name: _check(f.name, hints[f.name], data[f.name])
            for f in dataclasses.fields(cls)
            if f.name in data and f.name != "state"
        }
        return cls(state=state, **{k: v for k, v in values.items() if v is not _DEFAULT})

    def to_experiment_status(self) -> dict[str, Any]:
        """The keys the operator writes into the Experiment's ``status`` (camelCase)."""
        return {
            f.metadata["experiment_key"]: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata["experiment_key"]
        }

    @classmethod
    def from_experiment_status(cls, status: Mapping[str, Any]) -> LearnerStatus | None:
        """The learner's part of an Experiment's ``status``, or None before the operator has
        read the learner (no ``learnerState``).

        Raises:
          ValueError: as :meth:`from_json`.
        """
        keys = {
            f.metadata["experiment_key"]: f.name
            for f in dataclasses.fields(cls)
            if f.metadata["experiment_key"]
        }
        if status.get("learnerState") is None:
            return None
        return cls.from_json({name: status[key] for key, name in keys.items() if key in status})


def experiment_status_fields() -> dict[str, tuple[Any, str]]:
    """``{status key: (Python type, description)}`` of the keys
    :meth:`LearnerStatus.to_experiment_status` writes, for the CRD's status schema."""
    hints = typing.get_type_hints(LearnerStatus)
    return {
        f.metadata["experiment_key"]: (hints[f.name], f.metadata["doc"])
        for f in dataclasses.fields(LearnerStatus)
        if f.metadata["experiment_key"]
    }


class _Default:
    """Marks a null where the field cannot be None: the default applies (as for a missing
    key), which is how the operator has always read a null count."""


_DEFAULT = _Default()


def _check(name: str, tp: Any, value: Any) -> Any:
    """``value`` as the field's type, or ValueError naming the field."""
    optional = type(None) in typing.get_args(tp)
    base = next((a for a in typing.get_args(tp) if a is not type(None)), tp) if optional else tp
    if value is None:
        return None if optional else _DEFAULT
    origin = typing.get_origin(base)
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"learner status: {name} must be an object, got {value!r}")
        return {k: _check(f"{name}.{k}", Optional[float], v) for k, v in value.items()}
    if base is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"learner status: {name} must be a count, got {value!r}")
        return value
    if base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"learner status: {name} must be a number"
                f"{' or null' if optional else ''}, got {value!r}"
            )
        if not math.isfinite(value):
            if optional:
                return None
            raise ValueError(f"learner status: {name} must be finite, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(
            f"learner status: {name} must be a string"
            f"{' or null' if optional else ''}, got {value!r}"
        )
    return value
