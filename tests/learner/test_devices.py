"""The learner's devices: the choice of devices and strategy (a pure function, so the TPU and GPU
cases are tested without the hardware), the multi-replica training step against the one-device
one, and inference over two logical devices in the real runtime.

The multi-device scenarios run in fresh processes (tests/learner/device_scenarios.py): logical
CPU devices can only be configured before TensorFlow initialises, once per process.
"""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from seedrl.common.config import ConfigError, DevicesConfig, NetworkConfig, parse_experiment
from seedrl.common.hardware import parse_cpuinfo
from seedrl.common.precision import Device
from seedrl.learner import devices
from support.cpus import ZEN3, ZEN4

SCENARIOS = os.path.join(os.path.dirname(__file__), "device_scenarios.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("device_scenarios", SCENARIOS)
scenarios = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scenarios)

CPUS = {"cpu": ["/device:CPU:0"]}
CPUS4 = {"cpu": [f"/device:CPU:{i}" for i in range(4)]}
GPUS8 = {"cpu": ["/device:CPU:0"], "gpu": [f"/device:GPU:{i}" for i in range(8)]}
TPU8 = {"cpu": ["/device:CPU:0"], "tpu": [f"/device:TPU:{i}" for i in range(8)]}


def plan(found, **config):
    return devices.plan_devices(DevicesConfig(**config), found)


# -- the choice -----------------------------------------------------------------------------------


def test_one_cpu_is_the_default_one_device_path():
    p = plan(CPUS)
    assert (p.kind, p.strategy, p.training, p.inference) == (
        "cpu",
        "default",
        ("/device:CPU:0",),
        ("/device:CPU:0",),
    )
    assert p.shared
    placement = devices.Placement(p, None)
    assert not placement.distributed and placement.replicas == 1
    assert placement.inference_devices == []  # nothing placed: the learner as it always was


def test_several_gpus_train_mirrored_and_share_inference_by_default():
    p = plan(GPUS8)
    assert (p.kind, p.strategy) == ("gpu", "mirrored")
    assert len(p.training) == 8 and p.inference == p.training and p.shared


def test_a_fraction_of_the_devices_serves_inference_on_its_own():
    p = plan(GPUS8, inference_devices=0.25)
    assert p.inference == ("/device:GPU:6", "/device:GPU:7")
    assert p.training == tuple(f"/device:GPU:{i}" for i in range(6))
    assert not p.shared
    assert "6 (" in p.summary() and "inference on 2 dedicated" in p.summary()


def test_a_tpu_vm_trains_with_tpu_strategy_on_the_cores_left_by_inference():
    p = plan(TPU8, inference_devices=2)
    assert (p.kind, p.strategy) == ("tpu", "tpu")
    assert p.training == tuple(f"/device:TPU:{i}" for i in range(6))
    assert p.inference == ("/device:TPU:6", "/device:TPU:7")


