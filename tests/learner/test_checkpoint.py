"""Checkpoints on local disk and on GCS (the real fake-gcs-server): round trips, atomic
publication, one writer, retention, checksums, retries."""

import json

import numpy as np
import pytest
import tensorflow as tf

from seedrl.common.config import parse_experiment
from seedrl.common.storage import LocalStore, ObjectStore, TransientStorageError, open_store
from seedrl.common.wire import EnvSpec
from seedrl.learner.agents import build_agent
from seedrl.learner.checkpoint import (
    MANIFEST,
    CheckpointConflict,
    CheckpointError,
    Checkpointer,
    NonFiniteVariables,
)
from seedrl.learner.runtime import LearnerRuntime

SPEC = EnvSpec("Toy", "float32", (3,), "int32", (), 2)


def _r2d2(max_gb=4.0, env="Toy"):
    return parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": env},
                "agent": {
                    "name": "r2d2",
                    "network": {"hiddenSizes": [8], "lstmSize": 4, "denseSize": 8},
                    "r2d2": {
                        "trainLength": 4,
                        "burnIn": 2,
                        "sequencePeriod": 4,
                        "nStep": 2,
                        "minReplaySize": 2,
                        "replayCheckpointMaxGb": max_gb,
                    },
                },
                "learner": {"batchSize": 2},
            },
        }
    )


def _ppo():
    return parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": "Toy"},
                "agent": {
                    "name": "ppo",
                    "network": {"hiddenSizes": [8]},
                    "ppo": {"minibatches": 1},
                },
                "learner": {"batchSize": 2},
            },
        }
    )


def _vtrace():
    return parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": "Toy"},
                "agent": {"name": "vtrace", "network": {"hiddenSizes": [8, 8], "lstmSize": 4}},
            },
        }
    )


def _fill(agent, n, seed):
    rng = np.random.default_rng(seed)
    rows = 7  # burnIn 2 + trainLength 4 + the row to bootstrap from
    agent.add_unrolls(
        [
            {
                "observation": rng.normal(size=(rows, 3)).astype(np.float32),
                "action": rng.integers(0, 2, rows).astype(np.int32),
                "reward": rng.normal(size=rows).astype(np.float32),
                "terminated": np.zeros(rows, bool),
                "truncated": np.zeros(rows, bool),
                "q_values": rng.normal(size=(rows, 2)).astype(np.float32),
                "initial_state": [
                    rng.normal(size=4).astype(np.float32),
                    rng.normal(size=4).astype(np.float32),
                    np.eye(2, dtype=np.float32)[rng.integers(0, 2)],
                    np.float32(0.1),
                ],
            }
            for _ in range(n)
        ]
    )


def _variables(agent):
    """Every variable the agent checkpoints, in a stable order."""
    out = []
    for _, obj in sorted(agent.checkpointables().items()):
        if isinstance(obj, tf.Variable):
            out.append(obj)
        elif isinstance(obj, tf.random.Generator):
            out.append(obj.state)
        else:
            out.extend(obj.variables)
    return out


def _scramble(agent, seed):
    """Gives every checkpointed variable (weights, optimizer slots, statistics) new values."""
    rng = np.random.default_rng(seed)
    for v in _variables(agent):
        values = rng.normal(size=tuple(v.shape)) * 3
        v.assign(values.astype(tf.as_dtype(v.dtype).as_numpy_dtype))


@pytest.fixture(params=["local", "gcs"])
def store_uri(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    return f"gs://{request.getfixturevalue('gcs_bucket')}/exp/t"


@pytest.fixture
def learner():
    """Makes (runtime, agent, checkpointer) triples over a store; shuts the runtimes down."""
    made = []

    def make(exp, store, keep=3):
        runtime = LearnerRuntime(exp, build_agent, train=False)
        made.append(runtime)
        agent = build_agent(exp, SPEC)
        saver = Checkpointer(
            store, runtime, keep=keep, interval_steps=1, interval_seconds=0, sleep=lambda s: None
        )
        return runtime, agent, saver

    yield make
    for runtime in made:
        runtime.shutdown()


def _checkpoint_dirs(store):
    return sorted({n.split("/")[0] for n in store.list("ckpt-")})


@pytest.mark.parametrize("make_exp", [_r2d2, _ppo, _vtrace], ids=["r2d2", "ppo", "vtrace"])
def test_a_round_trip_restores_every_variable_and_counter(store_uri, learner, make_exp):
    exp = make_exp()
    runtime, agent, saver = learner(exp, open_store(store_uri))
    assert saver.open() is None  # nothing there yet
    saver.attach(agent)
    if exp.spec.agent.name == "r2d2":
        _fill(agent, 5, seed=0)
        agent.train_from_replay()
    _scramble(agent, seed=1)
    runtime.learner_steps, runtime.env_steps, runtime.episodes = 7, 1234, 9
    runtime.returns.extend([10.0, 20.5, 31.0])
    uri = saver.save()
    assert uri.startswith(store_uri + "/ckpt-000000000007-")

    runtime2, agent2, saver2 = learner(exp, open_store(store_uri))
    found = saver2.open()
    assert found["learner_steps"] == 7 and found["env_steps"] == 1234
    assert found["agent"] == exp.spec.agent.name
    saver2.attach(agent2)
    assert (runtime2.learner_steps, runtime2.env_steps, runtime2.episodes) == (7, 1234, 9)
    assert list(runtime2.returns) == [10.0, 20.5, 31.0]
    assert saver2.last_checkpoint == uri
    before, after = _variables(agent), _variables(agent2)
    assert len(before) == len(after) > 4
    for x, y in zip(before, after):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=x.name)
    if exp.spec.agent.name == "r2d2":
        assert len(agent2.replay) == len(agent.replay) == 5
        a = agent.replay.sample(4, np.random.default_rng(7))
        b = agent2.replay.sample(4, np.random.default_rng(7))
        np.testing.assert_array_equal(a[1]["observation"], b[1]["observation"])


