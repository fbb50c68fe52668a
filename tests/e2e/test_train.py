"""`seedrl train` end to end: a learner and two actors as real processes over a unix socket."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole-vtrace.yaml"
#: A uniformly random policy averages about 22 on CartPole-v1.
RANDOM_RETURN = 22.0


def train_cmd(runs_dir, name, *overrides, resume=False):
    cmd = [
        sys.executable,
        "-m",
        "seedrl.service.cli",
        "train",
        str(EXAMPLE),
        "--runs-dir",
        str(runs_dir),
        "--set",
        f"metadata.name={name}",
    ]
    for o in overrides:
        cmd += ["--set", o]
    return cmd + (["--resume"] if resume else [])


def start(cmd):
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def with_test_envs():
    """The environment of a run whose Experiment imports seedrl_test_envs (tests/support)."""
    support = str(ROOT / "tests" / "support")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [support, os.environ.get("PYTHONPATH")])),
    }


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def processes_mentioning(text):
    out = subprocess.run(["pgrep", "-f", "--", text], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


def actor_processes(tmp_path, actor_id):
    """This test's actor processes of ``actor_id`` (other sessions may run the same test)."""
    mine = set(processes_mentioning(str(tmp_path)))
    return [p for p in processes_mentioning(f"--actor-id {actor_id}") if p in mine]


def status_value(run_dir, key):
    status = read_json(run_dir / "status.json") or {}
    return status.get(key) or 0


def test_learns_cartpole_with_a_learner_and_two_actors(tmp_path):
    proc, _ = start_run(tmp_path, "e2e-learn", 80000)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    summary = read_json(tmp_path / "e2e-learn" / "summary.json")
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= 80000
    assert summary["episodes"] > 100
    assert summary["mean_return_100"] > 3 * RANDOM_RETURN, summary
    for f in ("config.yaml", "metrics.jsonl", "learner.log", "actor-0.log", "actor-1.log"):
        assert (tmp_path / "e2e-learn" / f).exists(), f
    assert list((tmp_path / "e2e-learn" / "checkpoints").glob("ckpt-*/variables.index"))
    assert (tmp_path / "e2e-learn" / "checkpoints" / "MANIFEST.json").exists()
    assert "stopped (max_env_steps)" in out
    assert not processes_mentioning(str(tmp_path))


def start_run(tmp_path, name, max_env_steps):
    """Starts `seedrl train` with a step budget and no target; returns (process, run_dir)."""
    proc = start(
        train_cmd(
            tmp_path,
            name,
            f"spec.budget.maxEnvSteps={max_env_steps}",
            "spec.budget.targetReturn=null",
        )
    )
    return proc, tmp_path / name


def wait_for_learner_steps(run_dir, steps, timeout, what):
    wait_for(lambda: status_value(run_dir, "learner_steps") >= steps, timeout, what)


def test_killing_an_actor_mid_run_does_not_stop_training(tmp_path):
    proc, run_dir = start_run(tmp_path, "e2e-kill", 100000)
    try:
        wait_for_learner_steps(run_dir, 20, 180, "training")
        victims = actor_processes(tmp_path, "e2e-kill-local-0")
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGKILL)
        steps_at_kill = status_value(run_dir, "learner_steps")
        # Training goes on with the other actor (and the restarted one).
        wait_for_learner_steps(
            run_dir, steps_at_kill + 30, 120, "training to continue after the kill"
        )
        out, _ = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    summary = read_json(run_dir / "summary.json")
    assert summary["stop_reason"] == "max_env_steps"
    log = (run_dir / "actor-0.log").read_text()
    assert log.count("connected to unix:") == 2, log  # restarted by the launcher, reconnected
    assert not processes_mentioning(str(tmp_path))