def test_tpu_training_cores_become_a_one_core_per_replica_assignment():
    cores = [
        (f"/job:worker/replica:0/task:0/device:TPU:{i}", [i % 2, i // 2, 0, 0]) for i in range(8)
    ]
    p = plan(
        {"tpu": [f"/job:localhost/replica:0/task:0/device:TPU:{i}" for i in range(8)]},
        inference_devices=6,
    )
    assert devices.tpu_core_assignment(p.training, cores) == [[[0, 0, 0, 0]], [[1, 0, 0, 0]]]
    with pytest.raises(ValueError, match="TPU:9"):
        devices.tpu_core_assignment(["/device:TPU:9"], cores)


def test_counts_and_the_default_strategy_are_honoured():
    p = plan(CPUS4, inference_devices=1, training_devices=2)
    assert p.training == ("/device:CPU:0", "/device:CPU:1") and p.inference == ("/device:CPU:3",)
    assert plan(GPUS8, strategy="default").training == ("/device:GPU:0",)
    assert plan(GPUS8, strategy="default").strategy == "default"
    assert plan(CPUS, strategy="mirrored").strategy == "mirrored"


@pytest.mark.parametrize(
    "found, config, path",
    [
        (CPUS4, {"strategy": "tpu"}, "spec.learner.devices.strategy"),
        (CPUS4, {"inference_devices": 4}, "spec.learner.devices.inferenceDevices"),
        (
            CPUS4,
            {"inference_devices": 2, "training_devices": 3},
            "spec.learner.devices.trainingDevices",
        ),
        (GPUS8, {"training_devices": 9}, "spec.learner.devices.trainingDevices"),
    ],
)
def test_impossible_requests_name_the_field(found, config, path):
    with pytest.raises(ConfigError) as err:
        plan(found, **config)
    assert err.value.problems[0][0] == path


def test_the_config_rejects_what_no_machine_could_give():
    with pytest.raises(ConfigError) as err:
        parse_experiment(
            {
                "metadata": {"name": "x"},
                "spec": {
                    "learner": {
                        "devices": {
                            "inferenceDevices": 1.5,
                            "strategy": "default",
                            "trainingDevices": 2,
                        }
                    }
                },
            }
        )
    paths = [p for p, _ in err.value.problems]
    assert paths == [
        "spec.learner.devices.inferenceDevices",
        "spec.learner.devices.trainingDevices",
    ]
    exp = parse_experiment(
        {
            "metadata": {"name": "x"},
            "spec": {"learner": {"devices": {"inferenceDevices": 0.5, "logicalCpuDevices": 4}}},
        }
    )
    assert exp.spec.learner.devices.inference_devices == 0.5


def test_tpu_presence_is_read_from_device_files(tmp_path):
    assert not devices.tpu_present([str(tmp_path / "accel[0-9]*")])
    (tmp_path / "accel0").touch()
    assert devices.tpu_present([str(tmp_path / "accel[0-9]*")])


@pytest.mark.parametrize(
    "expected,found,files,fragments",
    [
        (
            "tpu",
            {"cpu": ["CPU:0"]},
            {"tpu": False},
            [
                "scheduled for a TPU (spec.learner.accelerator.kind: tpu)",
                "no /dev/accel*",
                "was google.com/tpu requested",
                "CPU: 1",
                "Not training on the host's CPU",
            ],
        ),
        (
            "tpu",
            {"cpu": ["CPU:0"]},
            {"tpu": True},
            ["device files exist but TensorFlow lists no TPU", "its tag ends in -tpu"],
        ),
        (
            "gpu",
            {"cpu": ["CPU:0"]},
            {"gpu": False},
            ["scheduled for a GPU", "no /dev/nvidia* device files", "nvidia.com/gpu"],
        ),
        ("gpu", {"cpu": ["CPU:0"]}, {"gpu": True}, ["its tag ends in -gpu"]),
    ],
)
def test_a_learner_scheduled_for_an_accelerator_it_lacks_fails_saying_why(
    expected, found, files, fragments
):
    with pytest.raises(devices.AcceleratorMissing) as err:
        devices.check_accelerator(expected, found, files)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "expected,found",
    [
        (None, {"cpu": ["CPU:0"]}),
        ("cpu", {"cpu": ["CPU:0"]}),
        ("tpu", {"tpu": ["TPU:0"], "cpu": ["CPU:0"]}),
        ("gpu", {"gpu": ["GPU:0"]}),
    ],
)
def test_a_learner_with_what_it_was_scheduled_for_goes_on(expected, found):
    devices.check_accelerator(expected, found, {"tpu": False, "gpu": False})


def test_the_learner_exits_no_accelerator_at_once_when_its_tpu_is_missing(tmp_path):
    # This machine has no TPU: started as the operator starts a TPU learner, the learner
    # exits with the documented code, from the device files, before serving anything.
    from seedrl.common.exit_codes import ExitCode

    config = tmp_path / "exp.yaml"
    config.write_text("metadata: {name: x}\nspec: {learner: {accelerator: {kind: tpu}}}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedrl.learner",
            "--config",
            str(config),
            "--accelerator",
            "tpu",
            "--run-dir",
            str(tmp_path / "run"),
            "--metrics-address",
            "off",
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == ExitCode.NO_ACCELERATOR, proc.stderr[-3000:]
    assert "scheduled for a TPU" in proc.stderr and "serving" not in proc.stderr


def test_shards_are_contiguous_and_even():
    assert devices.split_sizes(8, 4) == [2, 2, 2, 2]
    assert devices.split_sizes(7, 2) == [4, 3] or devices.split_sizes(7, 2) == [3, 4]
    assert sum(devices.split_sizes(13, 4)) == 13


def test_setup_on_this_machine_keeps_the_one_device_path():
    placement = devices.setup(DevicesConfig())
    assert not placement.distributed
    assert placement.plan.strategy == "default" and placement.plan.kind in ("cpu", "gpu")


# -- multi-device runs, each in its own process ---------------------------------------------------


def _scenario(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, SCENARIOS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("replicas", [0, 2])
def test_an_update_with_non_finite_gradients_changes_nothing(replicas):
    """One batch with a NaN observation: the update is skipped on one device and on two
    replicas alike (no variable, no optimizer step moves) and says so with its norm."""
    results = _scenario("skip", str(replicas))
    for agent, r in results.items():
        assert r["moved"] == 0.0, (agent, r)
        assert r["steps_after"] == r["steps_before"], (agent, r)
        assert not np.isfinite(r["grad_norm"]), (agent, r)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Every agent trained two steps from the same weights on the same batches: on the
    one-device path, then with 2 training replicas (MirroredStrategy on logical CPUs)."""
    out = tmp_path_factory.mktemp("replicas")
    results = {n: _scenario("train", str(n), str(out)) for n in (0, 2)}
    return out, results


AGENT_CASES = ["vtrace", "vtrace_continuous", "ppo", "ppo_small_minibatches", "r2d2"]

# One device and several replicas add a gradient's terms in different orders (each replica sums
# its shard of the batch, then the all-reduce adds the shards), so their results differ by
# rounding, by an amount that depends on the machine's vector units. A float32 sum of n terms,
# in any order, is within (n - 1) u sum|x_i| of the exact sum (Higham, Accuracy and Stability
# of Numerical Algorithms, 2nd ed., section 4.2; u = 2**-24, float32's unit roundoff): two
# orders differ by at most 2 n u sum|x_i|. The longest sum here runs over the samples of one
# batch (R2D2's sequences are the longest rows), and each training step adds its own error to
# what the last one left. The terms are taken at the size of what is compared: for a tensor of
# parameters, its largest element or the largest update the steps made to any parameter,
# whichever is larger (a parameter that starts at 0 is all update, and its gradient sums terms
# as large as any other's even where they cancel); for a loss or a mean, its magnitude but at
# least 1 (they average per-sample terms of order one: the batches' observations, rewards and
# values are, however small their average comes out).
# Measured over 10 pairs of runs on the shared 2-core x86-64 machine (load average ~13): at most
# 0.04 of these tolerances (taking only each tensor's own largest element as its scale reached
# 0.15, and once, under `make test-unit`, more than the tolerance).
UNIT_ROUNDOFF = float(np.finfo(np.float32).eps) / 2
SAMPLES = scenarios.SEQUENCE_LENGTH * scenarios.BATCH


def tolerance(scale: float) -> float:
    """The largest difference two summation orders can make to a result of ``scale``."""
    return 2 * scenarios.STEPS * SAMPLES * UNIT_ROUNDOFF * scale


def _check_equivalence(out, results, agent, replicas):
    assert results[replicas][agent]["replicas"] == replicas
    # Every replica applies the same all-reduced update; the CPU collectives round it once per
    # device, so the copies agree to a few units in the last place (2**-20 is 16 of them).
    assert results[replicas][agent]["replica_spread"] < 2**-20
    with (
        np.load(out / f"{agent}-0.npz") as one,
        np.load(out / f"{agent}-{replicas}.npz") as many,
        np.load(out / f"{agent}-initial.npz") as initial,
    ):
        # The parameters are the float32 tensors (normalizer statistics are float64, counters
        # integers).
        params = [k for k in one if one[k].dtype == np.float32]
        moved = max(float(np.max(np.abs(one[k] - initial[k]), initial=0.0)) for k in params)
        assert moved > 1e-3  # the steps did move the parameters
        for k in one:
            scale = float(np.max(np.abs(one[k]), initial=0.0))
            if k in params:
                scale = max(scale, moved)
            np.testing.assert_allclose(many[k], one[k], rtol=0, atol=tolerance(scale), err_msg=k)
    for a, b in zip(results[0][agent]["metrics"], results[replicas][agent]["metrics"]):
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=0, abs=tolerance(max(abs(a[k]), 1.0))), k
    if agent == "r2d2":  # new priorities come back per sequence, in batch order
        want = np.asarray(results[0][agent]["priorities"])
        np.testing.assert_allclose(
            results[replicas][agent]["priorities"],
            want,
            rtol=0,
            atol=tolerance(float(np.max(np.abs(want)))),
        )
    r = results[replicas][agent]
    checkpoint_ok = (
        r["restored_from_one_device"] == 0.0
        and r["restored_spread"] == 0.0
        and r["restored_on_one_device"] == 0.0
    )
    return checkpoint_ok


@pytest.mark.parametrize("agent", AGENT_CASES)
def test_two_replicas_compute_the_one_device_parameters(trained, agent):
    out, results = trained
    _check_equivalence(out, results, agent, 2)


@pytest.mark.slow
def test_four_replicas_compute_the_one_device_parameters(trained):
    out, results = trained
    results = {**results, 4: _scenario("train", "4", str(out))}
    for agent in AGENT_CASES:
        assert _check_equivalence(out, results, agent, 4), agent


# Checkpoints go through seedrl.learner.checkpoint.trackables, which lists every variable of each
# Keras model: Keras 3 leaves list-held sub-layers (the torsos' layers) out of TensorFlow's object
# graph, so R2D2's target torso was not saved before.
@pytest.mark.parametrize("agent", AGENT_CASES)
def test_checkpoints_move_between_device_counts(trained, agent):
    out, results = trained
    assert _check_equivalence(out, results, agent, 2)


def test_runtime_serves_every_stream_from_two_inference_devices():
    result = _scenario("runtime")
    assert result["train_error"] is None
    assert result["inference_devices"] == ["/device:CPU:2", "/device:CPU:3"]
    assert result["training_devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert result["answered"] == {str(i): 30 for i in range(4)}
    batches = result["inference_batches"]
    assert set(batches) == {"/device:CPU:2", "/device:CPU:3"}
    assert min(batches.values()) >= 10
    # One batcher thread (lane) per inference device, each serving half of the streams.
    assert len(result["lane_batches"]) == 2 and min(result["lane_batches"]) >= 10
    assert result["status_batches"] == sum(result["lane_batches"]) == sum(batches.values())
    assert result["replicas"] == 2 and result["learner_steps"] >= 2
    assert result["replica_spread"] < 2**-20


# -- precision (seedrl.common.precision's rule for the learner's devices) -----------------------


def test_the_precision_device_is_the_plans_kind_with_the_weakest_gpu():
    zen3 = parse_cpuinfo(ZEN3)
    gpus = [
        {"compute_capability": (9, 0), "device_name": "NVIDIA H100"},
        {"compute_capability": (7, 5), "device_name": "Tesla T4"},
    ]
    device = devices.precision_device("gpu", gpus, cpu=zen3, environ={})
    assert device == Device("gpu", (7, 5), cpu=zen3, name="NVIDIA H100, Tesla T4")
    assert devices.precision_device("gpu", [], cpu=zen3, environ={}).compute_capability is None
    assert devices.precision_device("tpu", cpu=zen3, environ={}).kind == "tpu"
    off = devices.precision_device("cpu", cpu=zen3, environ={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert off == Device("cpu", cpu=zen3, onednn=False)


@pytest.mark.parametrize(
    "kind, cpu, requested, picked",
    [
        ("tpu", ZEN3, "auto", "bfloat16"),
        ("cpu", ZEN3, "auto", "float32"),
        ("cpu", ZEN4, "auto", "bfloat16"),
        ("cpu", ZEN4, "float32", "float32"),
    ],
)
def test_the_learner_resolves_and_logs_its_precision(
    monkeypatch, caplog, kind, cpu, requested, picked
):
    monkeypatch.setattr(devices, "read_cpu", lambda: parse_cpuinfo(cpu))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    network = NetworkConfig(name="nature_cnn", precision=requested)
    with caplog.at_level("INFO", logger=devices.log.name):
        choice = devices.choose_precision(network, kind)
    assert choice.precision == picked
    assert choice.summary() in caplog.text
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_an_explicit_bfloat16_on_a_cpu_without_it_warns_in_the_log(monkeypatch, caplog):
    monkeypatch.setattr(devices, "read_cpu", lambda: parse_cpuinfo(ZEN3))
    network = NetworkConfig(name="nature_cnn", precision="bfloat16")
    with caplog.at_level("INFO", logger=devices.log.name):
        choice = devices.choose_precision(network, "cpu")
    assert choice.precision == "bfloat16"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [choice.warning]
    assert "26 env steps/s in bfloat16 against 281 in float32" in warnings[0]


def test_with_precision_replaces_only_the_networks_precision():
    exp = parse_experiment({"metadata": {"name": "x"}, "spec": {"agent": {"network": {}}}})
    assert exp.spec.agent.network.precision == "auto"
    resolved = devices.with_precision(exp, "float32")
    assert resolved.spec.agent.network == dataclasses.replace(
        exp.spec.agent.network, precision="float32"
    )
    assert dataclasses.replace(resolved.spec, agent=exp.spec.agent) == exp.spec
