"""The PPO agent on hand-made unrolls: lag bound, normalizers, KL coefficient, learning."""

import numpy as np
import pytest

from seedrl.common.config import parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents.ppo.builder import build
from seedrl.learner.agents.ppo.learner import discounted_returns

DISCRETE = EnvSpec("Disc", "float32", (3,), "int32", (), 3)
CONTINUOUS = EnvSpec("Cont", "float32", (3,), "float32", (2,), 0)


def _agent(spec, **ppo):
    exp = parse_experiment(
        {
            "apiVersion": "seedrl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "t"},
            "spec": {
                "agent": {
                    "name": "ppo",
                    "network": {"hiddenSizes": [16]},
                    "ppo": {"minibatches": 2, "epochs": 2, **ppo},
                },
                "learner": {"batchSize": 8, "optimizer": {"learningRate": 0.01}},
            },
        }
    )
    return build(exp, spec)


def _batch(agent, rewards_of, b=8, t=4, seed=0, version=None):
    """Unrolls of T+1 rows acted by the agent; each row's reward follows from its action."""
    rng = np.random.default_rng(seed)
    obs = (rng.normal(size=(t + 1, b, 3)) * 5 + 3).astype(np.float32)
    rows = [agent.inference(obs[i], [])[0] for i in range(t + 1)]
    action = np.stack([r["action"] for r in rows])
    reward = np.zeros((t + 1, b), np.float32)
    reward[1:] = rewards_of(action[:-1])
    versions = np.stack([r["policy_version"] for r in rows])
    if version is not None:
        versions[:] = version
    return {
        "observation": obs,
        "action": action,
        "reward": reward,
        "terminated": np.zeros((t + 1, b), bool),
        "truncated": np.zeros((t + 1, b), bool),
        "policy_params": np.stack([r["policy_params"] for r in rows]),
        "policy_version": versions,
        "initial_state": [],
    }


def test_unrolls_beyond_the_policy_lag_are_dropped_and_the_lag_is_reported():
    agent = _agent(DISCRETE, maxPolicyLag=1)
    agent.updates.assign(3)
    batch = _batch(agent, lambda a: np.zeros(a.shape))
    batch["policy_version"][:, :4] = 3  # fresh
    batch["policy_version"][:, 4:6] = 2  # one update old: kept
    batch["policy_version"][:, 6:] = 0  # three updates old: dropped
    metrics = agent.train(batch)
    assert metrics["dropped_unrolls"] == 2
    assert metrics["policy_lag"] == pytest.approx(2 / 6)
    assert metrics["policy_lag_max"] == 3
    assert int(agent.updates.numpy()) == 4
    batch["policy_version"][:] = 0
    assert agent.train(batch)["dropped_unrolls"] == 8
    assert int(agent.updates.numpy()) == 4  # nothing to train on: no update


def test_observation_statistics_move_only_after_an_update():
    agent = _agent(DISCRETE)
    batch = _batch(agent, lambda a: np.ones(a.shape))
    assert float(agent.obs_rms.count.numpy()) == 0
    agent.train(batch)
    assert float(agent.obs_rms.count.numpy()) == 4 * 8  # rows 0..T-1 of every unroll
    np.testing.assert_allclose(
        agent.obs_rms.mean.numpy(), batch["observation"][:-1].reshape(-1, 3).mean(0), rtol=1e-6
    )
    assert float(agent.reward_rms.count.numpy()) == 4 * 8


def test_kl_coefficient_adapts_with_the_kl_objective():
    agent = _agent(DISCRETE, objective="kl_penalty", klTarget=1e-6)
    agent.train(_batch(agent, lambda a: (a == 1).astype(np.float32)))
    assert float(agent.kl_coefficient.numpy()) == pytest.approx(1.5)


@pytest.mark.parametrize(
    "spec,rewards_of,check",
    [
        (
            DISCRETE,
            lambda a: (a == 2).astype(np.float32),
            lambda p: (p.argmax(-1) == 2).mean() > 0.9,
        ),
        (
            CONTINUOUS,
            lambda a: a[..., 0] - a[..., 1],
            lambda p: (p[:, 0] > 0.3).all() and (p[:, 1] < -0.3).all(),
        ),
    ],
    ids=["discrete", "gaussian"],
)
def test_ppo_learns_what_the_rewards_ask_for(spec, rewards_of, check):
    agent = _agent(spec)
    for i in range(40):
        agent.train(_batch(agent, rewards_of, seed=i))
    obs = np.random.default_rng(99).normal(size=(64, 3)).astype(np.float32) * 5 + 3
    params = agent.inference(obs, [])[0]["policy_params"]
    assert check(params)


