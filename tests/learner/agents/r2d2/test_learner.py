"""The R2D2 agent on hand-made sequences: acting, replay, burn-in training and target sync."""

import numpy as np
import pytest
import tensorflow as tf

from seedrl.common.config import parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.r2d2 import losses
from seedrl.learner.agents.r2d2.builder import build
from seedrl.learner.trajectories import UnrollBuilder, split_unroll

SPEC = EnvSpec("Toy", "float32", (3,), "int32", (), 2)
ROWS = 11  # burnIn 4 + trainLength 6 + the row to bootstrap from


def _agent(network=None, **r2d2):
    exp = parse_experiment(
        {
            "apiVersion": "seedrl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "t"},
            "spec": {
                "agent": {
                    "name": "r2d2",
                    "network": network or {"hiddenSizes": [16], "lstmSize": 8, "denseSize": 16},
                    "r2d2": {
                        "trainLength": 6,
                        "burnIn": 4,
                        "sequencePeriod": 6,
                        "nStep": 2,
                        "minReplaySize": 4,
                        "targetUpdatePeriod": 5,
                        "samplesPerInsert": 0,
                        "discount": 0.9,
                        **r2d2,
                    },
                },
                "actors": {"replicas": 4, "envsPerActor": 8},
                "learner": {"batchSize": 8, "optimizer": {"learningRate": 0.01}},
            },
        }
    )
    return build(exp, SPEC)


def _sequence(rng, good_action, length=ROWS, q_values=None):
    """A sequence where action good_action pays 1 and the other pays 0, never ending."""
    action = rng.integers(0, 2, length).astype(np.int32)
    reward = np.zeros(length, np.float32)
    reward[1:] = (action[:-1] == good_action).astype(np.float32)
    seq = {
        "observation": rng.normal(size=(length, 3)).astype(np.float32),
        "action": action,
        "reward": reward,
        "terminated": np.zeros(length, bool),
        "truncated": np.zeros(length, bool),
        "final_value": np.zeros(length, np.float32),
        "q_values": np.zeros((length, 2), np.float32) if q_values is None else q_values,
        "initial_state": [
            np.zeros(8, np.float32),
            np.zeros(8, np.float32),
            np.zeros(2, np.float32),
            np.float32(0.1),
        ],
    }
    return seq


def _loss(agent, seqs, obs=None, weights=None, padding=None):
    stack = {
        k: np.stack([s[k] for s in seqs])
        for k in ("action", "reward", "terminated", "truncated", "final_value")
    }
    n_state = len(agent.online.initial_state(1))
    state = [np.stack([s["initial_state"][i] for s in seqs]) for i in range(n_state)]
    obs = np.stack([s["observation"] for s in seqs]) if obs is None else obs
    weights = np.ones(len(seqs), np.float32) if weights is None else weights
    return agent.loss(
        obs,
        stack["action"],
        stack["reward"],
        stack["terminated"],
        stack["truncated"],
        stack["final_value"],
        state,
        weights,
        padding,
    )


def test_a_default_r2d2_is_recurrent_with_the_papers_adam():
    exp = parse_experiment({"metadata": {"name": "t"}, "spec": {"agent": {"name": "r2d2"}}})
    agent = build(exp, SPEC)
    assert agent.online.recurrent and agent.online.lstm_size == 512
    assert agent.target.lstm_size == 512
    assert type(agent.optimizer).__name__ == "Adam"
    assert agent.optimizer.learning_rate.numpy() == np.float32(1e-4)
    assert agent.optimizer.epsilon == 1e-3