class FaultyStore(ObjectStore):
    """A real store with faults injected: failing uploads, transient write errors."""

    def __init__(self, inner, fail_uploads_from=None, transient_failures=0):
        self.inner = inner
        self.uri = inner.uri
        self.uploads = 0
        self.fail_uploads_from = fail_uploads_from
        self.transient_failures = transient_failures

    def read(self, name):
        return self.inner.read(name)

    def write(self, name, data, if_generation_match=None):
        if self.transient_failures:
            self.transient_failures -= 1
            raise TransientStorageError("503 Service Unavailable")
        return self.inner.write(name, data, if_generation_match)

    def upload_file(self, name, path):
        self.uploads += 1
        if self.fail_uploads_from is not None and self.uploads >= self.fail_uploads_from:
            raise OSError("connection reset during upload")
        self.inner.upload_file(name, path)

    def download_file(self, name, path):
        self.inner.download_file(name, path)

    def list(self, prefix=""):
        return self.inner.list(prefix)

    def delete(self, name):
        self.inner.delete(name)


def test_an_interrupted_upload_leaves_nothing_loadable_and_the_previous_one_loads(
    store_uri, learner
):
    exp = _ppo()
    store = open_store(store_uri)
    runtime, agent, saver = learner(exp, FaultyStore(store, fail_uploads_from=8))
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 10
    first = saver.save()  # 5 files: uploads 1-5
    runtime.learner_steps = 20
    with pytest.raises(OSError):
        saver.save()  # fails on its third file
    # The half-uploaded checkpoint's files are there but nothing lists them.
    assert len(_checkpoint_dirs(store)) == 2
    manifest = json.loads(store.read(MANIFEST)[0])
    assert [e["name"] for e in manifest["checkpoints"]] == [first.rsplit("/", 1)[1]]

    runtime2, agent2, saver2 = learner(exp, open_store(store_uri))
    assert saver2.open()["learner_steps"] == 10
    saver2.attach(agent2)
    assert runtime2.learner_steps == 10
    # The next publication clears the orphan away.
    runtime2.learner_steps = 30
    second = saver2.save()
    assert _checkpoint_dirs(store) == sorted(u.rsplit("/", 1)[1] for u in (first, second))


