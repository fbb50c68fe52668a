"""The runtime keeps per-env recurrent state on the learner and feeds unrolls to training."""

import threading
import time

import numpy as np

from seedrl.common.config import parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.base import Agent
from seedrl.learner.progress import ReturnWindow
from seedrl.learner.runtime import LearnerRuntime
from seedrl.learner.streams import StepData

SPEC = EnvSpec("Counting-v0", "float32", (1,), "int32", (), 2)


class CountingAgent(Agent):
    """State = steps since the env's episode began; it reports the state it acted from."""

    def __init__(self):
        self.batches = []
        self.trained = threading.Event()

    def step_fields(self):
        return {"state_seen": ((), np.dtype(np.float32))}

    def initial_state(self, batch_size, actor_index=0, first_env=0):
        return [np.zeros((batch_size, 1), np.float32)]

    def inference(self, observations, state, rewards=None):
        (count,) = state
        return (
            {"action": np.zeros(len(observations), np.int32), "state_seen": count[:, 0].copy()},
            [count + 1],
        )

    def train(self, batch):
        self.batches.append(batch)
        self.trained.set()
        return {"loss/total": 0.0}

    def set_learning_rate(self, value):
        pass

    def checkpointables(self):
        return {}


def make_runtime(agent, spec=SPEC):
    exp = parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": spec.env_id},
                "learner": {"unrollLength": 3, "batchSize": 1, "inferenceMaxWaitMs": 0},
            },
        }
    )
    return LearnerRuntime(exp, lambda e, s: agent, train=True, env_spec=spec)


def step(k, done_envs=()):
    terminated = np.zeros(k, bool)
    terminated[list(done_envs)] = True
    return StepData(
        np.zeros((k, 1), np.float32), np.ones(k, np.float32), terminated, np.zeros(k, bool)
    )