def test_epsilons_follow_seeds_schedule_over_every_env_of_every_actor():
    agent = _agent(evaluationActors=1)
    assert [agent.is_evaluation_actor(i) for i in range(4)] == [False, False, False, True]
    # 3 exploring actors x 8 envs: SEED's 0.4 ** linspace(1, 8, 24) over them, in order.
    want = 0.4 ** np.linspace(1, 8, 24)
    got = np.concatenate(
        [agent.initial_state(4, actor_index=a, first_env=f)[-1] for a in range(3) for f in (0, 4)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.all(agent.initial_state(8, actor_index=3)[-1] == 0.0)
    state = agent.initial_state(5, actor_index=0)
    assert [s.shape for s in state] == [(5, 8), (5, 8), (5, 2), (5,)]


def test_inference_explores_at_each_envs_rate_and_keeps_the_lstm_state():
    agent = _agent(evaluationActors=1)
    obs = np.zeros((4000, 3), np.float32)
    greedy = agent.inference(obs, agent.initial_state(4000, 3))[0]["action"]
    assert len(set(greedy.tolist())) == 1  # same observation, no exploration: one action
    state = agent.initial_state(4000, 0)
    state[-1][:] = 0.4
    explore = agent.inference(obs, state)[0]["action"]
    # epsilon 0.4 picks uniformly at random 40% of the time: 20% the other action.
    assert np.mean(explore != greedy) == pytest.approx(0.2, abs=0.03)
    start = agent.initial_state(2, 1)
    out, state = agent.inference(np.ones((2, 3), np.float32), start)
    assert not np.allclose(state[0], 0.0) and np.allclose(state[-1], start[-1])
    # The action taken is the next step's previous action (one-hot), for the LSTM's input.
    np.testing.assert_array_equal(state[2], np.eye(2)[out["action"]])
    q = out["q_values"]
    # In float32 h^-1 amplifies the rounding of its input, differently inside the graph.
    np.testing.assert_allclose(out["value"], losses.inverse_value_rescale(q.max(-1)), rtol=1e-4)


def test_replay_fills_then_training_learns_the_rewarded_action():
    # Seeded, and 400 updates: at 150 the greedy share was below 0.9 for 2 of 12 weight
    # initialisations (measured); at 400 it was 1.0 for all 12.
    tf.keras.utils.set_random_seed(0)
    agent = _agent()
    rng = np.random.default_rng(0)
    assert not agent.can_train()
    agent.add_unrolls([_sequence(rng, good_action=1) for _ in range(64)])
    assert agent.can_train() and len(agent.replay) == 64
    for _ in range(400):
        metrics = agent.train_from_replay()
        agent.add_unrolls([_sequence(rng, good_action=1)])
    assert np.isfinite(list(metrics.values())).all()
    rows = rng.normal(size=(256, 3)).astype(np.float32)
    q, _ = agent.online.step(rows, agent.online.initial_state(256))
    assert (q.numpy()[:, 1] > q.numpy()[:, 0]).mean() > 0.9


def test_target_network_syncs_every_period():
    agent = _agent(targetUpdatePeriod=3)
    rng = np.random.default_rng(1)
    agent.add_unrolls([_sequence(rng, 0) for _ in range(16)])
    different = []
    for _ in range(6):
        agent.train_from_replay()
        same = all(
            np.allclose(t.numpy(), o.numpy())
            for t, o in zip(agent.target.variables, agent.online.variables)
        )
        different.append(not same)
    assert different == [True, True, False, True, True, False]


def test_replay_ratio_holds_both_ways():
    agent = _agent(samplesPerInsert=2.0)
    rng = np.random.default_rng(2)
    agent.add_unrolls([_sequence(rng, 0) for _ in range(16)])
    # Learning starts once the replay has its minimum; the ratio counts from there.
    assert agent.can_train() and agent.insert_limit() == 0
    agent.train_from_replay()  # 8 sampled, 0 inserted since the start
    assert not agent.can_train()
    assert agent.insert_limit() == 4  # 8 samples / 2 per insert
    agent.add_unrolls([_sequence(rng, 0) for _ in range(3)])
    assert not agent.can_train() and agent.insert_limit() == 1
    agent.add_unrolls([_sequence(rng, 0)])
    assert agent.can_train() and agent.insert_limit() == 0
    sampled, inserted = 0, 0
    for _ in range(20):
        while not agent.can_train():
            agent.add_unrolls([_sequence(rng, 0) for _ in range(agent.insert_limit())])
            inserted += 1
        agent.train_from_replay()
        sampled += 8
    assert agent._sampled == pytest.approx(2.0 * (agent.replay.added - 16), abs=8)


def test_seeds_replay_ratio_is_the_default():
    agent = _agent(samplesPerInsert=1.5)
    assert parse_experiment({"metadata": {"name": "t"}}).spec.agent.r2d2.samples_per_insert == 1.5
    rng = np.random.default_rng(3)
    agent.add_unrolls([_sequence(rng, 0) for _ in range(16)])
    agent.train_from_replay()
    assert agent.insert_limit() == 6  # ceil(8 / 1.5)


FIELDS = {
    "observation": ((3,), np.dtype(np.float32)),
    "action": ((), np.dtype(np.int32)),
    "reward": ((), np.dtype(np.float32)),
    "terminated": ((), np.dtype(bool)),
    "truncated": ((), np.dtype(bool)),
    "final_value": ((), np.dtype(np.float32)),
}


def _builder(agent, fields=FIELDS):
    """The unroll builder the runtime gives a one-env stream of ``agent``."""
    length, period = agent.unroll_layout(0)
    return UnrollBuilder(0, 1, fields, length=length, period=period, prefix=agent.unroll_prefix())


def test_every_step_of_a_stream_is_trained_in_train_length_over_period_sequences():
    # A feed-forward Q-network, so the gradient of the loss with respect to a row's
    # observation is non-zero exactly when Q(x_t, a_t) of that row is in the loss. The
    # paper's layout at a small scale: 8 trained steps after a burn-in of 8, a sequence every
    # 4 steps, n = 5; the loss's last transitions look ahead less.
    agent = _agent(
        network={"hiddenSizes": [16], "denseSize": 16, "lstmSize": 0},
        trainLength=8,
        burnIn=8,
        sequencePeriod=4,
        nStep=5,
    )
    assert agent.unroll_layout(0) == (17, 4) and agent.unroll_prefix() == 8
    builder = _builder(agent)
    rng = np.random.default_rng(4)
    stream_rows = 100
    sequences = []
    for t in range(stream_rows):
        row = {
            "observation": rng.normal(size=(1, 3)).astype(np.float32),
            "action": rng.integers(0, 2, 1).astype(np.int32),
            "reward": rng.normal(size=1).astype(np.float32),
            "terminated": np.array([t == 37]),
            "truncated": np.array([False]),
            "final_value": np.zeros(1, np.float32),
        }
        unroll = builder.append(row, [])
        if unroll is not None:
            # Sequence k begins k periods after the padding's first row, burn-in steps
            # before the stream's first step.
            sequences.append((len(sequences) * 4 - 8, split_unroll(unroll)[0]))
    assert len(sequences) >= 20
    trained = np.zeros(stream_rows, int)
    for start, seq in sequences:
        seq["initial_state"] = []
        obs = tf.Variable(seq["observation"][None])
        with tf.GradientTape() as tape:
            loss, td, _ = _loss(agent, [seq], obs=obs)
        grad = np.abs(tape.gradient(loss, obs).numpy()[0]).sum(-1)
        assert td.shape == (8, 1)
        rows = np.flatnonzero(grad > 0)
        assert np.all(rows >= seq["padding"].sum())  # never a zero row
        trained[start + rows] += 1
    covered = sequences[-1][0] + 16
    # Twice each (episode end included), from the stream's first step on; the first period's
    # steps are in the first sequence only, and none before a zero-padded burn-in is missed.
    assert np.all(trained[4 : covered - 4] == 2)
    assert np.all(trained[:4] == 1) and np.all(trained[covered - 4 : covered] == 1)
    assert np.all(trained[covered:] == 0)


def test_a_streams_first_steps_are_replayed_from_the_state_that_acted_on_them():
    # A stream's first sequence burns in over zero rows, yet its first step must see the
    # initial LSTM state, as acting did: Q-values in training equal those seen when acting.
    agent = _agent()  # LSTM of 8 that reads the previous action and reward; burn-in 4
    builder = _builder(agent, {**FIELDS, **agent.step_fields()})
    rng = np.random.default_rng(5)
    state = agent.initial_state(1)
    acted = []
    unroll = None
    while unroll is None:
        observation = rng.normal(size=(1, 3)).astype(np.float32)
        # The first step of a stream carries no reward (the actors send 0).
        reward = np.zeros(1, np.float32) if not acted else rng.normal(size=1).astype(np.float32)
        outputs, new_state = agent.inference(observation, state, reward)
        acted.append(outputs["q_values"][0, outputs["action"][0]])
        row = {
            "observation": observation,
            "action": outputs["action"],
            "reward": reward,
            "terminated": np.zeros(1, bool),
            "truncated": np.zeros(1, bool),
            "final_value": np.zeros(1, np.float32),
            "q_values": outputs["q_values"],
        }
        unroll = builder.append(row, state)
        state = new_state
    seq = split_unroll(unroll)[0]
    assert seq["padding"].tolist() == [True] * 4 + [False] * 7
    _, _, q_taken = _loss(agent, [seq], padding=np.array([4], np.int32))
    # The same float32 operations, batched differently (one step at a time when acting, a
    # [T * B] batch when training): they agree to float32 rounding, ~1e-7 relative per
    # operation over a few dozen sequential ones.
    np.testing.assert_allclose(q_taken.numpy()[:, 0], acted[:6], rtol=1e-5, atol=1e-6)
    # Without the reset at the first step the burn-in over zeros would have moved the state.
    _, _, drifted = _loss(agent, [seq])
    assert not np.allclose(drifted.numpy()[:, 0], acted[:6], rtol=1e-3, atol=1e-4)


def test_burn_in_steps_get_no_gradient():
    agent = _agent()  # sequences of 11 rows: burn-in 4, loss on rows 4..9, row 10 bootstraps
    rng = np.random.default_rng(3)
    seqs = [_sequence(rng, 1) for _ in range(3)]
    obs = tf.Variable(np.stack([s["observation"] for s in seqs]))
    with tf.GradientTape() as tape:
        loss, td, _ = _loss(agent, seqs, obs=obs)
    grad = np.abs(tape.gradient(loss, obs).numpy()).sum(axis=(0, 2))  # per row
    assert td.shape == (6, 3)
    assert np.all(grad[:4] == 0.0)  # burn-in: no gradient at all
    assert np.all(grad[4:10] > 0.0)  # the rows the loss covers
    assert grad[10] == 0.0  # only feeds targets, which carry no gradient


def test_the_sequence_loss_is_seeds_half_sum_over_time():
    rng = np.random.default_rng(6)
    seqs = [_sequence(rng, 1) for _ in range(3)]
    summed = _agent()
    mean = _agent(sequenceLoss="mean")
    mean.online.set_weights(summed.online.get_weights())
    mean.target.set_weights(summed.target.get_weights())
    loss_sum, td, _ = _loss(summed, seqs)
    loss_mean, _, _ = _loss(mean, seqs)
    np.testing.assert_allclose(loss_sum, 0.5 * np.mean(np.sum(np.square(td), 0)), rtol=1e-5)
    np.testing.assert_allclose(loss_sum, 6 * loss_mean, rtol=1e-5)


def test_a_truncation_bootstraps_from_the_final_observations_value():
    # No LSTM and n = 1, so a target is r + gamma * h^-1(Q_target(next)) unless cut.
    agent = _agent(network={"hiddenSizes": [16], "denseSize": 16, "lstmSize": 0}, nStep=1)
    rng = np.random.default_rng(7)
    seq = _sequence(rng, 1)
    seq["initial_state"] = []
    seq["truncated"][6] = True  # transition 5 -> 6 hit the time limit
    seq["final_value"][6] = 40.0  # the final observation's value, sent by the actor
    loss, td, q_taken = _loss(agent, [seq])
    target = (td + q_taken).numpy()[:, 0]  # rows 4..9
    want = losses.value_rescale(seq["reward"][6] + 0.9 * 40.0).numpy()
    np.testing.assert_allclose(target[5 - 4], want, rtol=1e-5)


def test_new_sequences_get_priorities_from_the_q_values_seen_when_acting():
    agent = _agent(nStep=1)
    rng = np.random.default_rng(8)
    # Acting Q-values that satisfy the Bellman equation exactly: zero TD, lowest priority.
    consistent = _sequence(rng, 0)
    consistent["reward"][:] = 0.0
    off = _sequence(rng, 0)
    off["q_values"] = rng.normal(size=(ROWS, 2)).astype(np.float32) * 5
    agent.add_unrolls([consistent, off])
    prio = agent.replay._tree.get(np.arange(2)) ** (1 / 0.9)
    assert prio[0] == pytest.approx(1e-6, rel=1e-3)
    q = off["q_values"][4:]  # the network's outputs: already in the rescaled space
    target = losses.value_rescale(
        off["reward"][5:] + 0.9 * losses.inverse_value_rescale(q[1:].max(-1))
    ).numpy()
    td = np.abs(target - q[np.arange(6), off["action"][4:10]])
    np.testing.assert_allclose(prio[1], 0.9 * td.max() + 0.1 * td.mean(), rtol=1e-4)
    assert agent.step_fields() == {"q_values": ((2,), np.dtype(np.float32))}
    # Ape-X's alternative: the largest priority seen so far.
    apex = _agent(initialPriority="max")
    apex.add_unrolls([consistent, off])
    np.testing.assert_allclose(apex.replay._tree.get(np.arange(2)), 1.0)
    assert apex.step_fields() == {}


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
    assert any(
        not np.allclose(b, v.numpy()) for b, v in zip(before, agent.online.trainable_variables)
    )
