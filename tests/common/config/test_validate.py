"""The rules across fields and the dependent defaults (common/config/validate.py)."""

from __future__ import annotations

import copy

import pytest

from seedrl.common.config import ConfigError, dump_experiment, load_yaml, parse_experiment, set_path
from support.experiment_docs import assert_one, doc, only_problem, problems_of, with_path


@pytest.mark.parametrize(
    "uri", ["s3://bucket/x", "http://host/x", "gs://", "gs://b/x", "gs://Upper/x"]
)
def test_unsupported_checkpoint_uri_rejected(uri):
    assert_one(
        with_path("spec.checkpoint.uri", uri), "spec.checkpoint.uri", "must match", repr(uri)
    )


@pytest.mark.parametrize(
    "uri",
    ["", "/tmp/ckpt", "runs/x", "file:///tmp/ckpt", "gs://my-bucket", "gs://my-bucket/runs/exp-1"],
)
def test_supported_checkpoint_uri_accepted(uri):
    assert parse_experiment(with_path("spec.checkpoint.uri", uri)).spec.checkpoint.uri == uri


def test_linear_decay_needs_env_step_budget():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 0)
    assert_one(d, "spec.learner.optimizer.linearDecay", "maxEnvSteps > 0")


def test_linear_decay_with_budget_accepted_and_no_decay_without_budget_accepted():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 10)
    assert parse_experiment(d).spec.learner.optimizer.linear_decay is True
    d = with_path("spec.budget.maxEnvSteps", 0)
    assert parse_experiment(d).spec.budget.max_env_steps == 0


def test_both_cross_field_problems_reported_together():
    d = with_path("spec.learner.optimizer.linearDecay", True)
    set_path(d, "spec.budget.maxEnvSteps", 0)
    set_path(d, "spec.agent.name", "ppo")
    set_path(d, "spec.learner.batchSize", 2)
    assert sorted(p for p, _ in problems_of(d)) == [
        "spec.agent.ppo.minibatches",
        "spec.learner.optimizer.linearDecay",
    ]


def test_ppo_minibatches_must_divide_the_batch():
    assert only_problem(
        doc(agent={"name": "ppo", "ppo": {"minibatches": 3}}, learner={"batchSize": 16})
    ) == ("spec.agent.ppo.minibatches", "must divide spec.learner.batchSize (16), got 3")


def test_vtrace_minibatches_must_divide_the_batch():
    assert only_problem(
        doc(agent={"name": "vtrace", "vtrace": {"minibatches": 3}}, learner={"batchSize": 16})
    ) == ("spec.agent.vtrace.minibatches", "must divide spec.learner.batchSize (16), got 3")


def test_r2d2_sequences_are_the_papers_trained_steps_after_a_burn_in_prefix():
    r2 = parse_experiment(doc(agent={"name": "r2d2"})).spec.agent.r2d2
    assert (r2.train_length, r2.burn_in, r2.sequence_period) == (80, 40, 40)


def test_r2d2_sequence_rules():
    problems = dict(
        problems_of(doc(agent={"name": "r2d2", "r2d2": {"trainLength": 20, "sequencePeriod": 21}}))
    )
    assert problems["spec.agent.r2d2.sequencePeriod"].startswith(
        "must be at most spec.agent.r2d2.trainLength (20)"
    )
    # A burn-in may be longer than the trained steps, and those fewer than n: the last
    # steps of a sequence use shorter returns.
    r2d2 = {"trainLength": 2, "burnIn": 10, "nStep": 5, "sequencePeriod": 1}
    parse_experiment(doc(agent={"name": "r2d2", "r2d2": r2d2}))
    # The old sequenceLength counted the burn-in: read as the trained steps it would train
    # another shape, so it is refused with what replaces it.
    path, reason = only_problem(doc(agent={"name": "r2d2", "r2d2": {"sequenceLength": 80}}))
    assert path == "spec.agent.r2d2.sequenceLength"
    assert reason.startswith("unknown field") and "trainLength S - B" in reason


def test_a_budget_that_ends_before_the_replay_fills_is_refused():
    # 39,999 env steps make at most 999 sequences of one every 40 steps; learning needs 1,000.
    path, reason = only_problem(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 39_999}))
    assert path == "spec.agent.r2d2.minReplaySize"
    assert "999 sequences" in reason and "spec.budget.maxEnvSteps (39999)" in reason
    assert "spec.agent.r2d2.sequencePeriod (40)" in reason and "got 1000" in reason
    parse_experiment(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 40_000}))
    parse_experiment(doc(agent={"name": "r2d2"}, budget={"maxEnvSteps": 0}))  # no limit


def test_r2d2_alone_is_recurrent_with_the_papers_optimizer():
    exp = parse_experiment(doc(agent={"name": "r2d2"}))
    assert exp.spec.agent.network.lstm_size == 512
    optimizer = exp.spec.learner.optimizer
    assert (optimizer.name, optimizer.learning_rate, optimizer.epsilon) == ("adam", 1e-4, 1e-3)
    # The other agents keep theirs.
    for name in ("vtrace", "ppo"):
        exp = parse_experiment(doc(agent={"name": name}))
        assert exp.spec.agent.network.lstm_size == 0
        assert (exp.spec.learner.optimizer.learning_rate, exp.spec.learner.optimizer.epsilon) == (
            1e-3,
            1e-7,
        )


