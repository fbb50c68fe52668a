"""One broken or hostile actor cannot hurt a run (issue 19's findings 1 to 5).

Each test runs a real learner (runtime and gRPC server on a unix socket) with two real actors
streaming CartPole beside a hostile stream, and checks three things: the hostile stream is
refused on its own with a clear status, the real actors' training goes on (learner steps keep
rising, their streams stay connected), and the mean return is theirs alone (every return the
learner counts is one a real actor reported).
"""

import json
import math
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seedrl.common.exit_codes import ExitCode
from seedrl.common import seedrl_pb2
from seedrl.common.wire import EnvSpec, decode_array, encode_array
from seedrl.learner.checkpoint import non_finite_variables
from seedrl.learner.metrics import LearnerMetrics
from seedrl.service.local.launcher import derive_env_spec
from support.learner_harness import (
    CARTPOLE,
    RealActors,
    Stream,
    hello,
    learner,  # noqa: F401 - a fixture
    only_real_returns,
    small_experiment,
    start_learner,
    step,
    stop_learner,
    wait_for,
)

#: CartPole-v1 episodes last at most 500 steps, paying 1 per step.
CARTPOLE_MAX_RETURN = 500.0


@pytest.fixture
def actors(learner):  # noqa: F811 - the fixture above
    """Two real actors of 4 envs each, streaming to ``learner`` until the test ends."""
    running = RealActors(learner.address)
    yield running
    running.stop()


def training_goes_on(learner, actors, steps=10, timeout=180):  # noqa: F811
    """Waits for ``steps`` more learner steps while the real actors stream, then checks that
    only their returns are counted and both of them are still connected."""
    runtime = learner.runtime
    start = runtime.learner_steps
    wait_for(
        lambda: runtime.learner_steps >= start + steps,
        timeout,
        f"{steps} learner steps after step {start}",
        actors.check,
    )
    wait_for(lambda: runtime.episodes >= 1, timeout, "an episode", actors.check)
    assert only_real_returns(runtime.returns, actors.returns)
    assert all(0 < r <= CARTPOLE_MAX_RETURN for r in runtime.returns)
    assert math.isfinite(runtime.mean_return)
    assert {c.actor_id for c in actors.clients if c.connected} == {"real-0", "real-1"}


def refused(stream, code):
    """The status that ended a hostile stream (it must be ``code``)."""
    with pytest.raises(grpc.RpcError) as err:
        stream.recv()
    assert err.value.code() == code, err.value.details()
    stream.close()
    return err.value.details()


def connect(learner, **kw):  # noqa: F811
    s = Stream(learner.address)
    s.send(hello(**kw))
    assert s.recv().WhichOneof("kind") == "welcome"
    return s


# -- finding 1: NaN or inf observations -------------------------------------------------------