def test_state_is_per_env_per_stream_and_resets_at_episode_ends():
    agent = CountingAgent()
    runtime = make_runtime(agent)
    try:
        a = runtime.open_stream("a", 2, SPEC)
        b = runtime.open_stream("b", 3, SPEC)
        seen_a, seen_b = [], []
        for t in range(4):
            fa = runtime.submit(a, step(2, done_envs=[1] if t == 2 else []), [])
            fb = runtime.submit(b, step(3), [])
            fa.result(10), fb.result(10)
            seen_a.append(a.state[0][:, 0].tolist())
            seen_b.append(b.state[0][:, 0].tolist())
        # Env a/1's episode ended at t=2: its state restarted from zero there.
        assert seen_a == [[1, 1], [2, 2], [3, 1], [4, 2]]
        assert seen_b[-1] == [4, 4, 4]
        # Unrolls of 4 rows; the one from env a/1 records the states it acted from.
        deadline = time.monotonic() + 10
        while len(agent.batches) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(agent.batches) == 5  # one unroll per env, batch size 1
        rows = sorted(b_["state_seen"][:, 0].tolist() for b_ in agent.batches)
        assert rows == [[0, 1, 0, 1], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
        assert all(b_["initial_state"][0].tolist() == [[0.0]] for b_ in agent.batches)
    finally:
        runtime.shutdown()


def test_status_counts_atari_frames_as_the_frame_skip_per_agent_step():
    agent = CountingAgent()
    spec = EnvSpec("ALE/Pong-v5", "float32", (1,), "int32", (), 2)
    runtime = make_runtime(agent, spec)
    try:
        s = runtime.open_stream("a", 4, spec)
        runtime.submit(s, step(4), []).result(10)
        status = runtime.status()
        # Four agent steps of Pong are 16 emulator frames (frame skip 4), as papers count.
        assert status.env_steps == 4 and status.env_frames == 16
        copied = status.to_experiment_status()
        assert copied["envSteps"] == 4 and copied["envFrames"] == 16
    finally:
        runtime.shutdown()


def test_budget_counts_env_steps_and_episode_returns():
    agent = CountingAgent()
    runtime = make_runtime(agent)
    try:
        s = runtime.open_stream("a", 4, SPEC)
        runtime.submit(s, step(4), [(10.0, 10), (20.0, 20)]).result(10)
        assert runtime.env_steps == 4 and runtime.episodes == 2
        assert runtime.mean_return == 15.0
        assert runtime.check_budget() is None
        runtime.experiment = parse_experiment(
            {"metadata": {"name": "t"}, "spec": {"budget": {"maxEnvSteps": 4}}}
        )
        assert runtime.check_budget() == "max_env_steps"
        runtime.experiment = parse_experiment(
            {
                "metadata": {"name": "t"},
                "spec": {"budget": {"maxEnvSteps": 0, "targetReturn": 12, "returnWindow": 2}},
            }
        )
        runtime.returns = ReturnWindow(2)
        runtime.returns.extend([10.0, 20.0])
        assert runtime.check_budget() == "target_return"
    finally:
        runtime.shutdown()


class ReplayAgent(CountingAgent):
    """A replay agent: unrolls of 4 rows every 2; actor 1 only evaluates."""

    uses_replay = True

    def __init__(self, min_size):
        super().__init__()
        self.stored = []
        self.min_size = min_size
        self.steps = 0

    def unroll_layout(self, unroll_length):
        return 4, 2

    def is_evaluation_actor(self, actor_index):
        return actor_index == 1

    def add_unrolls(self, unrolls):
        self.stored.extend(unrolls)

    def can_train(self):
        # At most one step per stored unroll, so the trainer thread waits for data between
        # steps instead of spinning.
        return len(self.stored) >= self.min_size and self.steps < len(self.stored)

    def train_from_replay(self):
        self.steps += 1
        self.trained.set()
        return {"replay": float(len(self.stored))}


def test_replay_agents_get_overlapping_sequences_and_evaluation_actors_report_apart():
    agent = ReplayAgent(min_size=2)
    runtime = make_runtime(agent)
    try:
        explorer = runtime.open_stream("explore", 1, SPEC, actor_index=0)
        evaluator = runtime.open_stream("eval", 1, SPEC, actor_index=1)
        assert not explorer.evaluation and evaluator.evaluation
        for t in range(8):
            runtime.submit(explorer, step(1), [(10.0, 5)] if t == 3 else []).result(10)
            runtime.submit(evaluator, step(1), [(99.0, 7)] if t == 5 else []).result(10)
        assert agent.trained.wait(10)
        # 8 rows of the explorer make sequences starting at rows 0, 2, 4; the evaluator's
        # steps are never stored.
        deadline = time.monotonic() + 10
        while len(agent.stored) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [u["state_seen"].tolist() for u in agent.stored] == [
            [0, 1, 2, 3],
            [2, 3, 4, 5],
            [4, 5, 6, 7],
        ]
        assert [u["initial_state"][0].tolist() for u in agent.stored] == [[0], [2], [4]]
        assert runtime.learner_steps >= 1
        status = runtime.status()
        assert status.episodes == 1 and status.mean_return == 10.0
        assert status.eval_episodes == 1 and status.eval_mean_return == 99.0
    finally:
        runtime.shutdown()


class PaddedReplayAgent(ReplayAgent):
    """A replay agent whose streams open with 2 zero rows (as R2D2's burn-in)."""

    def unroll_prefix(self):
        return 2


def test_a_replay_agents_prefix_opens_each_stream_with_zero_rows():
    agent = PaddedReplayAgent(min_size=1)
    runtime = make_runtime(agent)
    try:
        stream = runtime.open_stream("explore", 1, SPEC, actor_index=0)
        for _ in range(4):
            runtime.submit(stream, step(1), []).result(10)
        deadline = time.monotonic() + 10
        while len(agent.stored) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # 4 steps after 2 zero rows make sequences starting at padded rows 0 and 2; both
        # begin from the state of the stream's first step.
        assert [u["state_seen"].tolist() for u in agent.stored] == [[0, 0, 0, 1], [0, 1, 2, 3]]
        assert [u["padding"].tolist() for u in agent.stored] == [
            [True, True, False, False],
            [False, False, False, False],
        ]
        assert [u["initial_state"][0].tolist() for u in agent.stored] == [[0], [0]]
    finally:
        runtime.shutdown()


class ValueAgent(CountingAgent):
    """Values each observation at 10 x its first element; records what inference was given;
    acts with the observation's second element (a continuous action in [-1, 1] space)."""

    def __init__(self):
        super().__init__()
        self.calls = []
        self.first_envs = []

    def initial_state(self, batch_size, actor_index=0, first_env=0):
        self.first_envs.append(first_env)
        return super().initial_state(batch_size, actor_index, first_env)

    def inference(self, observations, state, rewards=None):
        self.calls.append((observations.copy(), state[0][:, 0].copy(), rewards.copy()))
        outputs, new_state = super().inference(observations, state, rewards)
        outputs["value"] = observations[:, 0] * 10.0
        outputs["action"] = observations[:, 1:2].copy()
        return outputs, new_state


BOUNDED = EnvSpec("Bounded-v0", "float32", (2,), "float32", (1,), 0, (0.0,), (5.0,))


def _obs(*rows):
    return np.array(rows, np.float32)


def test_continuous_actions_go_out_on_the_envs_bounds_and_are_stored_normalised():
    agent = ValueAgent()
    runtime = make_runtime(agent, BOUNDED)
    try:
        stream = runtime.open_stream("a", 4, BOUNDED)
        k = 4
        for _ in range(4):
            sent = runtime.submit(
                stream,
                StepData(
                    _obs([0, -1.0], [0, 0.0], [0, 1.0], [0, 1.7]),
                    np.zeros(k, np.float32),
                    np.zeros(k, bool),
                    np.zeros(k, bool),
                ),
                [],
            ).result(10)
        # [-1, 1] onto [0, 5]; a Gaussian sample beyond 1 is clipped to the bound.
        np.testing.assert_allclose(sent[:, 0], [0.0, 2.5, 5.0, 5.0])
        deadline = time.monotonic() + 10
        while len(agent.batches) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        stored = sorted(float(b["action"][0, 0, 0]) for b in agent.batches)
        np.testing.assert_allclose(stored, [-1.0, 0.0, 1.0, 1.7], rtol=1e-6)
    finally:
        runtime.shutdown()


def test_truncated_episodes_bootstrap_from_their_final_observations_value():
    agent = ValueAgent()
    runtime = make_runtime(agent, BOUNDED)  # unrolls of 3 transitions, batches of 1
    try:
        stream = runtime.open_stream("a", 3, BOUNDED, first_env=5)
        assert agent.first_envs[-1] == 5  # (the earlier call sized one env's state)
        zeros = np.zeros(3, bool)
        runtime.submit(
            stream,
            StepData(_obs([1, 0], [2, 0], [3, 0]), np.zeros(3, np.float32), zeros, zeros),
            [],
        ).result(10)
        runtime.submit(
            stream, StepData(_obs([4, 0], [5, 0], [6, 0]), np.ones(3, np.float32), zeros, zeros), []
        ).result(10)
        # Env 0 hits its time limit with final observation [7, 0]: its value 70 is what to
        # bootstrap from, not that of [4, 0] (40) seen before it, nor of the reset one (0).
        # Env 2 was restarted after an error: no final observation, the last value stands in.
        truncated = np.array([True, False, True])
        runtime.submit(
            stream,
            StepData(
                _obs([0, 0], [8, 0], [0, 0]),
                np.array([2.0, 1.0, 3.0], np.float32),
                zeros,
                truncated,
                final_ids=np.array([0]),
                final_observations=_obs([7, 0]),
            ),
            [],
        ).result(10)
        runtime.submit(
            stream, StepData(_obs([1, 0], [9, 0], [1, 0]), np.ones(3, np.float32), zeros, zeros), []
        ).result(10)
        obs, count, rewards = agent.calls[2]
        # The final observation rode in the same call, with the state from before the reset
        # and the reward of the step that ended the episode; the new episodes start at
        # state 0 and reward 0.
        np.testing.assert_array_equal(obs[:, 0], [0, 8, 0, 7])
        np.testing.assert_array_equal(count, [0, 2, 0, 2])
        np.testing.assert_array_equal(rewards, [0, 1, 0, 2])
        assert agent.calls[2][0].shape[0] == 4 and agent.calls[3][0].shape[0] == 3
        deadline = time.monotonic() + 10
        while len(agent.batches) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        by_env = {int(b["observation"][1, 0, 0]) - 4: b for b in agent.batches}
        np.testing.assert_allclose(by_env[0]["final_value"][:, 0], [0, 0, 70, 0])
        np.testing.assert_allclose(by_env[1]["final_value"][:, 0], [0, 0, 0, 0])
        np.testing.assert_allclose(by_env[2]["final_value"][:, 0], [0, 0, 60, 0])
    finally:
        runtime.shutdown()


def test_a_step_that_trained_on_nothing_keeps_the_last_updates_metrics():
    """PPO drops a batch whose unrolls all lag too far and reports only the lag; the status
    must still carry the last real update's loss and KL (a run's /status lost its KL then)."""
    runtime = make_runtime(CountingAgent())
    runtime._after_step({"loss/total": 1.5, "kl": 0.01, "policy_lag": 1.0}, {"a"})
    runtime._after_step({"policy_lag": 9.0, "dropped_unrolls": 4.0}, {"a"})
    assert runtime.last_metrics == {
        "loss/total": 1.5,
        "kl": 0.01,
        "policy_lag": 9.0,
        "dropped_unrolls": 4.0,
    }
    assert runtime.learner_steps == 2


class SamplingAgent(CountingAgent):
    """Samples action 0 for every row; its greedy (mode) action is 1. Actor 2 of 3 only
    evaluates, as spec.agent.vtrace.evaluationActors = 1 makes it."""

    num_actors = 3
    evaluation_actors = 1

    def greedy_actions(self, outputs):
        return np.ones_like(outputs["action"])


def test_evaluation_streams_act_greedily_and_are_not_trained_on():
    agent = SamplingAgent()
    runtime = make_runtime(agent)  # replicas 2 by default: index 2 would be past them
    runtime.experiment = parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": SPEC.env_id},
                "learner": {"unrollLength": 3, "batchSize": 1, "inferenceMaxWaitMs": 0},
                "actors": {"replicas": 3},
            },
        }
    )
    try:
        explorer = runtime.open_stream("explore", 2, SPEC, actor_index=0)
        evaluator = runtime.open_stream("eval", 3, SPEC, actor_index=2)
        beyond = runtime.open_stream("beyond", 1, SPEC, actor_index=3)
        assert (explorer.evaluation, evaluator.evaluation, beyond.evaluation) == (
            False,
            True,
            False,
        )
        for t in range(4):
            # Batched together or not, each kind of stream gets its own kind of action.
            sent = [
                runtime.submit(s, step(s.num_envs), [(7.0, 4)] if t == 3 else [])
                for s in (explorer, evaluator, beyond)
            ]
            acts = [f.result(10).tolist() for f in sent]
            assert acts == [[0, 0], [1, 1, 1], [0]]
        assert agent.trained.wait(10)
        deadline = time.monotonic() + 10
        while len(agent.batches) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Unrolls of 3 rows every 3: one per env of the training streams, none of the other's.
        assert sorted(b["observation"].shape[1] for b in agent.batches) == [1, 1, 1]
        status = runtime.status()
        assert status.episodes == 2 and status.eval_episodes == 1
        assert status.eval_mean_return == 7.0
    finally:
        runtime.shutdown()
