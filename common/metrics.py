"""The Prometheus series of the learner and the actors, declared once: name, type, labels, help.

The learner (``seedrl.learner.metrics``) and the actors (``seedrl.actors.metrics``) register
their series from these declarations, and the reference page of every metric
(``docs/reference/metrics.md``, ``make generate``) is written from them, so what a process
serves and what the page says are one list. Names are prometheus_client's family names: a
counter's series carries ``_total`` after it (``seedrl_learner_env_steps_total``), a
histogram's ``_bucket``, ``_sum`` and ``_count``. Every series carries the ``experiment``
label (``metadata.name``).
"""

from __future__ import annotations

import dataclasses

#: Seconds of history the learner's frames/s gauge averages over.
RATE_WINDOW_S = 10.0


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric family.

    Attributes:
      name: the family name (see the module docstring for the series it makes).
      kind: ``counter``, ``gauge`` or ``histogram``.
      help: what it measures, as Prometheus shows it.
      labels: its label names, in order.
      when: when a process serves it, if not always (empty: always).
    """

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ("experiment",)
    when: str = ""


def _counter(name: str, help_: str, labels: tuple[str, ...] = ("experiment",), when: str = ""):
    return Metric(name, "counter", help_, labels, when)


def _gauge(name: str, help_: str, labels: tuple[str, ...] = ("experiment",), when: str = ""):
    return Metric(name, "gauge", help_, labels, when)


def _histogram(name: str, help_: str, labels: tuple[str, ...] = ("experiment",)):
    return Metric(name, "histogram", help_, labels)


#: What each label of the learner's and the actors' series holds.
LABELS = {
    "experiment": "The Experiment's name (`metadata.name`).",
    "kind": "`train` for the actors that explore and are trained on, `eval` for the "
    "evaluation actors (`evaluationActors`).",
    "term": "A loss term of the agent's last training step (V-trace: `total`, `policy`, "
    "`value`, `entropy`; PPO: `total`, `policy`, `value`; R2D2: `q`).",
    "stat": "Another statistic the agent reports for its last training step, by its name "
    "(`grad_norm` for every agent; PPO's `kl` and `entropy` among others).",
    "file": "What the learner failed to write: `status.json`, `metrics.jsonl`, `summary.json`, "
    "`tensorboard` or `run directory`.",
    "actor": "The actor's index (0 to `spec.actors.replicas` - 1).",
}

_EPISODES = ("experiment", "kind")

# -- the learner: observed as things happen ---------------------------------------------------
INFERENCE_BATCH_SIZE = _histogram(
    "seedrl_learner_inference_batch_size", "Env steps evaluated per inference call."
)
INFERENCE_LATENCY = _histogram(
    "seedrl_learner_inference_latency_seconds", "Time of one batched inference call."
)
EPISODE_RETURN = _histogram(
    "seedrl_learner_episode_return", "Undiscounted return of finished episodes.", _EPISODES
)
EPISODE_LENGTH = _histogram(
    "seedrl_learner_episode_length_steps", "Agent steps of finished episodes.", _EPISODES
)
# -- the learner: read when Prometheus scrapes ------------------------------------------------
ENV_STEPS = _counter("seedrl_learner_env_steps", "Agent steps of all actors.")
ENV_FRAMES = _counter(
    "seedrl_learner_env_frames", "Environment frames of all actors (steps x Atari frame skip)."
)
LEARNER_STEPS = _counter("seedrl_learner_steps", "Training steps of the learner.")
SKIPPED_UPDATES = _counter(
    "seedrl_learner_skipped_updates",
    "Training steps skipped because their gradients were not finite.",
)
REFUSED_STREAMS = _counter(
    "seedrl_learner_refused_streams", "Actor streams refused or failed for what they sent."
)
INVALID_ACTIONS = _counter(
    "seedrl_learner_invalid_actions",
    "Actions inference produced outside the action space (replaced).",
)
SECONDS_WITHOUT_ENV_STEPS = _gauge(
    "seedrl_learner_seconds_without_env_steps", "Seconds since the last env step arrived."
)
EPISODES = _counter("seedrl_learner_episodes", "Finished episodes.", _EPISODES)
FRAMES_PER_SECOND = _gauge(
    "seedrl_learner_env_frames_per_second",
    f"Frames per second over the last {RATE_WINDOW_S:.0f} s.",
)
CONNECTED_ACTORS = _gauge("seedrl_learner_connected_actors", "Actor streams connected now.")
QUEUED_UNROLLS = _gauge("seedrl_learner_queued_unrolls", "Unrolls waiting for training.")
REPLAY_SEQUENCES = _gauge(
    "seedrl_learner_replay_sequences",
    "Sequences held in the replay.",
    when="with a replay (r2d2)",
)
MEAN_RETURN = _gauge(
    "seedrl_learner_mean_return",
    "Mean return of the last returnWindow training episodes.",
    when="once an episode has finished",
)
EVAL_MEAN_RETURN = _gauge(
    "seedrl_learner_eval_mean_return",
    "Mean return of the evaluation actors' last returnWindow episodes.",
    when="once an evaluation episode has finished",
)
ENV_RESTARTS = _counter(
    "seedrl_learner_env_restarts", "Envs the actors recreated after they raised."
)
LOSS = _gauge(
    "seedrl_learner_loss", "Loss terms of the last training step.", ("experiment", "term")
)
TRAIN_STAT = _gauge(
    "seedrl_learner_train_stat",
    "Other statistics of the last training step (entropy, gradient norm, ...).",
    ("experiment", "stat"),
)
POLICY_LAG = _gauge(
    "seedrl_learner_policy_lag_updates",
    "Mean policy lag of the last training batch, in updates.",
    when="once the agent reports a policy lag (ppo)",
)
FINISHED = _gauge("seedrl_learner_finished", "1 once the run has stopped.")
WRITE_FAILURES = _counter(
    "seedrl_learner_write_failures",
    "Writes of the learner's own files (status, metrics log, summary, TensorBoard) "
    "that failed; training goes on.",
    ("experiment", "file"),
)
CHECKPOINT_INTERVAL = _gauge(
    "seedrl_learner_checkpoint_interval_seconds",
    "Configured time between checkpoints (0: by steps only).",
    when="with checkpoints",
)
CHECKPOINT_FAILURES = _counter(
    "seedrl_learner_checkpoint_failures",
    "Checkpoint publications that failed.",
    when="with checkpoints",
)
CHECKPOINT_AGE = _gauge(
    "seedrl_learner_checkpoint_age_seconds",
    "Seconds since the last published checkpoint (or since the learner started, before its first).",
    when="with checkpoints",
)
CHECKPOINT_DURATION = _gauge(
    "seedrl_learner_checkpoint_duration_seconds",
    "How long the last checkpoint took to publish.",
    when="after the first checkpoint",
)
LAST_CHECKPOINT_TIME = _gauge(
    "seedrl_learner_last_checkpoint_timestamp_seconds",
    "When the last checkpoint was published.",
    when="after the first checkpoint",
)

# -- an actor: every series also carries its index --------------------------------------------
_ACTOR = ("experiment", "actor")
ACTOR_ENV_STEP_TIME = _histogram(
    "seedrl_actor_env_step_seconds", "Time to step one batch of envs.", _ACTOR
)
ACTOR_ROUND_TRIP = _histogram(
    "seedrl_actor_round_trip_seconds", "From sending a step to receiving its actions.", _ACTOR
)
ACTOR_ENV_STEPS = _counter("seedrl_actor_env_steps", "Env steps this actor stepped.", _ACTOR)
ACTOR_BATCH_SIZE = _gauge(
    "seedrl_actor_batch_size",
    "Envs stepped together per message, summed over the actor's streams.",
    _ACTOR,
)
ACTOR_CONNECTED_STREAMS = _gauge(
    "seedrl_actor_connected_streams", "Streams connected to the learner now.", _ACTOR
)
ACTOR_RECONNECTS = _counter(
    "seedrl_actor_reconnects", "Connections to the learner after a stream's first one.", _ACTOR
)
ACTOR_ENV_RESTARTS = _counter(
    "seedrl_actor_env_restarts",
    "Environments (or env worker processes) restarted after a crash.",
    _ACTOR,
)

#: Every learner metric, in the order the page lists them.
LEARNER: tuple[Metric, ...] = tuple(
    v for k, v in dict(globals()).items() if isinstance(v, Metric) and not k.startswith("ACTOR_")
)
#: Every actor metric.
ACTOR: tuple[Metric, ...] = tuple(
    v for k, v in dict(globals()).items() if isinstance(v, Metric) and k.startswith("ACTOR_")
)
