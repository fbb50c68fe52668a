"""The torso's arithmetic (``spec.agent.network.precision``) resolved for a device.

``auto`` (the default) picks bfloat16 only where the device computes it natively, float32
elsewhere:

  * a TPU: always (its matrix units multiply bfloat16);
  * an NVIDIA GPU of compute capability 8.0 or more (Ampere and later: bfloat16 tensor cores);
  * a CPU with AVX512_BF16 or AMX (``avx512_bf16`` / ``amx_bf16`` in /proc/cpuinfo), with
    TensorFlow's oneDNN kernels on (``TF_ENABLE_ONEDNN_OPTS`` not 0: without them bfloat16
    runs in Eigen's emulation whatever the CPU).

The ``mlp`` torso stays float32 under ``auto`` on every device: its cost is the dispatch of
small ops, not arithmetic, and bfloat16 only adds casts (:data:`FLOAT32_NETWORKS`).

Elsewhere bfloat16 is emulated in float32 with conversions around every op, and far slower
than float32 (:data:`EMULATED_COST`). An explicit ``bfloat16`` is kept, with a warning there.

One rule for both of its readers: the learner resolves it for the devices it found
(``seedrl.learner.devices``), ``seedrl validate`` for the machine it runs on
(:func:`this_machine`) and for the learner's accelerator in a cluster
(:func:`accelerator_device`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from seedrl.common.hardware import (
    BFLOAT16_FLAGS,
    TPU_DEVICE_GLOBS,
    CpuInfo,
    device_files_present,
    nvidia_compute_capability,
    read_cpu,
)

#: The lowest NVIDIA compute capability with bfloat16 tensor cores (Ampere).
MIN_BFLOAT16_COMPUTE_CAPABILITY = (8, 0)
#: What bfloat16 costs where it is emulated, as measured (said in the warning on an explicit
#: ``bfloat16``).
EMULATED_COST = (
    "on a CPU without AVX512_BF16 or AMX the Pong example trained at 26 env steps/s in "
    "bfloat16 against 281 in float32 (bench/throughput.py, issue 41), and a Nature CNN "
    "training step took 6.5x as long in TensorFlow's emulated bfloat16 as in float32"
)
#: Torsos that ``auto`` keeps in float32 everywhere: measured on a CPU with AVX512_BF16, the
#: CartPole MLP (64, 64) inferred at the same speed in bfloat16 and trained 1.1x slower.
FLOAT32_NETWORKS = ("mlp",)
#: Compute capability of the GPUs GKE offers (``spec.learner.accelerator.gpu.type``), so that
#: ``seedrl validate`` can say what a cluster learner will pick.
GKE_GPU_COMPUTE_CAPABILITY: Mapping[str, tuple[int, int]] = {
    "nvidia-tesla-k80": (3, 7),
    "nvidia-tesla-p100": (6, 0),
    "nvidia-tesla-p4": (6, 1),
    "nvidia-tesla-v100": (7, 0),
    "nvidia-tesla-t4": (7, 5),
    "nvidia-tesla-a100": (8, 0),
    "nvidia-a100-80gb": (8, 0),
    "nvidia-l4": (8, 9),
    "nvidia-h100-80gb": (9, 0),
    "nvidia-h100-mega-80gb": (9, 0),
    "nvidia-h200-141gb": (9, 0),
    "nvidia-b200": (10, 0),
    "nvidia-gb200": (10, 0),
}


@dataclasses.dataclass(frozen=True)
class Device:
    """The device a torso computes on, as far as the choice needs it.

    Attributes:
      kind: ``tpu``, ``gpu`` or ``cpu``.
      compute_capability: a GPU's (major, minor), or None where unknown.
      cpu: the host CPU, which a ``cpu`` device computes on.
      onednn: whether TensorFlow's oneDNN kernels are on (see :func:`onednn_enabled`).
      name: what to call it in the reason (a GPU's model, a TPU's generation); optional.
    """

    kind: str
    compute_capability: tuple[int, int] | None = None
    cpu: CpuInfo = dataclasses.field(default_factory=CpuInfo)
    onednn: bool = True
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Choice:
    """The precision picked and why.

    Attributes:
      requested: the configured value (``auto``, ``float32`` or ``bfloat16``).
      precision: what the torso computes in: ``float32`` or ``bfloat16``.
      reason: why, naming the device and what it has or lacks.
      warning: set where the choice is slow on this device (an explicit bfloat16 that is
        emulated here), saying what it costs.
    """

    requested: str
    precision: str
    reason: str
    warning: str | None = None

    def summary(self) -> str:
        """One line for the log and ``seedrl validate``."""
        how = "auto picks" if self.requested == "auto" else "configured"
        return f"precision: {how} {self.precision}: {self.reason}"

    def to_json(self) -> dict:
        """The choice as the run's summary and the benchmarks record it."""
        return dataclasses.asdict(self)