def test_discounted_returns_restart_at_episode_ends():
    rewards = np.ones((4, 1), np.float32)
    done = np.array([[False], [True], [False], [False]])
    np.testing.assert_allclose(discounted_returns(rewards, done, 0.5)[:, 0], [1.0, 1.5, 1.0, 1.5])


def test_the_batchppo_preset_takes_batchppos_objective():
    agent = _agent(CONTINUOUS, preset="batchppo")
    assert agent._uses_kl and not agent._uses_clip
    assert _agent(CONTINUOUS)._uses_clip and not _agent(CONTINUOUS)._uses_kl
    both = _agent(CONTINUOUS, preset="batchppo", objective="both")
    assert both._uses_kl and both._uses_clip


def test_batchppo_scales_rewards_by_the_std_of_the_rewards_themselves():
    agent = _agent(DISCRETE, preset="batchppo")
    batch = _batch(agent, lambda a: (a + 1).astype(np.float32) * 3)
    agent.train(batch)
    rewards = batch["reward"][1:].reshape(-1)
    assert float(agent.reward_rms.count.numpy()) == rewards.size
    assert float(agent.reward_rms.mean.numpy()) == pytest.approx(rewards.mean(), rel=1e-6)
    clipped = _agent(DISCRETE)
    clipped.train(batch)  # the clip preset tracks discounted returns along the unrolls
    assert float(clipped.reward_rms.mean.numpy()) > 1.5 * rewards.mean()


def test_batchppo_normalises_with_batchppos_formula_and_clip():
    # BatchPPO's StreamingNormalize: (x - mean) / (sqrt(var_sum / (n - 1) + 1e-4) + 1e-8),
    # observations clipped to 5 and rewards to 10; the clip preset keeps the population
    # variance + 1e-8 and its clip of 10.
    agent = _agent(DISCRETE, preset="batchppo")
    assert (agent.obs_rms.clip, agent.reward_rms.clip) == (5.0, 10.0)
    batch = _batch(agent, lambda a: (a + 1).astype(np.float32) * 3)
    agent.train(batch)
    u = float(np.finfo(np.float32).eps) / 2  # normalize() computes in float32
    obs = batch["observation"][:-1].reshape(-1, 3).astype(np.float64)
    x = np.array([[3.0, -1.0, 40.0]])
    mean, std = obs.mean(0), np.sqrt(obs.var(0, ddof=1) + 1e-4) + 1e-8
    want = np.clip((x - mean) / std, -5.0, 5.0)
    # The float32 casts of x, mean and std and the operations each round once.
    tol = 2 * u * (np.abs(x) + np.abs(mean)) / std + 4 * u * np.abs(want)
    np.testing.assert_array_less(np.abs(agent.obs_rms.normalize(x).numpy() - want), tol)
    assert agent.obs_rms.normalize(x).numpy()[0, 2] == 5.0
    rewards = batch["reward"][1:].reshape(-1).astype(np.float64)
    r = np.array([2.0, 100.0])
    want = np.clip(r / (np.sqrt(rewards.var(ddof=1) + 1e-4) + 1e-8), -10.0, 10.0)
    got = agent.reward_rms.normalize(r, center=False).numpy()
    np.testing.assert_allclose(got, want, rtol=6 * u)
    clip = _agent(DISCRETE)
    clip.train(batch)
    assert clip.obs_rms.clip == 10.0
    mean, std = obs.mean(0), np.sqrt(obs.var(0) + 1e-8)
    want = np.clip((x - mean) / std, -10.0, 10.0)
    tol = 2 * u * (np.abs(x) + np.abs(mean)) / std + 4 * u * np.abs(want)
    np.testing.assert_array_less(np.abs(clip.obs_rms.normalize(x).numpy() - want), tol)


def test_batchppo_measures_the_kl_from_the_policy_at_the_start_of_the_update():
    # A batch acted by a policy far from the current one (an actor lagging behind): the
    # clip preset's KL is measured from that behaviour policy, BatchPPO's from the policy
    # the update started from, which a tiny step barely moves.
    kls = {}
    for preset in ("clip", "batchppo"):
        agent = _agent(CONTINUOUS, preset=preset, objective="kl_penalty", epochs=1)
        agent.optimizer.learning_rate.assign(1e-7)
        batch = _batch(agent, lambda a: a[..., 0])
        batch["policy_params"][..., :2] += 1.0  # behaviour means shifted by one unit
        kls[preset] = agent.train(batch)["kl"]
    assert kls["clip"] > 0.5 and kls["batchppo"] < 1e-4
