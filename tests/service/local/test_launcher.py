"""Run directories are never overwritten; resumes must keep what checkpoints depend on."""

import json

import pytest
import yaml

from seedrl.common.config import parse_experiment
from seedrl.service.local.launcher import RunDirError, learner_address, prepare_run_dir


def experiment(**spec):
    return parse_experiment({"metadata": {"name": "exp"}, "spec": spec})


def test_a_new_run_gets_its_directory_and_resolved_config(tmp_path):
    run_dir = prepare_run_dir(experiment(), str(tmp_path), resume=False)
    config = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())
    assert run_dir == str(tmp_path / "exp")
    assert config["spec"]["learner"]["unrollLength"] == 20  # defaults are written out


def test_an_existing_run_is_refused_without_resume_and_left_untouched(tmp_path):
    prepare_run_dir(experiment(), str(tmp_path), resume=False)
    (tmp_path / "exp" / "summary.json").write_text('{"env_steps": 5}')
    before = (tmp_path / "exp" / "config.yaml").read_text()
    with pytest.raises(RunDirError, match="--resume"):
        prepare_run_dir(experiment(seed=3), str(tmp_path), resume=False)
    assert (tmp_path / "exp" / "config.yaml").read_text() == before
    assert json.loads((tmp_path / "exp" / "summary.json").read_text()) == {"env_steps": 5}


def test_resume_may_change_the_budget_but_not_the_env_or_agent(tmp_path):
    prepare_run_dir(experiment(), str(tmp_path), resume=False)
    (tmp_path / "exp" / "summary.json").write_text("{}")
    prepare_run_dir(experiment(budget={"maxEnvSteps": 5}), str(tmp_path), resume=True)
    assert (
        yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())["spec"]["budget"][
            "maxEnvSteps"
        ]
        == 5
    )
    assert (tmp_path / "exp" / "summary.json.previous").exists()
    with pytest.raises(RunDirError, match="spec.env"):
        prepare_run_dir(experiment(env={"id": "Acrobot-v1"}), str(tmp_path), resume=True)
    with pytest.raises(RunDirError, match="spec.agent"):
        prepare_run_dir(
            experiment(agent={"network": {"hiddenSizes": [8]}}), str(tmp_path), resume=True
        )


def test_a_run_written_before_a_field_existed_resumes_after_the_upgrade(tmp_path):
    prepare_run_dir(experiment(), str(tmp_path), resume=False)
    path = tmp_path / "exp" / "config.yaml"
    old = yaml.safe_load(path.read_text())
    del old["spec"]["agent"]["vtrace"]["minibatches"]  # as an earlier seedrl wrote it
    path.write_text(yaml.safe_dump(old))
    prepare_run_dir(experiment(), str(tmp_path), resume=True)
    assert yaml.safe_load(path.read_text())["spec"]["agent"]["vtrace"]["minibatches"] == 1


def test_learner_address_is_a_unix_socket_unless_the_path_is_too_long(tmp_path):
    assert learner_address(str(tmp_path)) == f"unix:{tmp_path}/learner.sock"
    assert learner_address("/" + "x" * 120).startswith("127.0.0.1:")


def test_restarts_follow_the_exit_codes_as_the_job_does():
    from seedrl.common.exit_codes import ExitCode
    from seedrl.service.local.launcher import should_restart

    assert not should_restart(ExitCode.OK, 0, 3)
    for code in (
        ExitCode.BAD_CONFIG,
        ExitCode.REFUSED,
        ExitCode.CHECKPOINT_LOCATION,
        ExitCode.NO_ACCELERATOR,
    ):
        assert not should_restart(code, 0, 3)
    # Stopped from outside: always run again, however often it happened.
    assert should_restart(ExitCode.STOPPED, 3, 3)
    # Crashes (an exception, SIGKILL) are run again up to the limit.
    assert should_restart(ExitCode.FAILED, 2, 3) and not should_restart(ExitCode.FAILED, 3, 3)
    assert should_restart(137, 0, 3) and not should_restart(137, 3, 3)


def test_an_actors_failure_is_told_by_the_last_line_of_its_log(tmp_path):
    from seedrl.service.local.launcher import last_line

    log = tmp_path / "actor-0.log"
    log.write_text(
        "x" * 20000 + "\nTraceback (most recent call last):\n  ...\n"
        "RuntimeError: the env is gone\n\n  \n"
    )
    assert last_line(str(log)) == "RuntimeError: the env is gone"
    assert last_line(str(tmp_path / "missing.log")) == ""


def test_the_env_spec_is_derived_with_the_actors_code_or_the_reason_given(tmp_path):
    from seedrl.common.wire import EnvSpec
    from seedrl.service.local.launcher import derive_env_spec

    config = tmp_path / "config.yaml"
    config.write_text("metadata: {name: x}\nspec: {env: {id: CartPole-v1}}\n")
    assert derive_env_spec(str(config), str(tmp_path / "spec.json")) is None
    assert (
        EnvSpec.read(str(tmp_path / "spec.json")).describe()
        == "float32[4] observations, 2 discrete actions"
    )
    config.write_text("metadata: {name: x}\nspec: {env: {id: CartPole-v1, options: {wings: 2}}}\n")
    reason = derive_env_spec(str(config), str(tmp_path / "other.json"))
    assert reason.startswith("spec.env.options: cannot make 'CartPole-v1' with them")
    assert not (tmp_path / "other.json").exists()
