"""seedrl export: a SavedModel that plain TensorFlow loads, acting as seedrl.policy does.

The SavedModel is loaded in a fresh interpreter that cannot import seedrl (no site
processing, so no editable-install hook; only site-packages for TensorFlow itself), from a
directory outside the repository, and fed 1,000 real observations per agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import seedrl.policy
from seedrl.learner.export import export, main
from seedrl.learner.policy import PolicyError
from support.trained_runs import ENVS, plain_tensorflow, rollout_observations


@pytest.mark.parametrize("agent_name", ["vtrace", "ppo", "r2d2"])
def test_plain_tensorflow_acts_as_the_policy_on_1000_real_observations(
    trained_runs, tmp_path, agent_name
):
    policy = seedrl.policy.load(str(trained_runs[agent_name]))
    target = Path(export(policy, str(tmp_path / "model")))
    # TensorFlow Serving's layout: a numbered version directory with saved_model.pb.
    assert target.parent == tmp_path / "model" and target.name.isdigit()
    assert (target / "saved_model.pb").is_file()
    assert int(target.name) == policy.source.metadata["learner_steps"]
    obs = rollout_observations(ENVS[agent_name], 1000)
    steps = 125 if policy.recurrent else 1  # an LSTM: 8 envs over 125 steps, state carried
    got, described = plain_tensorflow(target, obs, steps, tmp_path)
    assert described["signatures"] == ["sample", "serving_default"]
    batch = len(obs) // steps
    expected, state = [], None
    for t in range(steps):
        actions, state = policy.act(obs[t * batch : (t + 1) * batch], state)
        expected.append(actions)
    np.testing.assert_array_equal(got, np.concatenate(expected))
    if agent_name == "ppo":
        assert got.min() >= -0.5 and got.max() <= 3.0
        assert described["outputs"] == ["action", "value"]
    if agent_name == "r2d2":
        assert described["inputs"] == [
            "lstm_c",
            "lstm_h",
            "observation",
            "previous_action",
            "reward",
        ]
        assert described["outputs"] == [
            "action",
            "lstm_c",
            "lstm_h",
            "previous_action",
            "q_values",
            "value",
        ]
    meta = json.loads((target / "assets.extra" / "seedrl.json").read_text())
    assert meta["env_spec"] == policy.env_spec.to_json() and meta["agent"] == agent_name


def test_an_existing_version_is_never_overwritten(trained_runs, tmp_path, capsys):
    location = str(trained_runs["vtrace"])
    out = str(tmp_path / "model")
    assert main([location, out, "--version", "3"]) == 0
    assert "exported" in capsys.readouterr().out
    before = sorted(os.listdir(Path(out) / "3"))
    assert main([location, out, "--version", "3"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists already" in err[0]
    assert sorted(os.listdir(Path(out) / "3")) == before
    assert os.listdir(out) == ["3"]  # no staging leftovers
    with pytest.raises(PolicyError):
        export(seedrl.policy.load(location), out, version=3)