def test_a_replay_that_cannot_reach_its_minimum_is_refused():
    # The learner would wait for minReplaySize sequences forever while the actors ran on.
    r2d2 = {"replayCapacity": 500, "minReplaySize": 1000}
    path, reason = only_problem(doc(agent={"name": "r2d2", "r2d2": r2d2}))
    assert path == "spec.agent.r2d2.minReplaySize"
    assert "spec.agent.r2d2.replayCapacity (500)" in reason and "got 1000" in reason
    parse_experiment(doc(agent={"name": "r2d2", "r2d2": {"replayCapacity": 1000}}))
    # Another agent ignores the section.
    parse_experiment(doc(agent={"name": "vtrace", "r2d2": r2d2}))


def test_agent_dependent_defaults_yield_to_what_the_document_says():
    document = doc(
        agent={"name": "r2d2", "network": {"lstmSize": 0}},
        learner={"optimizer": {"name": "rmsprop", "learningRate": 3e-4}},
    )
    before = copy.deepcopy(document)
    exp = parse_experiment(document)
    assert document == before  # resolving defaults changes nothing of the caller's
    assert exp.spec.agent.network.lstm_size == 0
    optimizer = exp.spec.learner.optimizer
    assert (optimizer.name, optimizer.learning_rate, optimizer.epsilon) == ("rmsprop", 3e-4, 1e-3)
    # null stands for the agent's default, as leaving the field out does.
    exp = parse_experiment(
        doc(agent={"name": "r2d2", "network": {"lstmSize": None}}, learner={"optimizer": None})
    )
    assert exp.spec.agent.network.lstm_size == 512
    assert exp.spec.learner.optimizer.learning_rate == 1e-4
    # A dumped Experiment states the resolved values, so it reads back the same whatever the
    # agent's defaults become.
    dumped = load_yaml(dump_experiment(exp))
    assert dumped["spec"]["agent"]["network"]["lstmSize"] == 512
    assert parse_experiment(dumped) == exp


def test_the_batchppo_preset_clips_observations_at_batchppos_5():
    def clip_of(**ppo):
        return parse_experiment(
            doc(agent={"name": "ppo", "ppo": ppo})
        ).spec.agent.ppo.observation_clip

    assert clip_of() == 10.0 and clip_of(preset="clip") == 10.0
    assert clip_of(preset="batchppo") == 5.0
    assert clip_of(preset="batchppo", observationClip=8) == 8.0
    assert clip_of(preset="batchppo", observationClip=None) == 5.0


def test_agent_dependent_defaults_leave_bad_documents_to_the_parser():
    problems = dict(problems_of(doc(agent={"name": "r2d2", "network": 5})))
    assert problems["spec.agent.network"].startswith("must be a mapping")
    problems = dict(problems_of(doc(agent={"name": ["r2d2"]})))
    assert problems["spec.agent.name"].startswith("must be a string")


def test_env_backend_envpool_must_be_able_to_step_the_env():
    assert parse_experiment(doc(env={"id": "ALE/Pong-v5"})).spec.env.backend == "auto"
    parse_experiment(doc(env={"id": "ALE/Pong-v5", "backend": "envpool", "options": {"mode": 1}}))
    assert dict(problems_of(doc(env={"id": "CartPole-v1", "backend": "envpool"}))) == {
        "spec.env.backend": "envpool steps only Atari games (ALE/...), not CartPole-v1"
    }
    problems = problems_of(
        doc(
            env={
                "id": "ALE/Pong-v5",
                "backend": "envpool",
                "atari": {"noopMax": 0, "frameSkip": 1},
                "options": {"render_mode": "rgb_array"},
            }
        )
    )
    assert dict(problems) == {
        "spec.env.atari.noopMax": "envpool needs noopMax >= 1, got 0",
        "spec.env.atari.frameSkip": "envpool needs frameSkip >= 2, got 1",
        "spec.env.options": "envpool takes only mode, difficulty, not render_mode",
    }
    # auto falls back to gymnasium where envpool cannot serve: no problem to report.
    parse_experiment(doc(env={"id": "ALE/Pong-v5", "atari": {"noopMax": 0}}))
    assert dict(problems_of(doc(env={"backend": "cpp"})))["spec.env.backend"].startswith(
        "must be one of auto, gymnasium, envpool"
    )


def test_metrics_port_must_differ_from_grpc_port():
    assert_one(doc(learner={"port": 9090}), "spec.learner.metricsPort", "must differ")


def test_max_envs_per_actor_bounds_one_stream():
    exp = parse_experiment(
        {
            "metadata": {"name": "x"},
            "spec": {
                "actors": {"envsPerActor": 300, "streamsPerActor": 2},
                "learner": {"maxEnvsPerActor": 150},
            },
        }
    )
    assert exp.spec.learner.max_envs_per_actor == 150
    with pytest.raises(ConfigError) as e:
        parse_experiment(
            {
                "metadata": {"name": "x"},
                "spec": {
                    "actors": {"envsPerActor": 301, "streamsPerActor": 2},
                    "learner": {"maxEnvsPerActor": 150},
                },
            }
        )
    assert e.value.problems == [
        (
            "spec.learner.maxEnvsPerActor",
            "must be at least the envs of one actor stream (envsPerActor "
            "/ streamsPerActor = 151), got 150",
        )
    ]