def test_actors_that_leave_while_the_run_goes_on_are_restarted(tmp_path):
    """An actor stopped by SIGTERM exits STOPPED (75), not a crash: while the run goes on it is
    restarted without counting as a failure (issue 19, finding 1: such actors were left
    dead, and a run could end with 0 env steps), and training continues."""
    proc, run_dir = start_run(tmp_path, "e2e-leave", 10_000_000)
    try:
        wait_for_learner_steps(run_dir, 10, 180, "training")
        (victim,) = actor_processes(tmp_path, "e2e-leave-local-1")
        os.kill(victim, signal.SIGTERM)
        wait_for(
            lambda: (run_dir / "actor-1.log").read_text().count("connected to unix:") == 2,
            120,
            "actor-1 restarted and connected again",
        )
        steps = status_value(run_dir, "learner_steps")
        wait_for_learner_steps(run_dir, steps + 10, 120, "training after the restart")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "actor-1 left while the run goes on; restarting it" in out, out
    assert not processes_mentioning(str(tmp_path))


def test_a_run_whose_env_cannot_be_made_fails_at_once_with_the_reason(tmp_path):
    """Issue 19, finding 6: it ended with exit 0 after 0 env steps (or never, with
    maxSeconds 0). Now the env is made once before anything starts."""
    result = subprocess.run(
        train_cmd(tmp_path, "e2e-nosuch", "spec.env.id=NoSuchEnv-v99", "spec.budget.maxSeconds=0"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "error: actors could not start: spec.env.id: cannot make 'NoSuchEnv-v99'" in result.stderr
    ), result.stderr
    summary = read_json(tmp_path / "e2e-nosuch" / "summary.json")
    assert summary["stop_reason"] == "no_progress" and summary["env_steps"] == 0
    assert "NoSuchEnv-v99" in summary["error"]
    assert not processes_mentioning(str(tmp_path))


def test_actors_that_keep_failing_are_restarted_then_the_run_fails_with_the_reason(tmp_path):
    """An env that can be made but never reset: every actor crashes at once, is restarted
    with growing waits, its failure shown on the console; after noProgressSeconds the run
    stops and fails with the reason. Meanwhile the learner's status says how long it has had
    no env step, which is what turns the operator's Progressing condition False."""
    from seedrl.common.config import parse_experiment
    from seedrl.common.learner_status import LearnerStatus
    from seedrl.service.operator.status import compute_status

    env = with_test_envs()
    proc = subprocess.Popen(
        train_cmd(
            tmp_path,
            "e2e-broken",
            "spec.env.id=SeedrlTest/BrokenReset-v0",
            "spec.env.imports=[seedrl_test_envs]",
            "spec.budget.noProgressSeconds=60",
            "spec.budget.maxSeconds=0",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    run_dir = tmp_path / "e2e-broken"
    try:
        learner_status = wait_for(
            lambda: (
                (s := read_json(run_dir / "status.json"))
                and s.get("state") == "waiting_for_actors"
                and (s.get("seconds_without_env_steps") or 0) >= 2
                and s
            ),
            120,
            "the learner's status to show seconds without env steps",
        )
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 1, out + err
    assert (
        "actor-0 exited with code 1: RuntimeError: this corridor is closed for repairs; "
        "restarting it in 1 s (1/20)" in err
    ), err
    assert "restarting it in 2 s (2/20)" in err, err
    assert (
        "error: actors could not start: actor-" in err
        and "exited with code 1: RuntimeError: this corridor is closed for repairs" in err
    ), err
    summary = read_json(run_dir / "summary.json")
    assert summary["stop_reason"] == "no_progress" and summary["env_steps"] == 0
    assert not processes_mentioning(str(tmp_path))
    # In a cluster, the operator reads the same status from the learner's /status (its limit
    # set to what the snapshot shows: how long the learner had been up varies with load).
    idle = learner_status["seconds_without_env_steps"]
    exp = parse_experiment(
        {"metadata": {"name": "e2e-broken"}, "spec": {"budget": {"noProgressSeconds": idle}}}
    )
    status = compute_status(
        exp,
        generation=1,
        previous=None,
        job={"status": {"ready": 1, "active": 1}},
        deployment={"status": {"readyReplicas": 2}},
        learner=LearnerStatus.from_json(learner_status),
    )
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "NoProgress")


def test_an_env_that_raises_every_episode_fails_the_run_with_its_traceback(tmp_path):
    env = with_test_envs()
    done = subprocess.run(
        train_cmd(
            tmp_path,
            "e2e-crumbling",
            "spec.env.id=SeedrlTest/Crumbling-v0",
            "spec.env.imports=[seedrl_test_envs]",
            "spec.budget.targetReturn=null",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "every actor gave up on its environments" in done.stderr, out
    assert "the environments keep raising" in done.stderr, out
    # The env's own error and where it was raised, not just that something failed.
    assert "RuntimeError: the floor gave way at the end of the corridor" in done.stderr, out
    assert "seedrl_test_envs/__init__.py" in done.stderr, out
    summary = read_json(tmp_path / "e2e-crumbling" / "summary.json")
    assert summary["stop_reason"] == "no_progress", summary
    assert "the floor gave way" in summary["error"]
    log = (tmp_path / "e2e-crumbling" / "actor-0.log").read_text()
    assert "Traceback (most recent call last)" in log and "in step" in log
    assert not processes_mentioning(str(tmp_path))


def test_ctrl_c_checkpoints_and_resume_continues_without_overwriting(tmp_path):
    proc, run_dir = start_run(tmp_path, "e2e-resume", 10000000)
    try:
        wait_for_learner_steps(run_dir, 30, 180, "training")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    first = read_json(run_dir / "summary.json")
    assert first["stop_reason"] == "interrupted"
    assert first["last_checkpoint"]
    assert Path(first["last_checkpoint"], "variables.index").exists()
    assert not processes_mentioning(str(tmp_path))

    # The same name without --resume is refused and leaves the run untouched.
    refused = subprocess.run(
        train_cmd(tmp_path, "e2e-resume"), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 3
    assert "already exists" in refused.stderr and "--resume" in refused.stderr
    assert read_json(run_dir / "summary.json") == first

    # --resume continues the same counters from the checkpoint.
    target = first["env_steps"] + 8000
    resumed = subprocess.run(
        train_cmd(
            tmp_path,
            "e2e-resume",
            f"spec.budget.maxEnvSteps={target}",
            "spec.budget.targetReturn=null",
            resume=True,
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    second = read_json(run_dir / "summary.json")
    assert second["stop_reason"] == "max_env_steps"
    assert second["env_steps"] >= target
    assert second["learner_steps"] > first["learner_steps"]
    assert second["episodes"] > first["episodes"]
    assert (run_dir / "summary.json.previous").exists()
    assert "resumed from" in (run_dir / "learner.log").read_text()


def test_a_bad_experiment_is_rejected_with_the_field_path(tmp_path):
    result = subprocess.run(
        train_cmd(tmp_path, "e2e-bad", "spec.learner.unrollLength=0", "spec.actors.replicas=two"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "spec.learner.unrollLength: must be >= 2, got 0" in result.stderr
    assert "spec.actors.replicas: must be an integer" in result.stderr
    assert not (tmp_path / "e2e-bad").exists()


def test_a_vtrace_run_with_an_evaluation_actor_reports_its_returns_apart(tmp_path):
    import re
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    proc = start(
        train_cmd(
            tmp_path,
            "e2e-eval",
            "spec.actors.replicas=3",
            "spec.agent.vtrace.evaluationActors=1",
            "spec.budget.maxEnvSteps=40000",
            "spec.budget.targetReturn=null",
        )
    )
    run_dir = tmp_path / "e2e-eval"
    try:
        port = None
        for line in proc.stdout:
            found = re.search(r"metrics: learner http://127\.0\.0\.1:(\d+)/metrics", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "no metrics line on the console"

        def eval_episodes_scraped():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                return 0
            return sum(
                s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name == "seedrl_learner_episode_return_count" and s.labels["kind"] == "eval"
            )

        assert wait_for(eval_episodes_scraped, 300, "evaluation episodes on /metrics") > 0
        out, _ = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    summary = read_json(run_dir / "summary.json")
    status = read_json(run_dir / "status.json")
    assert summary["eval_episodes"] > 0 and summary["episodes"] > 0
    assert 0 < summary["eval_mean_return"] <= 500
    assert status["eval_episodes"] == summary["eval_episodes"]
    assert status["eval_mean_return"] == summary["eval_mean_return"]