def test_a_checkpoint_failing_its_checksum_is_skipped_for_the_previous_one(
    store_uri, learner, caplog
):
    exp = _ppo()
    store = open_store(store_uri)
    runtime, agent, saver = learner(exp, store)
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 10
    saver.save()
    runtime.learner_steps = 20
    newest = saver.save().rsplit("/", 1)[1]
    data_file = next(n for n in store.list(newest) if ".data-" in n)
    damaged = bytearray(store.read(data_file)[0])
    damaged[len(damaged) // 2] ^= 0xFF
    store.write(data_file, bytes(damaged))

    runtime2, agent2, saver2 = learner(exp, open_store(store_uri))
    assert saver2.open()["learner_steps"] == 10
    saver2.attach(agent2)
    assert runtime2.learner_steps == 10
    assert "fails its checksum" in caplog.text and newest in caplog.text


def test_when_no_listed_checkpoint_verifies_nothing_is_loaded_or_changed(tmp_path, learner):
    exp = _ppo()
    store = LocalStore(str(tmp_path / "c"))
    runtime, agent, saver = learner(exp, store)
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 10
    name = saver.save().rsplit("/", 1)[1]
    store.delete(f"{name}/metadata.json")
    listing = store.list()
    _, _, saver2 = learner(exp, LocalStore(str(tmp_path / "c")))
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints"):
        saver2.open()
    assert store.list() == listing


def test_a_second_writer_is_refused(store_uri, learner):
    exp = _ppo()
    runtime_a, agent_a, a = learner(exp, open_store(store_uri))
    runtime_b, agent_b, b = learner(exp, open_store(store_uri))
    for runtime, agent, saver in ((runtime_a, agent_a, a), (runtime_b, agent_b, b)):
        saver.open()
        saver.attach(agent)
        runtime.learner_steps = 5
    published = a.save()
    with pytest.raises(CheckpointConflict):
        b.save()
    assert b.save() is None  # refused for good
    store = open_store(store_uri)
    manifest = json.loads(store.read(MANIFEST)[0])
    assert [e["name"] for e in manifest["checkpoints"]] == [published.rsplit("/", 1)[1]]
    assert manifest["writer"] == runtime_a.run_id
    # b's uploaded files are orphans; a's next checkpoint removes them.
    runtime_a.learner_steps = 6
    second = a.save()
    assert len(_checkpoint_dirs(store)) == 2
    assert second.rsplit("/", 1)[1] in _checkpoint_dirs(store)


def test_a_conflict_during_training_ends_the_run(tmp_path, learner):
    exp = _ppo()
    uri = str(tmp_path / "c")
    runtime_a, agent_a, a = learner(exp, open_store(uri))
    runtime_b, agent_b, b = learner(exp, open_store(uri))
    for runtime, agent, saver in ((runtime_a, agent_a, a), (runtime_b, agent_b, b)):
        saver.open()
        saver.attach(agent)
        runtime.learner_steps = 5
    a.maybe_save()
    b.maybe_save()
    assert runtime_b.stop_reason == "checkpoint_conflict" and runtime_a.stop_reason is None


def test_retention_keeps_exactly_n(store_uri, learner):
    exp = _ppo()
    store = open_store(store_uri)
    runtime, agent, saver = learner(exp, store, keep=2)
    saver.open()
    saver.attach(agent)
    names = []
    for step in (1, 2, 3, 4, 5):
        runtime.learner_steps = step
        names.append(saver.save().rsplit("/", 1)[1])
    manifest = json.loads(store.read(MANIFEST)[0])
    assert [e["name"] for e in manifest["checkpoints"]] == names[-2:]
    assert _checkpoint_dirs(store) == sorted(names[-2:])


def test_transient_errors_are_retried_and_a_persistent_failure_lets_training_go_on(
    tmp_path, learner
):
    exp = _ppo()
    faulty = FaultyStore(LocalStore(str(tmp_path / "c")), transient_failures=2)
    runtime, agent, saver = learner(exp, faulty)
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 1
    assert saver.save()  # two 503s on the manifest, then success
    faulty.transient_failures = 100  # an outage longer than the retries
    runtime.learner_steps = 2
    saver.maybe_save()
    assert saver.failures == 1 and runtime.stop_reason is None
    assert saver.status()["checkpoint_failures"] == 1
    faulty.transient_failures = 0  # back again: the next interval publishes a fresh one
    runtime.learner_steps = 3
    saver.maybe_save()
    assert saver.last_checkpoint.split("/")[-1].startswith("ckpt-000000000003-")
    manifest = json.loads(faulty.read(MANIFEST)[0])
    assert [e["learner_steps"] for e in manifest["checkpoints"]] == [1, 3]


def test_a_checkpoint_of_another_env_is_refused(tmp_path, learner):
    uri = str(tmp_path / "c")
    runtime, agent, saver = learner(_r2d2(env="Toy"), open_store(uri))
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 1
    saver.save()
    _, _, other = learner(_r2d2(env="Other-v0"), open_store(uri))
    with pytest.raises(CheckpointError, match="another spec.env"):
        other.open()


def test_a_checkpoint_from_before_a_field_existed_resumes_after_the_upgrade(
    tmp_path, learner, monkeypatch
):
    import yaml

    from seedrl.common.config import to_document
    from seedrl.learner import checkpoint

    def as_an_earlier_seedrl_wrote_it(exp):
        document = to_document(exp)
        del document["spec"]["agent"]["vtrace"]["epochs"]
        return yaml.safe_dump(document, sort_keys=False)

    uri = str(tmp_path / "c")
    runtime, agent, saver = learner(_vtrace(), open_store(uri))
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 1
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "dump_experiment", as_an_earlier_seedrl_wrote_it)
        saver.save()
    _, _, resumed = learner(_vtrace(), open_store(uri))
    assert resumed.open()["learner_steps"] == 1


def test_an_unreadable_manifest_is_reported_and_left_alone(tmp_path, learner):
    store = LocalStore(str(tmp_path / "c"))
    store.write(MANIFEST, b"{not json")
    _, _, saver = learner(_ppo(), store)
    with pytest.raises(CheckpointError, match="unreadable"):
        saver.open()
    assert store.read(MANIFEST)[0] == b"{not json"


