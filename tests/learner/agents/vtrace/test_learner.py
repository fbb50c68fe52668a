"""The V-trace agent's training step on hand-made batches: it learns what the rewards say."""

import numpy as np

from seedrl.common.config import parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.vtrace.builder import build


def _agent(spec: EnvSpec, network: dict, **vtrace):
    exp = parse_experiment(
        {
            "apiVersion": "seedrl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "t"},
            "spec": {
                "agent": {"network": network, "vtrace": {"entropyCost": 0.0, **vtrace}},
                "learner": {"optimizer": {"learningRate": 0.01}},
            },
        }
    )
    return build(exp, spec)


def _one_step_batch(agent, obs_shape, rewards_of, b=64, seed=0):
    """Unrolls of T=1 where every episode lasts one step and pays rewards_of(action)."""
    obs = np.random.default_rng(seed).normal(size=(2, b) + obs_shape).astype(np.float32)
    state = agent.initial_state(b)
    out, _ = agent.inference(obs[0], state)
    action = np.stack([out["action"], out["action"]])
    params = np.stack([out["policy_params"], out["policy_params"]])
    reward = np.zeros((2, b), np.float32)
    reward[1] = rewards_of(out["action"])
    terminated = np.zeros((2, b), bool)
    terminated[1] = True
    return {
        "observation": obs,
        "action": action,
        "reward": reward,
        "terminated": terminated,
        "truncated": np.zeros((2, b), bool),
        "policy_params": params,
        "initial_state": state,
    }


def test_continuous_policy_moves_towards_rewarded_actions():
    spec = EnvSpec("Cont", "float32", (3,), "float32", (2,), 0)
    agent = _agent(spec, {"hiddenSizes": [16]})
    obs = np.zeros((256, 3), np.float32)
    before = agent.inference(obs, [])[0]["policy_params"][:, :2].mean(0)
    for i in range(60):
        batch = _one_step_batch(agent, (3,), lambda a: a[:, 0] - a[:, 1], seed=i)
        metrics = agent.train(batch)
        assert np.isfinite(list(metrics.values())).all()
    after = agent.inference(obs, [])[0]["policy_params"][:, :2].mean(0)
    assert after[0] > before[0] + 0.2 and after[1] < before[1] - 0.2


def test_recurrent_policy_trains_and_keeps_state_per_env():
    spec = EnvSpec("Disc", "float32", (3,), "int32", (), 3)
    agent = _agent(spec, {"hiddenSizes": [16], "lstmSize": 8})
    state = agent.initial_state(4)
    assert [s.shape for s in state] == [(4, 8), (4, 8), (4, 3)]  # h, c, previous action
    out, new_state = agent.inference(np.ones((4, 3), np.float32), state)
    assert not np.allclose(new_state[0], 0.0)
    for i in range(40):
        agent.train(_one_step_batch(agent, (3,), lambda a: (a == 2).astype(np.float32), seed=i))
    logits = agent.inference(np.zeros((256, 3), np.float32), agent.initial_state(256))[0][
        "policy_params"
    ]
    assert (logits.argmax(-1) == 2).all()


def test_epochs_of_minibatches_train_on_every_unroll_once_per_pass():
    spec = EnvSpec("Disc", "float32", (3,), "int32", (), 3)
    agent = _agent(spec, {"hiddenSizes": [16], "lstmSize": 8}, epochs=3, minibatches=4)
    batch = _one_step_batch(agent, (3,), lambda a: (a == 2).astype(np.float32), b=8)
    # Each unroll is told apart by its first observation; record which ones every step gets.
    ids = {tuple(batch["observation"][0, j]): j for j in range(8)}
    steps = []
    original = agent._step

    def recording(args, state):
        obs = args[0]
        steps.append(sorted(ids[tuple(obs[0, j])] for j in range(obs.shape[1])))
        assert [len(s) for s in state] == [obs.shape[1]] * len(state)  # states follow
        return original(args, state)

    agent._step = recording
    iterations = int(agent.optimizer.iterations.numpy())
    metrics = agent.train(batch)
    assert int(agent.optimizer.iterations.numpy()) == iterations + 12
    assert [len(s) for s in steps] == [2] * 12
    for epoch in range(3):
        assert sorted(sum(steps[4 * epoch : 4 * epoch + 4], [])) == list(range(8))
    assert steps[:4] != steps[4:8] or steps[4:8] != steps[8:]  # shuffled between passes
    assert np.isfinite(list(metrics.values())).all()


def test_more_passes_over_a_batch_move_the_policy_further():
    spec = EnvSpec("Disc", "float32", (3,), "int32", (), 3)
    obs = np.zeros((64, 3), np.float32)
    moved = []
    for epochs in (1, 4):
        agent = _agent(spec, {"hiddenSizes": [16]}, epochs=epochs)
        batch = _one_step_batch(agent, (3,), lambda a: (a == 2).astype(np.float32))
        before = agent.inference(obs, [])[0]["policy_params"][:, 2].mean()
        agent.train(batch)
        moved.append(agent.inference(obs, [])[0]["policy_params"][:, 2].mean() - before)
    assert 0 < moved[0] < moved[1]
