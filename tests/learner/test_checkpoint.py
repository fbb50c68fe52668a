"""Checkpoints restore the agent, the counters and an R2D2 replay written beside them."""

import numpy as np
import pytest

from common.config import parse_experiment
from common.wire import EnvSpec
from learner.agents import build_agent
from learner.checkpoint import EXTRA_SUFFIX, Checkpointer
from learner.runtime import LearnerRuntime

SPEC = EnvSpec("Toy", "float32", (3,), "int32", (), 2)


def _experiment(max_gb=4.0):
    return parse_experiment({
        "apiVersion": "seedrl.dev/v1alpha1", "kind": "Experiment", "metadata": {"name": "t"},
        "spec": {"agent": {"name": "r2d2", "network": {"hiddenSizes": [8], "lstmSize": 4,
                                                       "denseSize": 8},
                           "r2d2": {"sequenceLength": 8, "sequencePeriod": 4, "burnIn": 2,
                                    "nStep": 2, "minReplaySize": 2,
                                    "replayCheckpointMaxGb": max_gb}},
                 "learner": {"batchSize": 2}}})


def _fill(agent, n, seed):
    rng = np.random.default_rng(seed)
    agent.add_unrolls([{
        "observation": rng.normal(size=(8, 3)).astype(np.float32),
        "action": rng.integers(0, 2, 8).astype(np.int32),
        "reward": rng.normal(size=8).astype(np.float32),
        "terminated": np.zeros(8, bool), "truncated": np.zeros(8, bool),
        "initial_state": [rng.normal(size=4).astype(np.float32),
                          rng.normal(size=4).astype(np.float32), np.float32(0.1)]}
        for _ in range(n)])


@pytest.fixture
def runtimes():
    made = []

    def make(exp):
        runtime = LearnerRuntime(exp, build_agent, train=False)
        made.append(runtime)
        return runtime, build_agent(exp, SPEC)

    yield make
    for runtime in made:
        runtime.shutdown()


def test_replay_and_counters_survive_a_restart(tmp_path, runtimes):
    exp = _experiment()
    runtime, agent = runtimes(exp)
    tmp_path = tmp_path / "not-yet-made"
    saver = Checkpointer(str(tmp_path), runtime, keep=1, interval_steps=0, interval_seconds=0)
    saver.attach(agent)
    _fill(agent, 5, seed=0)
    agent.train_from_replay()
    runtime.learner_steps, runtime.env_steps = 1, 40
    first = saver.save()
    _fill(agent, 3, seed=1)
    runtime.learner_steps = 2
    second = saver.save()
    # keep=1: the first checkpoint and its replay file are gone.
    assert not (tmp_path / (first.split("/")[-1] + EXTRA_SUFFIX)).exists()
    assert (tmp_path / (second.split("/")[-1] + EXTRA_SUFFIX)).exists()

    runtime2, agent2 = runtimes(exp)
    Checkpointer(str(tmp_path), runtime2, keep=1, interval_steps=0,
                 interval_seconds=0).attach(agent2)
    assert (runtime2.learner_steps, runtime2.env_steps) == (2, 40)
    assert len(agent2.replay) == 8 and agent2.replay.added == 8
    a = agent.replay.sample(6, np.random.default_rng(7))
    b = agent2.replay.sample(6, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1]["observation"], b[1]["observation"])
    np.testing.assert_array_equal(a[1]["h"], b[1]["h"])
    for x, y in zip(agent.online.trainable_variables, agent2.online.trainable_variables):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_a_replay_over_the_size_limit_is_not_written(tmp_path, runtimes):
    runtime, agent = runtimes(_experiment(max_gb=1e-9))
    saver = Checkpointer(str(tmp_path), runtime, keep=2, interval_steps=0, interval_seconds=0)
    saver.attach(agent)
    _fill(agent, 3, seed=0)
    saver.save()
    assert not list(tmp_path.glob("*" + EXTRA_SUFFIX))
    assert list(tmp_path.glob("ckpt-*.index"))
