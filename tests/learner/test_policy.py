"""seedrl.policy.load: a checkpoint of a real run, acting exactly as the learner's inference.

The checkpoints come from tiny real runs (support/trained_runs.py): V-trace on CartPole, PPO on
a pendulum whose torque bounds are [-0.5, 3.0], R2D2 with an LSTM core reading the previous
action and reward. Each policy is compared with the learner's own agent, built and restored
by the learner's code, on observations of the real env."""

from __future__ import annotations

import json
import shutil

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
import yaml

import seedrl.policy
from seedrl.common.storage import open_store
from seedrl.learner.agents import build_agent
from seedrl.learner.checkpoint import VARIABLES, fetch_checkpoint, trackables
from seedrl.learner.policy import PolicyError
from support.trained_runs import ENVS, copy_store_to_gcs, rollout_observations


def learner_agent(run_dir):
    """The learner's own agent for a run's newest checkpoint, restored by the learner's code."""
    policy = seedrl.policy.load(str(run_dir))
    agent = build_agent(policy.experiment, policy.env_spec)
    got = fetch_checkpoint(open_store(policy.source.store_uri))
    try:
        tf.train.Checkpoint(**trackables(agent)).read(got.path(VARIABLES)).expect_partial()
    finally:
        got.cleanup()
    return policy, agent


@pytest.mark.parametrize("agent_name", ["vtrace", "ppo"])
def test_actions_are_the_mode_of_the_learners_policy_in_the_envs_units(trained_runs, agent_name):
    policy, agent = learner_agent(trained_runs[agent_name])
    assert policy.agent == agent_name and not policy.recurrent
    obs = rollout_observations(ENVS[agent_name], 300)
    outputs, _ = agent.inference(obs, agent.initial_state(len(obs)))
    mode = np.asarray(agent.dist.mode(outputs["policy_params"]))
    expected = policy.env_spec.to_env_actions(mode)
    actions, state = policy.act(obs)
    assert state == []
    np.testing.assert_array_equal(actions, expected)
    if agent_name == "ppo":
        # The normaliser has statistics (without them the test proves nothing about it) and the
        # actions are in the env's [-0.5, 3.0], not the policy's [-1, 1].
        assert float(agent.obs_rms.count.numpy()) > 0
        assert policy.env_spec.action_low == (-0.5,) and policy.env_spec.action_high == (3.0,)
        assert actions.min() >= -0.5 and actions.max() <= 3.0
        assert np.any(np.abs(actions) > 1.0) or np.any(actions != np.clip(mode, -1, 1))
    # One observation at a time gives the same as the batch, up to float32 rounding: TF's CPU
    # kernels sum a batch of 1 and one of 300 in different orders, and a dot product of n
    # terms may move by n units of rounding, so the layers' fan-ins together bound the change.
    one, _ = policy.act(obs[7])
    if policy.env_spec.discrete:
        np.testing.assert_array_equal(one, actions[7])
    else:
        fan_in = sum(v.shape[0] for v in agent.network.trainable_variables if len(v.shape) == 2)
        eps = np.finfo(np.float32).eps
        scale = max(abs(b) for b in (*policy.env_spec.action_low, *policy.env_spec.action_high))
        np.testing.assert_allclose(one, actions[7], rtol=fan_in * eps, atol=fan_in * eps * scale)


def test_stochastic_actions_sample_the_policy_reproducibly(trained_runs):
    obs = rollout_observations(ENVS["ppo"], 200)
    a = seedrl.policy.load(str(trained_runs["ppo"]), seed=3)
    b = seedrl.policy.load(str(trained_runs["ppo"]), seed=3)
    first, _ = a.act(obs, deterministic=False)
    np.testing.assert_array_equal(first, b.act(obs, deterministic=False)[0])
    greedy, _ = a.act(obs)
    assert not np.array_equal(first, greedy)  # a learned std > 0: samples differ from the mode
    assert first.min() >= -0.5 and first.max() <= 3.0  # clipped into the env's bounds


