"""seedrl.common.precision: ``auto`` picks bfloat16 only where the device computes it natively
(issue 41, item 2), for each kind of device; an explicit bfloat16 that is emulated warns."""

from __future__ import annotations

import pytest

from seedrl.common import precision
from seedrl.common.hardware import parse_cpuinfo
from seedrl.common.precision import Device, resolve
from support.cpus import ARM, SAPPHIRE_RAPIDS, ZEN3, ZEN4


@pytest.mark.parametrize(
    "device, picked, because",
    [
        (Device("tpu", name="tpu-v5-lite-podslice"), "bfloat16", "TPU tpu-v5-lite-podslice"),
        (Device("gpu", (8, 0), name="A100"), "bfloat16", "compute capability 8.0 (>= 8.0"),
        (Device("gpu", (9, 0)), "bfloat16", "compute capability 9.0"),
        (Device("gpu", (7, 5), name="T4"), "float32", "compute capability 7.5 (< 8.0"),
        (Device("gpu", None), "float32", "unknown compute capability"),
        (Device("cpu", cpu=parse_cpuinfo(ZEN4)), "bfloat16", "has avx512_bf16"),
        (
            Device("cpu", cpu=parse_cpuinfo(SAPPHIRE_RAPIDS)),
            "bfloat16",
            "has avx512_bf16 and amx_bf16",
        ),
        (
            Device("cpu", cpu=parse_cpuinfo(ZEN3)),
            "float32",
            "AMD EPYC 7B13, family 25 model 1 (avx2 fma) has neither avx512_bf16 nor amx_bf16",
        ),
        (Device("cpu", cpu=parse_cpuinfo(ARM)), "float32", "has neither"),
        (Device("cpu"), "float32", "its flags are unknown"),
        (
            Device("cpu", cpu=parse_cpuinfo(ZEN4), onednn=False),
            "float32",
            "TF_ENABLE_ONEDNN_OPTS=0",
        ),
    ],
)
def test_auto_picks_bfloat16_only_where_the_device_computes_it(device, picked, because):
    choice = resolve("auto", device, "nature_cnn")
    assert choice.precision == picked
    assert because in choice.reason
    assert choice.warning is None
    assert choice.summary() == f"precision: auto picks {picked}: {choice.reason}"


def test_an_explicit_bfloat16_that_is_emulated_warns_with_its_measured_cost():
    choice = resolve("bfloat16", Device("cpu", cpu=parse_cpuinfo(ZEN3)), "nature_cnn")
    assert choice.precision == "bfloat16"  # kept: the user asked for it
    assert choice.warning is not None
    assert "26 env steps/s in bfloat16 against 281 in float32" in choice.warning
    assert "neither avx512_bf16 nor amx_bf16" in choice.warning
    assert choice.summary().startswith("precision: configured bfloat16")


@pytest.mark.parametrize(
    "device", [Device("tpu"), Device("gpu", (8, 6)), Device("cpu", cpu=parse_cpuinfo(ZEN4))]
)
def test_an_explicit_bfloat16_where_it_is_native_does_not_warn(device):
    assert resolve("bfloat16", device, "nature_cnn") == precision.Choice(
        "bfloat16", "bfloat16", resolve("auto", device, "nature_cnn").reason
    )


def test_an_explicit_float32_is_kept_everywhere():
    for device in (Device("tpu"), Device("gpu", (9, 0)), Device("cpu", cpu=parse_cpuinfo(ZEN4))):
        choice = resolve("float32", device, "nature_cnn")
        assert choice.precision == "float32" and choice.warning is None


@pytest.mark.parametrize(
    "value, on", [(None, True), ("1", True), ("0", False), ("false", False), ("False", False)]
)
def test_onednn_is_on_unless_turned_off(value, on):
    environ = {} if value is None else {"TF_ENABLE_ONEDNN_OPTS": value}
    assert precision.onednn_enabled(environ) is on


def test_this_machine_is_its_cpu_without_device_files(monkeypatch):
    monkeypatch.setattr(precision, "device_files_present", lambda globs: False)
    monkeypatch.setattr(precision, "nvidia_compute_capability", lambda: None)
    monkeypatch.setattr(precision, "read_cpu", lambda: parse_cpuinfo(ZEN3))
    device = precision.this_machine({})
    assert device == Device("cpu", cpu=parse_cpuinfo(ZEN3), onednn=True)
    assert resolve("auto", device, "nature_cnn").precision == "float32"


def test_this_machine_finds_a_gpu_and_a_tpu(monkeypatch):
    monkeypatch.setattr(precision, "read_cpu", lambda: parse_cpuinfo(ZEN3))
    monkeypatch.setattr(precision, "device_files_present", lambda globs: False)
    monkeypatch.setattr(precision, "nvidia_compute_capability", lambda: (8, 9))
    assert precision.this_machine({}).kind == "gpu"
    assert resolve("auto", precision.this_machine({}), "nature_cnn").precision == "bfloat16"
    monkeypatch.setattr(
        precision, "device_files_present", lambda globs: globs == precision.TPU_DEVICE_GLOBS
    )
    assert precision.this_machine({}).kind == "tpu"


def test_a_cluster_learner_is_resolved_for_its_accelerator():
    assert precision.accelerator_device("cpu") is None  # the node's CPU decides, later
    assert (
        resolve("auto", precision.accelerator_device("tpu"), "nature_cnn").precision == "bfloat16"
    )
    l4 = precision.accelerator_device("gpu", "nvidia-l4")
    assert l4 == Device("gpu", (8, 9), name="nvidia-l4")
    assert resolve("auto", l4, "nature_cnn").precision == "bfloat16"
    t4 = precision.accelerator_device("gpu", "nvidia-tesla-t4")
    assert resolve("auto", t4, "nature_cnn").precision == "float32"
    unknown = precision.accelerator_device("gpu", "nvidia-future-x")
    assert resolve("auto", unknown, "nature_cnn").precision == "float32"


@pytest.mark.parametrize(
    "device", [Device("tpu"), Device("gpu", (9, 0)), Device("cpu", cpu=parse_cpuinfo(ZEN4))]
)
def test_auto_keeps_the_mlp_torso_in_float32_everywhere(device):
    choice = resolve("auto", device, "mlp")
    assert choice.precision == "float32"
    assert "the mlp torso gains nothing from it" in choice.reason
    for conv in ("nature_cnn", "impala_resnet", "football_smm"):
        assert resolve("auto", device, conv).precision == "bfloat16"
    # An explicit bfloat16 MLP is the user's choice, native here: kept, no warning.
    assert resolve("bfloat16", device, "mlp").warning is None
