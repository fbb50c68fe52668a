"""The actor splits its envs into streams (and worker processes) as the Experiment says."""

import asyncio
import threading
import time

import pytest

from seedrl.actors.client import ActorClient
from seedrl.actors.envs import EnvBatch
from seedrl.actors.main import make_env_batches
from seedrl.actors.process_envs import ProcessEnvBatch
from seedrl.common.config import parse_experiment
from support.learner_harness import start_learner, stop_learner


def experiment(**actors):
    return parse_experiment(
        {"metadata": {"name": "test-exp"}, "spec": {"actors": {"envsPerActor": 5, **actors}}}
    )


def test_envs_are_split_evenly_over_streams_in_process():
    batches = make_env_batches(experiment(streamsPerActor=2), index=0)
    try:
        assert [type(b) for b in batches] == [EnvBatch, EnvBatch]
        assert [b.num_envs for b in batches] == [2, 3]
    finally:
        for b in batches:
            b.close()


def test_worker_processes_are_shared_out_between_streams():
    batches = make_env_batches(experiment(streamsPerActor=2, processesPerActor=4), index=1)
    try:
        assert all(isinstance(b, ProcessEnvBatch) for b in batches)
        assert [b.num_processes for b in batches] == [2, 2]
        assert sum(b.num_envs for b in batches) == 5
    finally:
        for b in batches:
            b.close()


def test_two_streams_of_one_actor_are_served_side_by_side(tmp_path):
    exp = experiment(streamsPerActor=2)
    learner = start_learner(f"unix:{tmp_path}/learner.sock", experiment=exp)
    batches = make_env_batches(exp, index=0)
    clients = [
        ActorClient(b, "test-exp", f"actor/{j}", learner.address) for j, b in enumerate(batches)
    ]

    async def run_all():
        await asyncio.gather(*(c.run() for c in clients))

    thread = threading.Thread(target=lambda: asyncio.run(run_all()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while min(c.env_steps for c in clients) < 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert learner.runtime.connected_actors == 2
        assert all(c.env_steps >= 50 for c in clients)
        learner.runtime.finish("max_env_steps")
        thread.join(30)
        assert not thread.is_alive()
    finally:
        stop_learner(learner)
        for b in batches:
            b.close()


def test_index_flag_takes_a_number_or_auto():
    from seedrl.actors.main import parse_args

    assert parse_args(["--config", "c", "--learner", "l", "--index", "auto"]).index == "auto"
    assert parse_args(["--config", "c", "--learner", "l", "--index", "3"]).index == 3
    with pytest.raises(SystemExit):
        parse_args(["--config", "c", "--learner", "l", "--index", "-1"])


def test_the_largest_seed_the_experiment_accepts_seeds_every_env():
    # spec.seed goes up to 2^63-1 (an int64, as the CRD stores it): the actors' seeds are
    # derived from it whole, reproducibly.
    from seedrl.common.config import INT64_MAX

    exp = parse_experiment(
        {
            "metadata": {"name": "test-exp"},
            "spec": {"seed": INT64_MAX, "actors": {"envsPerActor": 2}},
        }
    )
    first, again = make_env_batches(exp, index=7), make_env_batches(exp, index=7)
    try:
        assert (first[0].reset() == again[0].reset()).all()
    finally:
        for b in first + again:
            b.close()


def test_the_env_spec_goes_into_a_termination_message_written_in_place(tmp_path, capsys):
    """``--env-spec-message``: the kubelet mounts that one file, so it is written in place (a
    rename could not replace it), as the operator reads it back."""
    from seedrl.actors.main import main
    from seedrl.common.exit_codes import ExitCode
    from seedrl.common.wire import EnvSpec

    config = tmp_path / "experiment.yaml"
    config.write_text("metadata: {name: spec}\nspec: {env: {id: CartPole-v1}}\n")
    message = tmp_path / "termination-log"
    message.write_text("")
    inode = message.stat().st_ino
    assert main(["--config", str(config), "--env-spec-message", str(message)]) == ExitCode.OK
    assert message.stat().st_ino == inode
    spec = EnvSpec.from_message(message.read_text())
    assert (spec.env_id, spec.num_actions, spec.observation_shape) == ("CartPole-v1", 2, (4,))
    config.write_text("metadata: {name: spec}\nspec: {env: {id: NoSuchEnv-v0}}\n")
    message.write_text("")
    code = main(["--config", str(config), "--env-spec-message", str(message)])
    assert code == ExitCode.BAD_CONFIG
    assert message.read_text() == ""
    assert "cannot make environments" in capsys.readouterr().err