def test_the_recurrent_state_and_rewards_carry_as_in_the_learners_inference(trained_runs):
    policy, agent = learner_agent(trained_runs["r2d2"])
    assert policy.recurrent and policy.module.reads_rewards
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=5)
    n = 4
    # The learner's state includes each env's epsilon; zero is its evaluation actors' greedy.
    learner_state = agent.initial_state(n)
    learner_state[-1] = np.zeros(n, np.float32)
    state = None
    batch = np.repeat(obs[None], n, axis=0)
    rewards = np.zeros(n, np.float32)
    steps = 0
    for _ in range(60):
        outputs, new_learner_state = agent.inference(batch, learner_state, rewards)
        learner_state = new_learner_state
        actions, state = policy.act(batch, state, reward=rewards)
        np.testing.assert_array_equal(actions, outputs["action"])
        np.testing.assert_array_equal(state[0], learner_state[0])
        obs, reward, term, trunc, _ = env.step(int(actions[0]))
        steps += 1
        if term or trunc:
            break
        batch = np.repeat(obs[None], n, axis=0) + np.float32(0.01) * np.arange(n)[:, None]
        rewards = np.full(n, reward, np.float32)
    assert steps > 5
    # The state did change: an LSTM that ignored it would pass the comparisons above alone.
    assert np.abs(state[0]).sum() > 0


def test_every_kind_of_location_loads_the_same_policy(trained_runs, gcs_bucket):
    run_dir = trained_runs["vtrace"]
    obs = rollout_observations("CartPole-v1", 100)
    reference = seedrl.policy.load(str(run_dir))
    checkpoints = run_dir / "checkpoints"
    newest = reference.source.checkpoint
    gs = copy_store_to_gcs(str(checkpoints), gcs_bucket)
    for location in [
        str(checkpoints),
        f"file://{checkpoints}",
        str(checkpoints / newest),
        f"file://{checkpoints / newest}/",
        gs,
        f"{gs}/{newest}",
    ]:
        policy = seedrl.policy.load(location)
        assert policy.source.checkpoint == newest, location
        np.testing.assert_array_equal(policy.act(obs)[0], reference.act(obs)[0])
    assert reference.source.run_dir == str(run_dir)
    assert seedrl.policy.load(gs).source.uri == f"{gs}/{newest}"


def _rewrite_manifest(checkpoints, change):
    manifest = json.loads((checkpoints / "MANIFEST.json").read_text())
    change(manifest)
    (checkpoints / "MANIFEST.json").write_text(json.dumps(manifest))


def _one_line_error(location, *fragments):
    with pytest.raises(PolicyError) as err:
        seedrl.policy.load(str(location))
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_corrupt_and_other_agent_checkpoints_are_refused_in_one_line(
    trained_runs, tmp_path
):
    _one_line_error(tmp_path / "nowhere", "no such run")
    (tmp_path / "empty").mkdir()
    _one_line_error(tmp_path / "empty", "holds no checkpoints")

    # Corrupt: the variables' bytes differ from what the manifest lists.
    corrupt = tmp_path / "corrupt"
    shutil.copytree(trained_runs["vtrace"] / "checkpoints", corrupt)
    for ckpt in (p for p in corrupt.iterdir() if p.is_dir()):
        data = ckpt / "variables.data-00000-of-00001"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    _one_line_error(corrupt, "fails its checksum")

    # Another agent: a V-trace checkpoint whose Experiment says R2D2 (listed with valid
    # checksums, so only the variables can tell).
    other = tmp_path / "other"
    shutil.copytree(trained_runs["vtrace"] / "checkpoints", other)
    from seedrl.learner.checkpoint import _file_digest

    def relabel(manifest):
        for entry in manifest["checkpoints"]:
            path = other / entry["name"] / "experiment.yaml"
            doc = yaml.safe_load(path.read_text())
            doc["spec"]["agent"]["name"] = "r2d2"
            # A replay the run's budget can fill: the Experiment must be valid, only wrong.
            doc["spec"]["agent"]["r2d2"] = {"minReplaySize": 10, "replayCapacity": 100}
            path.write_text(yaml.safe_dump(doc))
            entry["files"]["experiment.yaml"] = _file_digest(str(path))

    _rewrite_manifest(other, relabel)
    _one_line_error(other, "does not fit the r2d2 agent")

    # A named checkpoint the manifest does not list.
    unlisted = trained_runs["vtrace"] / "checkpoints" / "ckpt-000000000001-00000000"
    _one_line_error(f"file://{unlisted}", "lists no checkpoint")


def test_observations_of_another_shape_are_refused(trained_runs):
    policy = seedrl.policy.load(str(trained_runs["vtrace"]))
    with pytest.raises(ValueError, match=r"expected \[4\]"):
        policy.act(np.zeros(5, np.float32))
