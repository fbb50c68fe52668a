"""One hostile stream cannot end a real `seedrl train` run as a success (issue 27, findings 1
and 2): the attacks against the CartPole example beside its own two actors, over the run's unix
socket, as any local process could send them.

Each attack comes twice: as found (a hello of more envs than the run's actors have, refused at
once) and within every cap (a stream of the run's own size), where the accounting rules of
``seedrl.learner.progress`` keep its made-up episodes from deciding the run. A stream that joins
and leaves counts its steps toward the budget like any actor's, and stops no one else's.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from seedrl.common.learner_status import LearnerStatus
from seedrl.common.wire import EnvSpec
from support.learner_harness import Stream, hello, step

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole-vtrace.yaml"
#: What one stream of the example's actors steps (envsPerActor 16, one stream each).
RUN_ENVS = 16


def train(tmp_path, name, *overrides):
    """Starts `seedrl train` on the CartPole example (its target 475 and budget kept)."""
    cmd = [sys.executable, "-m", "seedrl.service.cli", "train", str(EXAMPLE)]
    cmd += ["--runs-dir", str(tmp_path), "--set", f"metadata.name={name}"]
    for o in overrides:
        cmd += ["--set", o]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def status(run_dir):
    """The run's status.json (None while it is missing or being replaced)."""
    try:
        return LearnerStatus.from_json((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return None


def wait_for(predicate, timeout, what, proc):
    """Waits for ``predicate()`` (polling) while the run goes on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) while waiting for {what}")
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def training(run_dir, proc, more_steps=20):
    """Waits for the learner to train ``more_steps`` more steps, the run still going."""
    start = status(run_dir).learner_steps
    wait_for(
        lambda: (s := status(run_dir)) and s.learner_steps >= start + more_steps,
        180,
        f"{more_steps} more learner steps",
        proc,
    )
    assert status(run_dir).stop_reason is None


def stop(proc, run_dir):
    """Stops the run as Ctrl-C does; returns its summary."""
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    return json.loads((run_dir / "summary.json").read_text())


def hostile(run_dir, name, actor_id, num_envs, actor_index=0):
    """A hostile stream past its hello: (stream, spec), or the refusal's status."""
    spec = EnvSpec.read(str(run_dir / "env_spec.json"))
    s = Stream(f"unix:{run_dir}/learner.sock")
    s.send(
        hello(
            actor_id=actor_id,
            num_envs=num_envs,
            spec=spec,
            experiment=name,
            actor_index=actor_index,
        )
    )
    try:
        assert s.recv().WhichOneof("kind") == "welcome"
    except grpc.RpcError as exc:
        return None, exc
    return s, None


def forged_episodes(num_envs, reward=499.0):
    """A step that ends one made-up episode of one step per env, its rewards adding up."""
    return step(
        num_envs,
        rewards=[reward] * num_envs,
        terminated=[True] * num_envs,
        episodes=[(e, reward, 1) for e in range(num_envs)],
    )


@pytest.fixture
def run(tmp_path):
    """The CartPole example training, its learner past its first update."""
    started = []

    def start(name, *overrides):
        proc = train(tmp_path, name, *overrides)
        started.append(proc)
        run_dir = tmp_path / name
        wait_for(
            lambda: (s := status(run_dir)) and s.learner_steps >= 1, 300, "a learner step", proc
        )
        return proc, run_dir

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_made_up_winning_episodes_do_not_end_the_run(run):
    proc, run_dir = run("forged-target")
    before = status(run_dir)
    assert before.mean_return is None or before.mean_return < 200  # early: far from 475

    # As found: 100 envs (more than any of the run's actor streams has), 100 episodes of 499.
    s, refused = hostile(run_dir, "forged-target", "forger", 100)
    assert s is None and refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello.num_envs: must be in [1, 16]" in refused.details()

    # Within the caps: 80 made-up winning episodes in five messages, beside the real actors.
    s, refused = hostile(run_dir, "forged-target", "forger", RUN_ENVS)
    assert refused is None
    s.send(step(RUN_ENVS))
    assert s.recv().WhichOneof("kind") == "actions"
    for _ in range(5):
        s.send(forged_episodes(RUN_ENVS))
        assert s.recv().WhichOneof("kind") == "actions"
    training(run_dir, proc)
    after = status(run_dir)
    assert after.refused_streams >= 1 and "forger" in after.last_refusal
    assert after.episodes >= before.episodes + 5 * RUN_ENVS  # counted in the window...
    s.close()
    assert stop(proc, run_dir)["stop_reason"] == "interrupted"  # ...but it decided nothing


def test_an_actor_that_joins_and_leaves_leaves_every_step_counting(run):
    # Issue 41's reproduction: beside the run's one actor of 4 envs, a client with a new index
    # sends 41 steps of 4 envs and leaves. The count then froze at 2 x 164 (no index counted
    # beyond the busiest other one's steps) and the budget never ended the run.
    name, envs, messages, budget = "joins-leaves", 4, 41, 30_000
    proc, run_dir = run(
        name,
        "spec.actors.replicas=1",
        f"spec.actors.envsPerActor={envs}",
        f"spec.budget.maxEnvSteps={budget}",
        "spec.budget.targetReturn=null",
        "spec.budget.maxSeconds=400",
    )
    s, refused = hostile(run_dir, name, "visitor", envs, actor_index=1)
    assert refused is None
    for _ in range(messages):
        s.send(step(envs))
        assert s.recv().WhichOneof("kind") == "actions"
    s.close()
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "max_env_steps", summary
    done = [
        line
        for line in (run_dir / "actor-0.log").read_text().splitlines()
        if " env steps (pid " in line
    ]
    logged = int(done[-1].split(" after ")[1].split()[0])
    # The learner counts each message's envs; the actor counts the envs it stepped, so the
    # learner has one message more at each end of the actor's stream: the first (the reset
    # observations) and the last (answered "finished").
    assert 0 <= summary["env_steps"] - (logged + messages * envs) <= 2 * envs, (summary, done)