def onednn_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether TensorFlow runs its oneDNN kernels, which hold its native bfloat16 CPU code:
    on by default on x86, off where ``TF_ENABLE_ONEDNN_OPTS`` is 0 or false."""
    return environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def native_bfloat16(device: Device) -> tuple[bool, str]:
    """Whether ``device`` computes bfloat16 natively, and the reason in words."""
    if device.kind == "tpu":
        return True, f"the TPU{' ' + device.name if device.name else ''} computes it natively"
    if device.kind == "gpu":
        cc = device.compute_capability
        gpu = f"the GPU{' ' + device.name if device.name else ''}"
        if cc is None:
            return False, f"{gpu} has an unknown compute capability"
        have = f"{gpu} has compute capability {cc[0]}.{cc[1]}"
        if cc >= MIN_BFLOAT16_COMPUTE_CAPABILITY:
            return True, f"{have} (>= 8.0: bfloat16 tensor cores)"
        return False, f"{have} (< 8.0: no bfloat16 tensor cores)"
    cpu = device.cpu
    what = f"the CPU {cpu.describe()}"
    if not cpu.known:
        return False, f"{what}: its flags are unknown"
    found = cpu.bfloat16_flags
    if not found:
        return False, f"{what} has neither {' nor '.join(BFLOAT16_FLAGS)}"
    if not device.onednn:
        return False, (
            f"{what} has {' and '.join(found)}, but TF_ENABLE_ONEDNN_OPTS=0 turns off "
            f"TensorFlow's oneDNN kernels, its only native bfloat16 code"
        )
    return True, f"{what} has {' and '.join(found)}"


def resolve(requested: str, device: Device, network: str) -> Choice:
    """The torso's precision for ``requested`` (``auto``, ``float32``, ``bfloat16``) on
    ``device``, for the torso named ``network`` (``spec.agent.network.name``): ``auto``
    picks bfloat16 where the device computes it natively, float32 elsewhere and for the
    torsos of :data:`FLOAT32_NETWORKS`; an explicit value is kept, with a warning where
    bfloat16 is emulated."""
    native, why = native_bfloat16(device)
    if requested == "auto":
        if native and network in FLOAT32_NETWORKS:
            return Choice(
                requested,
                "float32",
                f"{why}, but the {network} torso gains nothing from it (its cost is the "
                f"dispatch of small ops, not arithmetic)",
            )
        return Choice(requested, "bfloat16" if native else "float32", why)
    if requested == "bfloat16" and not native:
        return Choice(
            requested,
            "bfloat16",
            why,
            warning=(
                f"precision bfloat16 is not native on this device ({why}): emulated, it runs "
                f"far slower than float32 ({EMULATED_COST}). Set "
                f"spec.agent.network.precision to auto or float32."
            ),
        )
    return Choice(requested, requested, why)


def this_machine(environ: Mapping[str, str] = os.environ) -> Device:
    """The device a learner started on this machine would compute on, found without
    TensorFlow: a TPU where its device files exist, a GPU where nvidia-smi answers, else the
    CPU."""
    cpu = read_cpu()
    onednn = onednn_enabled(environ)
    if device_files_present(TPU_DEVICE_GLOBS):
        return Device("tpu", cpu=cpu, onednn=onednn)
    capability = nvidia_compute_capability()
    if capability is not None:
        return Device("gpu", capability, cpu=cpu, onednn=onednn)
    return Device("cpu", cpu=cpu, onednn=onednn)


def accelerator_device(kind: str, gpu_type: str = "", tpu_type: str = "") -> Device | None:
    """The device of a cluster learner scheduled on ``spec.learner.accelerator``: a TPU, or
    a GPU whose compute capability :data:`GKE_GPU_COMPUTE_CAPABILITY` knows (unknown types
    get None as capability). None for ``cpu``: the node's CPU, unknown before the learner
    starts there, decides."""
    if kind == "tpu":
        return Device("tpu", name=tpu_type)
    if kind == "gpu":
        return Device("gpu", GKE_GPU_COMPUTE_CAPABILITY.get(gpu_type), name=gpu_type)
    return None