def test_non_finite_observations_fail_only_their_stream(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    for value in (np.nan, np.inf, -np.inf):
        hostile = connect(learner, actor_id=f"hostile-{value}")
        obs = np.zeros((2, 4), np.float32)
        obs[1, 2] = value
        hostile.send(step(obs=obs))
        assert "step.observations: must be finite" in refused(
            hostile, grpc.StatusCode.INVALID_ARGUMENT
        )
    training_goes_on(learner, actors)
    status = learner.runtime.status()
    assert status.refused_streams == 3
    assert status.invalid_actions == 0  # no action outside the space was ever sent


def test_observations_that_overflow_the_network_cost_updates_not_the_run(tmp_path):
    """Finite observations as large as float32 goes pass the wire checks, and overflow a ReLU
    network into NaN: every update they reach is skipped and counted (in the status and as
    seedrl_learner_skipped_updates_total), the actions sent back stay in the action space,
    no variable turns NaN, and the real actors' training goes on."""
    running = start_learner(
        f"unix:{tmp_path}/l.sock", experiment=small_experiment(network={"activation": "relu"})
    )
    metrics = LearnerMetrics(running.runtime)
    actors = RealActors(running.address)
    try:
        _overflowing_stream(running, actors)
        samples = {
            (s.name, s.labels.get("experiment")): s.value
            for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
            for s in family.samples
        }
        assert (
            samples[("seedrl_learner_skipped_updates_total", "test-exp")]
            == running.runtime.skipped_updates
            >= 1
        )
        assert samples[("seedrl_learner_invalid_actions_total", "test-exp")] >= 1
    finally:
        actors.stop()
        stop_learner(running)


def _overflowing_stream(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    runtime = learner.runtime
    hostile = connect(learner, actor_id="huge")
    big = np.float32(np.finfo(np.float32).max)
    obs = np.array([[big, -big, big, -big], [-big, big, -big, big]], np.float32)
    # unrollLength 5, batchSize 2: each 5 steps make 2 unrolls, a batch of their own.
    for _ in range(40):
        hostile.send(step(obs=obs))
        reply = hostile.recv()
        actions = decode_array(reply.actions.actions, "actions", "int32", (2,))
        assert set(actions.tolist()) <= {0, 1}
    wait_for(lambda: runtime.skipped_updates >= 1, 120, "a skipped update", actors.check)
    hostile.close()
    training_goes_on(learner, actors)
    assert np.isfinite(runtime.last_metrics["grad_norm"])
    assert non_finite_variables(runtime.agent.checkpointables()) == []


# -- finding 2: the Experiment decides the env spec, not the first hello -----------------------


def test_a_first_hello_with_another_spec_is_refused_and_real_actors_are_welcome(tmp_path):
    running = start_learner(f"unix:{tmp_path}/l.sock")
    real = None
    try:
        for spec, what in (
            (
                EnvSpec("CartPole-v1", "float32", (6,), "int32", (), 2),
                "observation_shape: learner has (4,), actor has (6,)",
            ),
            (EnvSpec("Pong", "float32", (4,), "int32", (), 2), "env_id"),
            (EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 3), "num_actions"),
        ):
            s = Stream(running.address)
            s.send(hello(actor_id="first", spec=spec))
            assert what in refused(s, grpc.StatusCode.FAILED_PRECONDITION)
        assert running.runtime.env_spec == CARTPOLE
        real = RealActors(running.address)
        training_goes_on(running, real)
    finally:
        if real:
            real.stop()
        stop_learner(running)


# -- finding 3: a hello reusing a live actor id ------------------------------------------------


def test_a_second_stream_with_a_live_actor_id_is_refused(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    for _ in range(3):
        twin = Stream(learner.address)
        twin.send(hello(actor_id="real-0"))
        assert "already has an open stream" in refused(twin, grpc.StatusCode.ALREADY_EXISTS)
    training_goes_on(learner, actors)
    assert learner.runtime.status().actors == 2


# -- finding 4: episode returns ----------------------------------------------------------------


def test_implausible_episodes_are_refused_and_never_counted(tmp_path):
    exp = small_experiment(budget={"maxEnvSteps": 0, "targetReturn": 450.0, "returnWindow": 5})
    running = start_learner(f"unix:{tmp_path}/l.sock", experiment=exp)
    real = RealActors(running.address)
    try:
        training_goes_on(running, real, steps=3)
        cases = [
            ([(0, math.inf, 10)], "episode_return: must be finite"),
            ([(0, math.nan, 10)], "episode_return: must be finite"),
            ([(0, 1e12, 1)], "beyond spec.env.maxAbsReward"),
            ([(0, 5.0, 0)], "length: must be >= 1"),
            ([(0, 5.0, 3), (0, 5.0, 3)], "ended two episodes"),
        ]
        for episodes, what in cases:
            hostile = connect(running, actor_id="liar")
            hostile.send(step(episodes=episodes))
            assert what in refused(hostile, grpc.StatusCode.INVALID_ARGUMENT)
        # An episode the stream saw whole must add up to the rewards it sent.
        hostile = connect(running, actor_id="liar")
        hostile.send(step())
        hostile.recv()
        for _ in range(3):
            hostile.send(step(rewards=[1.0, 1.0]))
            hostile.recv()
        hostile.send(step(rewards=[1.0, 1.0], terminated=[True, False]))
        hostile.recv()  # a fresh episode begins on env 0
        for _ in range(4):
            hostile.send(step(rewards=[1.0, 1.0]))
            hostile.recv()
        hostile.send(step(rewards=[1.0, 1.0], terminated=[True, False], episodes=[(0, 499.0, 5)]))
        assert "add up to 5" in refused(hostile, grpc.StatusCode.INVALID_ARGUMENT)
        training_goes_on(running, real)
        assert running.runtime.check_budget() is None  # no forged return reached the target
    finally:
        real.stop()
        stop_learner(running)


# -- finding 5: memory follows num_envs --------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_hellos_are_capped_before_any_allocation(learner, actors):  # noqa: F811
    training_goes_on(learner, actors, steps=3)
    before = _rss_mb()
    cases = [
        (
            hello(actor_id="big", num_envs=10**7),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.learner.maxEnvsPerActor",
        ),
        (
            hello(actor_id="big", num_envs=10**9),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.learner.maxEnvsPerActor",
        ),
        (
            hello(actor_id="big", spec=EnvSpec("CartPole-v1", "float32", (2**40,), "int32", (), 2)),
            grpc.StatusCode.FAILED_PRECONDITION,
            "observation_shape",
        ),
        (
            hello(
                actor_id="big", spec=EnvSpec("CartPole-v1", "float32", (2**20,) * 8, "int32", (), 2)
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            "observation_shape",
        ),
    ]
    for message, code, what in cases:
        s = Stream(learner.address)
        s.send(message)
        assert what in refused(s, code)
    # A few kilobytes at most were allocated (10**7 envs cost ~380 MB before the cap).
    assert _rss_mb() - before < 50
    training_goes_on(learner, actors)


#: What the learner's RSS may grow by under a flood of streams (docs/guides/hostile-actors.md,
#: "Memory"): twice the per-env buffers maxTotalEnvs allow (Python's per-env lists and the
#: allocator's slack), 64 KiB per open connection (gRPC's buffers; ~32 KiB measured) and
#: 64 MiB for TensorFlow's and the allocator's own growth.
PER_CONNECTION = 64 * 2**10
SLACK = 64 * 2**20


def test_a_flood_of_wide_hellos_and_silent_streams_stays_within_the_memory_bound(tmp_path):
    exp = small_experiment(maxEnvsPerActor=4096, unrollLength=20, helloTimeoutSeconds=3600)
    running = start_learner(f"unix:{tmp_path}/l.sock", experiment=exp)
    actors = RealActors(running.address)
    try:
        training_goes_on(running, actors, steps=3)
        runtime = running.runtime
        before = _rss_mb() * 2**20
        wide, codes = [], []
        for i in range(100):
            s = Stream(running.address)
            s.send(hello(actor_id=f"wide-{i}", num_envs=4096))
            try:
                assert s.recv().WhichOneof("kind") == "welcome"
            except grpc.RpcError as exc:
                codes.append(exc.code())
                continue
            # Steps of every env, so that the stream's buffers are written, not just reserved.
            for _ in range(25):
                s.send(step(4096))
                assert s.recv().WhichOneof("kind") == "actions"
            wide.append(s)
        silent = [Stream(running.address, own_connection=True) for _ in range(300)]
        service = running.server.seedrl_service
        wait_for(lambda: service.awaiting_hello == 300, 120, "300 streams waiting for hellos")
        grown = _rss_mb() * 2**20 - before
        bound = (
            2 * exp.spec.learner.max_total_envs * runtime.bytes_per_env()
            + PER_CONNECTION * (len(silent) + len(wide))
            + SLACK
        )
        # 16,384 envs at most: three streams of 4,096 beside the real actors' 8; the rest wait.
        assert len(wide) == 3 and codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 97
        assert runtime.open_envs == 3 * 4096 + 8
        assert grown <= bound, (grown / 2**20, bound / 2**20)
        for s in wide + silent:
            s.close()
        training_goes_on(running, actors)
    finally:
        actors.stop()
        stop_learner(running)


def test_a_hello_whose_steps_could_not_fit_a_message_is_refused(tmp_path):
    wide = EnvSpec("Wide-v0", "float32", (16384,), "int32", (), 2)  # 64 KiB observations
    exp = small_experiment(env={"id": "Wide-v0"}, maxEnvsPerActor=65536)
    running = start_learner(f"unix:{tmp_path}/l.sock", env_spec=wide, experiment=exp)
    try:
        s = Stream(running.address)
        s.send(hello(actor_id="wide", num_envs=1025, spec=wide))
        assert "over the 67108864-byte message limit" in refused(
            s, grpc.StatusCode.INVALID_ARGUMENT
        )
        ok = connect(running, actor_id="narrow", num_envs=2, spec=wide)
        ok.send(
            seedrl_pb2.ActorMessage(
                step=seedrl_pb2.Step(
                    env_ids=[0, 1],
                    observations=encode_array(np.zeros((2, 16384), np.float32)),
                    rewards=[0.0, 0.0],
                    terminated=[False, False],
                    truncated=[False, False],
                )
            )
        )
        assert ok.recv().WhichOneof("kind") == "actions"
        ok.close()
    finally:
        stop_learner(running)


# -- findings 2 and 4 across a resume, with the real learner process ---------------------------

ROOT = Path(__file__).resolve().parents[2]


def strict_json(path):
    """A JSON file's content, failing on NaN or Infinity (not JSON, whatever Python writes)."""

    def refuse(token):
        raise AssertionError(f"{path} holds {token}, which is not JSON")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


def _learner_process(run_dir, *extra):
    log = open(run_dir / "learner.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "seedrl.learner",
                "--config",
                str(run_dir / "config.yaml"),
                "--run-dir",
                str(run_dir),
                "--listen",
                f"unix:{run_dir}/l.sock",
                "--metrics-address",
                "off",
                *extra,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    finally:
        log.close()


def _status(run_dir):
    try:
        return strict_json(run_dir / "status.json")
    except (OSError, ValueError):
        return {}


def test_a_resumed_learner_keeps_its_policy_and_writes_only_valid_json(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "test-exp"},
                "spec": {
                    "learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1},
                    "agent": {"network": {"hiddenSizes": [8]}},
                    "checkpoint": {"intervalSteps": 5},
                    "budget": {"maxEnvSteps": 0, "targetReturn": 450.0, "returnWindow": 5},
                },
            }
        )
    )
    assert derive_env_spec(str(run_dir / "config.yaml"), str(run_dir / "env_spec.json")) is None
    address = f"unix:{run_dir}/l.sock"

    # A first learner, with the spec the launcher derives: a liar's infinite return is refused.
    first = _learner_process(run_dir, "--env-spec", str(run_dir / "env_spec.json"))
    real = None
    try:
        wait_for(lambda: _status(run_dir).get("state"), 120, "the first learner")
        real = RealActors(address)
        wait_for(
            lambda: _status(run_dir).get("learner_steps", 0) >= 10, 180, "training", real.check
        )
        liar = Stream(address)
        liar.send(hello(actor_id="liar"))
        liar.recv()
        liar.send(step(episodes=[(0, math.inf, 10)]))
        assert "must be finite" in refused(liar, grpc.StatusCode.INVALID_ARGUMENT)
        first.send_signal(signal.SIGTERM)
        assert first.wait(120) == ExitCode.STOPPED  # SIGTERM before the end
    finally:
        first.kill()
        if real:
            real.stop()
    summary = strict_json(run_dir / "summary.json")
    assert summary["stop_reason"] == "terminated" and summary["refused_streams"] == 1
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda token: pytest.fail(f"metrics.jsonl: {token}"))
    checkpoint = Path(summary["last_checkpoint"])
    metadata = strict_json(checkpoint / "metadata.json")
    assert EnvSpec.from_json(metadata["env_spec"]) == CARTPOLE
    strict_json(run_dir / "checkpoints" / "MANIFEST.json")

    # A second learner without --env-spec (as in a cluster): the checkpoint's spec decides
    # before any actor is served, so a first hello with another shape changes nothing.
    second = _learner_process(run_dir)
    real = None
    try:
        wait_for(
            lambda: _status(run_dir).get("state") == "waiting_for_actors", 120, "the second learner"
        )
        impostor = Stream(address)
        impostor.send(
            hello(actor_id="impostor", spec=EnvSpec("CartPole-v1", "float32", (6,), "int32", (), 2))
        )
        assert "observation_shape" in refused(impostor, grpc.StatusCode.FAILED_PRECONDITION)
        real = RealActors(address)
        wait_for(
            lambda: _status(run_dir).get("learner_steps", 0) >= summary["learner_steps"] + 10,
            180,
            "training after the resume",
            real.check,
        )
        status = _status(run_dir)
        assert status["state"] == "running" and status["stop_reason"] is None
        assert status["mean_return"] is None or status["mean_return"] <= CARTPOLE_MAX_RETURN
        second.send_signal(signal.SIGTERM)
        assert second.wait(120) == ExitCode.STOPPED  # SIGTERM before the end
    finally:
        second.kill()
        if real:
            real.stop()
    log = (run_dir / "learner.log").read_text()
    assert "env spec from the checkpoint" in log and "resumed from" in log
    resumed = strict_json(run_dir / "summary.json")
    assert resumed["learner_steps"] > summary["learner_steps"]
    assert resumed["env_steps"] > summary["env_steps"]
