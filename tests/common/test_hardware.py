"""seedrl.common.hardware: the CPU read from /proc/cpuinfo, GPU compute capabilities and the
machine facts every benchmark JSON records."""

from __future__ import annotations

import os

from seedrl.common import hardware
from seedrl.common.hardware import CpuInfo, parse_compute_capability, parse_cpuinfo
from support.cpus import ARM, SAPPHIRE_RAPIDS, ZEN3, ZEN4


def test_the_first_processor_is_read_with_its_model_numbers_and_flags():
    cpu = parse_cpuinfo(ZEN4)
    assert (cpu.model, cpu.family, cpu.model_number) == ("AMD EPYC", 25, 17)
    assert cpu.reported_flags == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert cpu.bfloat16_flags == ["avx512_bf16"]
    assert cpu.describe() == (
        "AMD EPYC, family 25 model 17 (avx2 fma avx512f avx512_vnni avx512_bf16)"
    )


def test_cpus_without_and_with_amx():
    zen3 = parse_cpuinfo(ZEN3)
    assert zen3.bfloat16_flags == [] and zen3.reported_flags == ["avx2", "fma"]
    spr = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert spr.bfloat16_flags == ["avx512_bf16", "amx_bf16"]
    assert "amx_tile" in spr.reported_flags and spr.model.startswith("Intel(R) Xeon(R)")


def test_an_arm_cpu_and_an_unreadable_file_are_described_honestly(tmp_path):
    arm = parse_cpuinfo(ARM)
    assert arm.known and arm.model == "unknown" and arm.bfloat16_flags == []
    assert "none of" in arm.describe()
    missing = hardware.read_cpu(str(tmp_path / "no-cpuinfo"))
    assert missing == CpuInfo() and not missing.known
    assert missing.describe() == "unknown (flags unknown)"


def test_this_machine_is_read_from_proc_cpuinfo():
    if not os.path.exists(hardware.CPUINFO):
        return
    with open(hardware.CPUINFO, encoding="utf-8") as fh:
        assert hardware.read_cpu() == parse_cpuinfo(fh.read())


def test_compute_capabilities_parse_as_nvidia_smi_writes_them():
    assert parse_compute_capability("8.6\n") == (8, 6)
    assert parse_compute_capability("10.0") == (10, 0)
    assert parse_compute_capability("") is None
    assert parse_compute_capability("[N/A]") is None


def test_no_gpu_files_means_no_compute_capability(monkeypatch):
    monkeypatch.setattr(hardware, "device_files_present", lambda globs: False)
    assert hardware.nvidia_compute_capability() is None


def test_machine_facts_name_the_cpu_beside_cores_and_load(monkeypatch):
    monkeypatch.setattr(hardware, "read_cpu", lambda: parse_cpuinfo(ZEN4))
    facts = hardware.machine_facts()
    assert facts["cpu_model"] == "AMD EPYC"
    assert (facts["cpu_family"], facts["cpu_model_number"]) == (25, 17)
    assert facts["cpu_flags"] == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert facts["cpu"] == parse_cpuinfo(ZEN4).describe()
    assert facts["cores"] == os.cpu_count() and len(facts["load_average"]) == 3
