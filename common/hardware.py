"""What this machine computes on, read without TensorFlow: the CPU's model and instruction-set
flags, the accelerators' device files, an NVIDIA GPU's compute capability.

Two readers need the same facts: the precision choice (:mod:`seedrl.common.precision`), made by
the learner for its devices and by ``seedrl validate`` for the machine it runs on, and every
benchmark and learning-curve JSON, which records the machine that made its figures
(:func:`machine_facts`). Speeds of the same code differ several-fold between CPUs with and
without native bfloat16, so a figure without its CPU cannot be compared with another.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import shutil
import subprocess
from collections.abc import Sequence

CPUINFO = "/proc/cpuinfo"
#: Device files a TPU VM exposes: /dev/accel* (v2-v4) or VFIO groups (v5e and later).
TPU_DEVICE_GLOBS = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*")
#: Device files of NVIDIA GPUs, which the device plugin puts into a pod granted nvidia.com/gpu.
GPU_DEVICE_GLOBS = ("/dev/nvidia[0-9]*",)
#: CPU flags (as Linux names them in /proc/cpuinfo) that decide how fast TensorFlow's float32
#: and bfloat16 arithmetic runs; benchmarks record which of them the CPU has.
REPORTED_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
)
#: CPU flags of instructions that compute bfloat16 natively: AVX512_BF16 (Intel Cooper Lake
#: and later, AMD Zen 4 and later) and AMX (Intel Sapphire Rapids and later).
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """A CPU as /proc/cpuinfo describes it.

    Attributes:
      model: the ``model name`` line ("AMD EPYC", "Intel(R) Xeon(R) Platinum 8481C CPU"), or
        "unknown" where the file or the line is missing.
      family, model_number: the ``cpu family`` and ``model`` numbers, which tell CPU
        generations apart where a virtual machine's model name does not ("AMD EPYC" is
        family 25 for Zen 3 and Zen 4 alike); None where missing.
      flags: the instruction-set flags of the first processor.
    """

    model: str = "unknown"
    family: int | None = None
    model_number: int | None = None
    flags: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        """Whether /proc/cpuinfo described the CPU at all (flags are known)."""
        return bool(self.flags)

    @property
    def reported_flags(self) -> list[str]:
        """The flags of :data:`REPORTED_FLAGS` this CPU has, in that order."""
        return [f for f in REPORTED_FLAGS if f in self.flags]

    @property
    def bfloat16_flags(self) -> list[str]:
        """The flags of :data:`BFLOAT16_FLAGS` this CPU has: empty where it computes bfloat16
        only by emulation."""
        return [f for f in BFLOAT16_FLAGS if f in self.flags]

    def describe(self) -> str:
        """One line: model, family/model numbers and the reported flags."""
        numbers = (
            f", family {self.family} model {self.model_number}"
            if self.family is not None and self.model_number is not None
            else ""
        )
        flags = " ".join(self.reported_flags) if self.known else "flags unknown"
        return f"{self.model}{numbers} ({flags or 'none of ' + ' '.join(REPORTED_FLAGS)})"


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's entry of a /proc/cpuinfo text (x86 ``flags``, or Arm
    ``Features``)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block ends
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())

    def number(key: str) -> int | None:
        try:
            return int(fields[key], 0)
        except (KeyError, ValueError):
            return None

    flags = fields.get("flags") or fields.get("Features") or ""
    return CpuInfo(
        model=fields.get("model name") or fields.get("Model name") or "unknown",
        family=number("cpu family"),
        model_number=number("model"),
        flags=frozenset(flags.split()),
    )


@functools.lru_cache(maxsize=None)
def read_cpu(path: str = CPUINFO) -> CpuInfo:
    """This machine's CPU (cached: it does not change while a process runs); an unknown
    CPU where ``path`` cannot be read (not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_cpuinfo(fh.read())
    except OSError:
        return CpuInfo()


def device_files_present(globs: Sequence[str]) -> bool:
    """Whether any device file matching ``globs`` exists (:data:`TPU_DEVICE_GLOBS`,
    :data:`GPU_DEVICE_GLOBS`)."""
    return any(glob.glob(pattern) for pattern in globs)


def parse_compute_capability(text: str) -> tuple[int, int] | None:
    """``"8.6"`` (as nvidia-smi and TensorFlow's device details write it) as (8, 6)."""
    major, sep, minor = text.strip().partition(".")
    try:
        return (int(major), int(minor or 0)) if major else None
    except ValueError:
        return None


def nvidia_compute_capability(timeout: float = 10.0) -> tuple[int, int] | None:
    """The lowest compute capability among this machine's NVIDIA GPUs, asked of nvidia-smi
    (no TensorFlow needed); None without GPU device files, without nvidia-smi, or when it
    fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None or not device_files_present(GPU_DEVICE_GLOBS):
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = [c for c in map(parse_compute_capability, out.splitlines()) if c]
    return min(found) if found else None


def machine_facts() -> dict:
    """The machine beside a benchmark's figures, for its JSON: CPU model and numbers, the
    flags of :data:`REPORTED_FLAGS` it has, cores and load average."""
    cpu = read_cpu()
    return {
        "cpu_model": cpu.model,
        "cpu_family": cpu.family,
        "cpu_model_number": cpu.model_number,
        "cpu_flags": cpu.reported_flags if cpu.known else None,
        "cpu": cpu.describe(),
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
    }
