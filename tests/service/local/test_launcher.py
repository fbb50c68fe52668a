"""Run directories are never overwritten, nor used by two launchers at once; resumes must keep
what checkpoints depend on."""

import json
import subprocess
import sys

import pytest
import yaml

from seedrl.common.config import parse_experiment
from seedrl.common.exit_codes import ExitCode
from seedrl.service.local.launcher import (
    LocalRun,
    RunDirError,
    RunInUse,
    learner_address,
    prepare_run_dir,
    write_prometheus_targets,
)


def experiment(**spec):
    return parse_experiment({"metadata": {"name": "exp"}, "spec": spec})


def test_a_new_run_gets_its_directory_and_resolved_config(tmp_path):
    with prepare_run_dir(experiment(), str(tmp_path), resume=False) as run:
        assert run.path == str(tmp_path / "exp")
    config = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())
    assert config["spec"]["learner"]["unrollLength"] == 20  # defaults are written out


def test_an_existing_run_is_refused_without_resume_and_left_untouched(tmp_path):
    prepare_run_dir(experiment(), str(tmp_path), resume=False).release()
    (tmp_path / "exp" / "summary.json").write_text('{"env_steps": 5}')
    before = (tmp_path / "exp" / "config.yaml").read_text()
    with pytest.raises(RunDirError, match="--resume"):
        prepare_run_dir(experiment(seed=3), str(tmp_path), resume=False)
    assert (tmp_path / "exp" / "config.yaml").read_text() == before
    assert json.loads((tmp_path / "exp" / "summary.json").read_text()) == {"env_steps": 5}


def test_resume_may_change_the_budget_but_not_the_env_or_agent(tmp_path):
    prepare_run_dir(experiment(), str(tmp_path), resume=False).release()
    (tmp_path / "exp" / "summary.json").write_text("{}")
    prepare_run_dir(experiment(budget={"maxEnvSteps": 5}), str(tmp_path), resume=True).release()
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
    prepare_run_dir(experiment(), str(tmp_path), resume=False).release()
    path = tmp_path / "exp" / "config.yaml"
    old = yaml.safe_load(path.read_text())
    del old["spec"]["agent"]["vtrace"]["minibatches"]  # as an earlier seedrl wrote it
    path.write_text(yaml.safe_dump(old))
    prepare_run_dir(experiment(), str(tmp_path), resume=True).release()
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


# --------------------------------------------------------------------------------------------
# One launcher per run directory (issue 27, item 7)
# --------------------------------------------------------------------------------------------

EXPERIMENT_FILE = "metadata: {name: exp}\nspec: {budget: {maxEnvSteps: 200}}\n"
#: A launcher that has prepared its run and holds it: says so, then waits to be killed.
HOLDER = (
    "import sys\n"
    "from seedrl.common.config import load_experiment\n"
    "from seedrl.service.local.launcher import prepare_run_dir\n"
    "held = prepare_run_dir(load_experiment(sys.argv[1]), sys.argv[2], resume=True)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def _snapshot(directory):
    """Every file's bytes and modification time under ``directory``."""
    return {
        p.relative_to(directory): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def held_run(tmp_path):
    """A run directory with a previous run's files, held by a launcher in another process;
    yields (experiment file, runs dir, the holder's process)."""
    config = tmp_path / "exp.yaml"
    config.write_text(EXPERIMENT_FILE)
    runs = tmp_path / "runs"
    prepare_run_dir(experiment(), str(runs), resume=False).release()
    (runs / "exp" / "status.json").write_text('{"state": "running"}')
    (runs / "exp" / "summary.json").write_text('{"env_steps": 5}')
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(config), str(runs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n", "the first launcher did not start"
        yield config, runs, holder
    finally:
        holder.kill()
        holder.wait()


def test_a_run_in_use_is_refused_untouched_until_its_launcher_dies(held_run):
    _, runs, holder = held_run
    before = _snapshot(runs / "exp")
    with pytest.raises(
        RunInUse, match=f"in use by another seedrl train \\(started as pid {holder.pid}"
    ):
        prepare_run_dir(experiment(), str(runs), resume=True)
    assert _snapshot(runs / "exp") == before
    # The lock dies with its process, however it ends: nothing stale is left to clear.
    holder.kill()
    holder.wait()
    with prepare_run_dir(experiment(), str(runs), resume=True) as run:
        assert run.path == str(runs / "exp")


def test_seedrl_train_of_a_run_in_use_exits_refused_saying_why(held_run):
    config, runs, _ = held_run
    before = _snapshot(runs / "exp")
    result = subprocess.run(
        [sys.executable, "-m", "seedrl.service.cli", "train", str(config), "--resume"]
        + ["--runs-dir", str(runs), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == ExitCode.REFUSED, result.stderr
    assert result.stderr.startswith(f"error: {runs / 'exp'} is in use by another seedrl train")
    assert "Traceback" not in result.stderr
    assert _snapshot(runs / "exp") == before


def test_the_learner_holds_the_run_until_it_is_gone_even_without_its_launcher(tmp_path):
    held = prepare_run_dir(experiment(), str(tmp_path), resume=False)
    run = LocalRun(experiment(), held.path, run_lock=held)
    # The learner as LocalRun starts it, running a stand-in that waits to be killed.
    run.learner.argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    run.learner.start()
    try:
        held.release()  # the launcher is gone
        with pytest.raises(RunInUse):
            prepare_run_dir(experiment(), str(tmp_path), resume=True)
    finally:
        run.learner.proc.kill()
        run.learner.proc.wait()
    prepare_run_dir(experiment(), str(tmp_path), resume=True).release()


def test_a_writer_never_takes_over_another_writers_temporary_file(tmp_path):
    # Two launchers of one run both wrote prometheus-targets.json.tmp, then renamed it: the
    # second rename found it gone (a raw FileNotFoundError). Another writer's temporary file
    # stays as it is.
    with prepare_run_dir(experiment(), str(tmp_path), resume=False) as run:
        for name in ("prometheus-targets.json.tmp", "config.yaml.tmp"):
            (tmp_path / "exp" / name).write_text("another writer's")
        write_prometheus_targets(run.path, "exp", [1, 2, 3, 4])
    prepare_run_dir(experiment(seed=4), str(tmp_path), resume=True).release()
    for name in ("prometheus-targets.json.tmp", "config.yaml.tmp"):
        assert (tmp_path / "exp" / name).read_text() == "another writer's"
    targets = json.loads((tmp_path / "exp" / "prometheus-targets.json").read_text())
    assert [g["targets"] for g in targets] == [
        ["127.0.0.1:1"],
        ["127.0.0.1:2"],
        ["127.0.0.1:3"],
        ["127.0.0.1:4"],
    ]
    assert yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())["spec"]["seed"] == 4
