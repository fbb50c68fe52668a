"""The R2D2 agent on hand-made sequences: acting, replay, burn-in training and target sync."""

import numpy as np
import pytest

from seedrl.common.config import parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.r2d2.builder import build

SPEC = EnvSpec("Toy", "float32", (3,), "int32", (), 2)


def _agent(**r2d2):
    exp = parse_experiment({
        "apiVersion": "seedrl.dev/v1alpha1", "kind": "Experiment", "metadata": {"name": "t"},
        "spec": {"agent": {"name": "r2d2",
                           "network": {"hiddenSizes": [16], "lstmSize": 8, "denseSize": 16},
                           "r2d2": {"sequenceLength": 12, "sequencePeriod": 6, "burnIn": 4,
                                    "nStep": 2, "minReplaySize": 4, "targetUpdatePeriod": 5,
                                    "discount": 0.9, **r2d2}},
                 "actors": {"replicas": 4},
                 "learner": {"batchSize": 8, "optimizer": {"learningRate": 0.01}}}})
    return build(exp, SPEC)


def _sequence(rng, good_action, length=12):
    """A sequence where action good_action pays 1 and the other pays 0, never ending."""
    action = rng.integers(0, 2, length).astype(np.int32)
    reward = np.zeros(length, np.float32)
    reward[1:] = (action[:-1] == good_action).astype(np.float32)
    return {"observation": rng.normal(size=(length, 3)).astype(np.float32), "action": action,
            "reward": reward, "terminated": np.zeros(length, bool),
            "truncated": np.zeros(length, bool),
            "initial_state": [np.zeros(8, np.float32), np.zeros(8, np.float32),
                              np.float32(0.1)]}


def test_epsilons_follow_the_actor_schedule_and_evaluation_actors_are_greedy():
    agent = _agent(evaluationActors=1)
    assert [agent.is_evaluation_actor(i) for i in range(4)] == [False, False, False, True]
    assert agent.epsilon(0) == pytest.approx(0.4)
    assert agent.epsilon(2) == pytest.approx(0.4 ** 8)
    assert agent.epsilon(3) == 0.0
    state = agent.initial_state(5, actor_index=0)
    assert [s.shape for s in state] == [(5, 8), (5, 8), (5,)]
    assert np.allclose(state[-1], 0.4)


def test_inference_explores_at_the_actor_rate_and_keeps_the_lstm_state():
    agent = _agent(evaluationActors=1)
    obs = np.zeros((4000, 3), np.float32)
    greedy = agent.inference(obs, agent.initial_state(4000, 3))[0]["action"]
    assert len(set(greedy.tolist())) == 1  # same observation, no exploration: one action
    explore = agent.inference(obs, agent.initial_state(4000, 0))[0]["action"]
    # epsilon 0.4 picks uniformly at random 40% of the time: 20% the other action.
    assert np.mean(explore != greedy) == pytest.approx(0.2, abs=0.03)
    _, state = agent.inference(np.ones((2, 3), np.float32), agent.initial_state(2, 1))
    assert not np.allclose(state[0], 0.0) and np.allclose(state[2], agent.epsilon(1))


def test_replay_fills_then_training_learns_the_rewarded_action():
    agent = _agent()
    rng = np.random.default_rng(0)
    assert not agent.can_train()
    agent.add_unrolls([_sequence(rng, good_action=1) for _ in range(64)])
    assert agent.can_train() and len(agent.replay) == 64
    for _ in range(150):
        metrics = agent.train_from_replay()
        agent.add_unrolls([_sequence(rng, good_action=1)])
    assert np.isfinite(list(metrics.values())).all()
    q = agent.online(rng.normal(size=(256, 3)).astype(np.float32)).numpy()
    assert (q[:, 1] > q[:, 0]).mean() > 0.9
    # Priorities moved away from the initial maximum.
    assert agent.replay._tree.total < len(agent.replay) * agent.replay._max_priority ** 0.9


def test_target_network_syncs_every_period():
    agent = _agent(targetUpdatePeriod=3)
    rng = np.random.default_rng(1)
    agent.add_unrolls([_sequence(rng, 0) for _ in range(16)])
    different = []
    for _ in range(6):
        agent.train_from_replay()
        same = all(np.allclose(t.numpy(), o.numpy()) for t, o in
                   zip(agent.target.variables, agent.online.variables))
        different.append(not same)
    assert different == [True, True, False, True, True, False]


def test_replay_ratio_makes_the_learner_wait_for_data():
    agent = _agent(samplesPerInsert=1.0)
    rng = np.random.default_rng(2)
    agent.add_unrolls([_sequence(rng, 0) for _ in range(16)])
    steps = 0
    while agent.can_train():
        agent.train_from_replay()
        steps += 1
    assert steps == 2  # 16 inserted, 8 sampled per step
    agent.add_unrolls([_sequence(rng, 0) for _ in range(8)])
    assert agent.can_train()


def test_burn_in_steps_get_no_gradient():
    import tensorflow as tf

    agent = _agent()  # sequences of 12: burn-in 4, loss on rows 4..9 (n = 2)
    rng = np.random.default_rng(3)
    seqs = [_sequence(rng, 1) for _ in range(3)]
    obs = tf.Variable(np.stack([s["observation"] for s in seqs]))
    batch = {k: np.stack([s[k] for s in seqs]) for k in ("action", "reward", "terminated",
                                                         "truncated")}
    state = [np.stack([s["initial_state"][i] for s in seqs]) for i in range(2)]
    with tf.GradientTape() as tape:
        loss, td, _ = agent.loss(obs, batch["action"], batch["reward"], batch["terminated"],
                                 batch["truncated"], state, np.ones(3, np.float32))
    grad = np.abs(tape.gradient(loss, obs).numpy()).sum(axis=(0, 2))  # per row
    assert td.shape == (6, 3)
    assert np.all(grad[:4] == 0.0)       # burn-in: no gradient at all
    assert np.all(grad[4:10] > 0.0)      # the rows the loss covers
    # Rows 10 and 11 only feed targets, which carry no gradient either.
    assert np.all(grad[10:] == 0.0)


def test_training_sets_the_priorities_of_the_sampled_sequences():
    agent = _agent()
    rng = np.random.default_rng(4)
    agent.add_unrolls([_sequence(rng, 1) for _ in range(32)])
    before = agent.replay._tree.get(np.arange(32)).copy()
    slots, _, _ = agent.replay.sample(agent.batch_size, np.random.default_rng(99))
    agent._np_rng = np.random.default_rng(99)  # the agent samples those same slots next
    agent.train_from_replay()
    after = agent.replay._tree.get(np.arange(32))
    changed = np.flatnonzero(~np.isclose(before, after))
    assert set(changed.tolist()) == set(slots.tolist())


def test_training_on_given_time_major_sequences_without_the_replay():
    from seedrl.learner.trajectories import stack_unrolls

    agent = _agent()
    rng = np.random.default_rng(5)
    batch = stack_unrolls([_sequence(rng, 1) for _ in range(4)])
    before = [v.numpy().copy() for v in agent.online.trainable_variables]
    metrics = agent.train(batch)
    assert np.isfinite(metrics["loss/q"]) and len(agent.replay) == 0
    assert any(not np.allclose(b, v.numpy())
               for b, v in zip(before, agent.online.trainable_variables))