def test_a_replay_over_the_size_limit_is_not_written(tmp_path, learner):
    store = LocalStore(str(tmp_path / "c"))
    runtime, agent, saver = learner(_r2d2(max_gb=1e-9), store)
    saver.open()
    saver.attach(agent)
    _fill(agent, 3, seed=0)
    runtime.learner_steps = 1
    name = saver.save().rsplit("/", 1)[1]
    files = {n.split("/")[1] for n in store.list(name)}
    assert "extra.npz" not in files and "variables.index" in files


def test_non_finite_variables_are_never_published(tmp_path, learner):
    store = LocalStore(str(tmp_path / "c"))
    runtime, agent, saver = learner(_vtrace(), store)
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 1
    good = saver.save()
    weights = agent.network.trainable_variables[0]
    weights.assign(tf.fill(weights.shape, float("nan")))
    runtime.learner_steps = 2
    with pytest.raises(NonFiniteVariables, match="NaN or infinity"):
        saver.save()
    saver.maybe_save()  # during training: counted as a failure, training goes on
    assert saver.failures == 1 and runtime.stop_reason is None
    manifest = json.loads(store.read(MANIFEST)[0])
    assert [e["learner_steps"] for e in manifest["checkpoints"]] == [1]
    assert saver.last_checkpoint == good


def test_the_env_spec_is_recorded_and_binds_the_resume(tmp_path, learner):
    uri = str(tmp_path / "c")
    runtime, agent, saver = learner(_ppo(), open_store(uri))
    runtime.env_spec = SPEC
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 1
    runtime.returns.extend([1.0, float("inf"), 3.0])  # as an older learner might have saved
    saver.save()
    resumed, agent2, saver2 = learner(_ppo(), open_store(uri))
    saver2.open()
    assert saver2.env_spec == SPEC  # what a learner without --env-spec builds its agent for
    resumed.env_spec = SPEC
    saver2.attach(agent2)
    assert list(resumed.returns) == [1.0, 3.0]  # the infinite one is not restored
    other, agent3, saver3 = learner(_ppo(), open_store(uri))
    saver3.open()
    other.env_spec = EnvSpec("Toy", "float32", (5,), "int32", (), 2)
    with pytest.raises(CheckpointError, match="observation_shape: checkpoint has"):
        saver3.attach(agent3)


#: An upload cut short by its process's death: the kernel kills it (SIGXFSZ, restored to its
#: default) in the middle of writing a file larger than its RLIMIT_FSIZE. A GCS upload is not
#: limited so: that child uploads the file whole and dies before any manifest lists it.
_DIES_UPLOADING = """
import os, resource, signal, sys
from seedrl.common.storage import open_store

store = open_store(sys.argv[1])
with open(sys.argv[2], "wb") as fh:
    fh.write(os.urandom(1 << 20))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))
store.upload_file("ckpt-000000000015-0badc0de/variables.data-00000-of-00001", sys.argv[2])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_an_upload_cut_short_leaves_is_deleted_after_the_next_publication(
    store_uri, learner, tmp_path
):
    import os
    import subprocess
    import sys

    exp = _ppo()
    store = open_store(store_uri)
    runtime, agent, saver = learner(exp, store)
    saver.open()
    saver.attach(agent)
    runtime.learner_steps = 10
    first = saver.save()
    died = subprocess.run(
        [sys.executable, "-c", _DIES_UPLOADING, store_uri, str(tmp_path / "big")], timeout=120
    )
    assert died.returncode < 0  # killed mid-upload, as a preempted learner is
    # A live writer's temporary file is another learner's upload in flight: left alone.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    in_flight = None
    if isinstance(store, LocalStore):
        in_flight = (
            tmp_path
            / "checkpoints"
            / "ckpt-000000000016-5eed5eed"
            / (f"variables.index.tmp.{live.pid}.00000000")
        )
        in_flight.parent.mkdir()
        in_flight.write_bytes(b"in flight")
        left = [p for p in (tmp_path / "checkpoints").rglob("*.tmp.*") if p != in_flight]
        assert left, "the interrupted upload left no temporary file"
    try:
        runtime.learner_steps = 20
        second = saver.save()
        listed = {u.rsplit("/", 1)[1] for u in (first, second)}
        assert {n.split("/")[0] for n in store.list()} == listed | {MANIFEST}
        if in_flight is not None:
            on_disk = [
                p.relative_to(tmp_path / "checkpoints")
                for p in (tmp_path / "checkpoints").rglob("*")
                if p.is_file() and ".tmp." in p.name
            ]
            assert on_disk == [in_flight.relative_to(tmp_path / "checkpoints")]
            assert os.path.getsize(in_flight) == len(b"in flight")
    finally:
        live.kill()
        live.wait()
