"""The learner's devices: discovery, the split between inference and training, the strategy.

SEED RL puts inference and training on the cores of one TPU host: some cores serve batched
inference, the others train as replicas of one data-parallel step. This module does the same
with whatever the learner's machine has:

  * a TPU VM: its TPU cores, training with ``tf.distribute.TPUStrategy`` on a device
    assignment of the training cores;
  * several GPUs: ``tf.distribute.MirroredStrategy`` over the training GPUs;
  * otherwise the default strategy on the one device (CPU or GPU), exactly the path the
    learner always had; ``logicalCpuDevices`` splits the CPU into logical devices so the
    multi-device paths can be tested and measured on a machine without accelerators.

Variables are created under the training strategy's scope (:meth:`Placement.scope`), so each
training replica holds a mirrored copy that every update keeps identical. Inference runs on
the inference devices in turn (:meth:`Placement.inference_device`) and reads the same
variables: on a device that holds a replica it reads that device's copy, on any other device
(a dedicated inference device) it reads the primary copy (the first training device's). SEED
places its inference ``tf.function`` on its inference cores the same way.

The choice itself is :func:`plan_devices`, a pure function of the config and the devices found,
so it is tested without the hardware.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import itertools
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from seedrl.common import precision as precision_rule
from seedrl.common.config import ConfigError, DevicesConfig, Experiment, NetworkConfig
from seedrl.common.hardware import (
    GPU_DEVICE_GLOBS,
    TPU_DEVICE_GLOBS,
    device_files_present,
    read_cpu,
)

log = logging.getLogger(__name__)


class AcceleratorMissing(RuntimeError):
    """The learner was scheduled for an accelerator it does not find; the message says what
    was looked for and what to check. The learner exits
    :attr:`seedrl.common.exit_codes.ExitCode.NO_ACCELERATOR` on it."""


def check_accelerator(
    expected: str | None,
    found: Mapping[str, Sequence[str]],
    device_files: Mapping[str, bool] | None = None,
) -> None:
    """Fails when the learner was scheduled for a GPU or TPU and has none.

    A learner that trained on the host's CPU instead would look healthy while the
    accelerator it was given stays idle and billed, so this is an error, not a fallback.

    Args:
      expected: the accelerator kind it was scheduled for (``spec.learner.accelerator.kind``)
        or None (``seedrl train``: whatever the machine has).
      found: device names by type, as :func:`discover` lists them (an empty mapping when the
        device files already tell).
      device_files: whether each kind's device files exist (``tpu``, ``gpu``); looked up
        when not given.

    Raises:
      AcceleratorMissing: naming what is missing and the likely causes.
    """
    if expected not in ("gpu", "tpu") or found.get(expected):
        return
    if device_files is None:
        device_files = {"tpu": tpu_present(), "gpu": tpu_present(GPU_DEVICE_GLOBS)}
    what = {
        "tpu": ("TPU", "/dev/accel* or /dev/vfio/*", "google.com/tpu", "-tpu"),
        "gpu": ("GPU", "/dev/nvidia*", "nvidia.com/gpu", "-gpu"),
    }[expected]
    name, files, resource, suffix = what
    others = ", ".join(
        f"{kind.upper()}: {len(found[kind])}" for kind in ("tpu", "gpu", "cpu") if found.get(kind)
    )
    if not device_files.get(expected):
        cause = (
            f"no {files} device files: the pod did not get a {name} (is the node a {name} "
            f"node, and was {resource} requested?)"
        )
    else:
        cause = (
            f"the {files} device files exist but TensorFlow lists no {name}: is "
            f"spec.learner.image this release's {name} build (its tag ends in {suffix})?"
        )
    raise AcceleratorMissing(
        f"scheduled for a {name} (spec.learner.accelerator.kind: {expected}) but found none: "
        f"{cause}"
        + (f"; TensorFlow found {others}" if others else "")
        + ". Not training on the host's CPU instead."
    )


_FIELD = "spec.learner.devices"


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """Which devices train and which serve inference.

    Attributes:
      kind: the device type used: ``tpu``, ``gpu`` or ``cpu``.
      strategy: ``default`` (one device, no distribution), ``mirrored`` or ``tpu``.
      training: the training devices, one replica each.
      inference: the inference devices, served round-robin.
      found: every device of ``kind`` found.
    """

    kind: str
    strategy: str
    training: tuple[str, ...]
    inference: tuple[str, ...]
    found: tuple[str, ...]

    @property
    def shared(self) -> bool:
        """Whether inference runs on the training devices rather than on its own."""
        return set(self.inference) <= set(self.training)

    def summary(self) -> str:
        """One line for the log: what was found and how it is used."""
        how = "shared with training" if self.shared else "dedicated"
        return (
            f"devices: {len(self.found)} {self.kind.upper()} found; strategy {self.strategy}; "
            f"training on {len(self.training)} ({', '.join(self.training)}); "
            f"inference on {len(self.inference)} {how} ({', '.join(self.inference)})"
        )


def _inference_count(value: float, total: int) -> int:
    """The number of dedicated inference devices that ``inferenceDevices`` asks for."""
    if value <= 0:
        return 0
    if value < 1:
        return min(max(1, round(value * total)), max(total - 1, 1))
    return int(value)


def plan_devices(config: DevicesConfig, found: Mapping[str, Sequence[str]]) -> DevicePlan:
    """Chooses the devices and the strategy; a pure function of the config and the devices.

    Args:
      config: ``spec.learner.devices``.
      found: device names by type (``tpu``, ``gpu``, ``cpu``), as discovery lists them.

    Raises:
      ConfigError: when the config asks for devices or a strategy the machine cannot give,
        naming the field.
    """
    kind = "tpu" if found.get("tpu") else "gpu" if found.get("gpu") else "cpu"
    devices = tuple(found.get(kind) or ())
    if not devices:
        raise ConfigError([(_FIELD, "no device found at all")])
    if config.strategy == "tpu" and kind != "tpu":
        raise ConfigError(
            [
                (
                    f"{_FIELD}.strategy",
                    f"tpu asked for, but no TPU was found (found {kind.upper()}: {len(devices)})",
                )
            ]
        )
    n = len(devices)
    n_inference = _inference_count(config.inference_devices, n)
    if n_inference and n_inference >= n:
        raise ConfigError(
            [
                (
                    f"{_FIELD}.inferenceDevices",
                    f"{n_inference} dedicated inference device(s) leave none of the "
                    f"{n} {kind.upper()} device(s) found to train on",
                )
            ]
        )
    available = n - n_inference
    n_training = config.training_devices or available
    if config.strategy == "default" and not config.training_devices:
        n_training = 1
    if n_training > available:
        raise ConfigError(
            [
                (
                    f"{_FIELD}.trainingDevices",
                    f"needs {n_training} device(s), but {n} {kind.upper()} device(s) "
                    f"were found and {n_inference} serve inference",
                )
            ]
        )
    training = devices[:n_training]
    inference = devices[n - n_inference :] if n_inference else training
    if config.strategy == "auto":
        strategy = "tpu" if kind == "tpu" else "mirrored" if n_training > 1 else "default"
    else:
        strategy = config.strategy
    return DevicePlan(kind, strategy, training, inference, devices)


# -- discovery (touches TensorFlow) -------------------------------------------------------------


def tpu_present(globs: Sequence[str] = TPU_DEVICE_GLOBS) -> bool:
    """Whether this machine exposes TPU chips; checked on device files, so that a machine
    without a TPU never waits on a TPU cluster resolver."""
    return device_files_present(globs)


def configure_logical_cpus(count: int) -> None:
    """Splits the host CPU into ``count`` logical devices. Must run before TensorFlow
    initialises its devices (before the first op), which is why the learner calls
    :func:`setup` first thing.

    Raises:
      ConfigError: if TensorFlow's devices were already initialised.
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError as exc:
        current = len(tf.config.list_logical_devices("CPU"))
        if current != count:
            raise ConfigError(
                [
                    (
                        f"{_FIELD}.logicalCpuDevices",
                        f"cannot split the CPU into {count} after TensorFlow "
                        f"started with {current}: {exc}",
                    )
                ]
            ) from None


def _connect_tpu():
    """Connects to the local TPU system; returns (resolver, topology)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    return resolver, topology


def discover(config: DevicesConfig) -> tuple[dict[str, list[str]], object]:
    """Lists the machine's devices by type, configuring logical CPUs when asked.

    Returns:
      the device names by type and, on a TPU VM, the TPU connection (resolver, topology),
      else None.
    """
    import tensorflow as tf

    tpu = None
    if config.strategy in ("auto", "tpu") and tpu_present():
        tpu = _connect_tpu()
    gpus = tf.config.list_physical_devices("GPU")
    if config.logical_cpu_devices and not gpus and tpu is None:
        configure_logical_cpus(config.logical_cpu_devices)
    elif config.logical_cpu_devices:
        log.info("logicalCpuDevices ignored: the learner has accelerators")
    found = {
        "tpu": [d.name for d in tf.config.list_logical_devices("TPU")] if tpu else [],
        "gpu": [d.name for d in tf.config.list_logical_devices("GPU")],
        "cpu": [d.name for d in tf.config.list_logical_devices("CPU")],
    }
    return found, tpu


def _make_strategy(plan: DevicePlan, tpu):
    import tensorflow as tf

    if plan.strategy == "default":
        return None
    if plan.strategy == "mirrored":
        return tf.distribute.MirroredStrategy(list(plan.training))
    resolver, topology = tpu
    cores = [
        (topology.tpu_device_name_at_coordinates(c), c) for c in topology.device_coordinates[0]
    ]
    assignment = tf.tpu.experimental.DeviceAssignment(
        topology, np.asarray(tpu_core_assignment(plan.training, cores))
    )
    return tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)


def tpu_core_assignment(training: Sequence[str], cores: Sequence[tuple[str, object]]) -> list:
    """The TPU device assignment of the training replicas: one core each, [[coordinates]] in
    replica order (SEED builds its training assignment from chosen cores the same way).

    Args:
      training: the training devices' logical names (``.../device:TPU:k``).
      cores: the host's cores as (topology device name, coordinates); names are matched on
        their ``device:TPU:k`` part, as the topology and the logical devices name jobs apart.
    """
    by_core = {name.rsplit("/", 1)[-1]: coordinates for name, coordinates in cores}
    missing = [name for name in training if name.rsplit("/", 1)[-1] not in by_core]
    if missing:
        raise ValueError(f"TPU cores {missing} are not in the host's topology ({sorted(by_core)})")
    return [[by_core[name.rsplit("/", 1)[-1]]] for name in training]


def setup(config: DevicesConfig, expected: str | None = None) -> "Placement":
    """Discovers the devices, chooses the split and strategy, logs a summary and returns the
    :class:`Placement` that agents are built with. Call it before anything runs a TensorFlow
    op (logical CPU devices can only be configured before).

    Args:
      config: ``spec.learner.devices``.
      expected: the accelerator kind the learner was scheduled for, or None.

    Raises:
      AcceleratorMissing: scheduled for a GPU or TPU and none found (see
        :func:`check_accelerator`); checked on the device files first, before TensorFlow
        loads, so that it fails in seconds.
      ConfigError: the devices config cannot be met by what was found.
    """
    if expected in ("gpu", "tpu"):
        files = {"tpu": tpu_present(), "gpu": tpu_present(GPU_DEVICE_GLOBS)}
        if not files[expected]:
            check_accelerator(expected, {}, files)
    found, tpu = discover(config)
    check_accelerator(expected, found)
    if not found["tpu"] and importlib.util.find_spec("libtpu") is not None:
        # The TPU build on a machine without a TPU (a test, a CPU node): say so, since the
        # learner then runs on the CPU, as documented above.
        log.warning(
            "no TPU found (no %s device files): running on %s",
            " or ".join(TPU_DEVICE_GLOBS),
            "GPU" if found["gpu"] else "CPU",
        )
    plan = plan_devices(config, found)
    log.info(plan.summary())
    return Placement(plan, _make_strategy(plan, tpu))


# -- precision ----------------------------------------------------------------------------------


def precision_device(
    kind: str, gpu_details: Sequence[Mapping] = (), cpu=None, environ=None
) -> precision_rule.Device:
    """The device the torso computes on, as the precision rule reads it.

    Args:
      kind: the learner's device type (:attr:`DevicePlan.kind`): ``tpu``, ``gpu``, ``cpu``.
      gpu_details: TensorFlow's details of each GPU (``compute_capability``, ``device_name``):
        the lowest capability decides, since every replica computes the same torso.
      cpu: the host CPU; read from /proc/cpuinfo when not given.
      environ: the environment (``TF_ENABLE_ONEDNN_OPTS``); the process's when not given.
    """
    cpu = read_cpu() if cpu is None else cpu
    onednn = precision_rule.onednn_enabled(os.environ if environ is None else environ)
    if kind == "gpu":
        capabilities = [
            (int(c[0]), int(c[1]))
            for c in (tuple(d["compute_capability"]) for d in gpu_details)
            if len(c) == 2
        ]
        names = sorted({str(d.get("device_name", "")) for d in gpu_details} - {""})
        return precision_rule.Device(
            "gpu",
            min(capabilities) if capabilities else None,
            cpu=cpu,
            onednn=onednn,
            name=", ".join(names),
        )
    return precision_rule.Device(kind, cpu=cpu, onednn=onednn)


def _gpu_details() -> list[dict]:
    import tensorflow as tf

    details = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            details.append(dict(tf.config.experimental.get_device_details(gpu)))
        except (ValueError, RuntimeError):  # details unknown: the capability stays unknown
            details.append({})
    return [d for d in details if "compute_capability" in d]


def choose_precision(network: NetworkConfig, kind: str | None = None) -> precision_rule.Choice:
    """Resolves ``spec.agent.network.precision`` for the learner's device type ``kind``
    (:attr:`DevicePlan.kind`; None: what TensorFlow lists here, see :func:`local_kind`) and
    logs the choice and why, with a warning where an explicit bfloat16 is emulated; see
    :mod:`seedrl.common.precision`."""
    kind = local_kind() if kind is None else kind
    device = precision_device(kind, _gpu_details() if kind == "gpu" else ())
    choice = precision_rule.resolve(network.precision, device, network.name)
    log.info(choice.summary())
    if choice.warning:
        log.warning(choice.warning)
    return choice


def local_kind() -> str:
    """The device type a network built outside the learner's setup computes on (a policy
    evaluated on its own, a benchmark's local model): ``gpu`` when TensorFlow lists one, else
    ``cpu``."""
    import tensorflow as tf

    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def with_precision(exp: Experiment, precision: str) -> Experiment:
    """``exp`` with ``spec.agent.network.precision`` set to a resolved ``precision``."""
    agent = exp.spec.agent
    network = dataclasses.replace(agent.network, precision=precision)
    spec = dataclasses.replace(exp.spec, agent=dataclasses.replace(agent, network=network))
    return dataclasses.replace(exp, spec=spec)


# -- placement ----------------------------------------------------------------------------------


class Placement:
    """Where an agent's variables live, where it infers and how it trains.

    With no strategy (the default, one device) nothing is placed explicitly and training is
    the agent's own one-device step: the learner behaves exactly as without this module.

    Args:
      plan: the chosen devices.
      strategy: the training strategy, or None for the default one-device path.
    """

    def __init__(self, plan: DevicePlan | None = None, strategy=None):
        self.plan = plan
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        devices = (
            list(plan.inference)
            if plan and (strategy is not None or len(plan.inference) > 1 or not plan.shared)
            else []
        )
        self._inference = devices
        self._turn = itertools.count()
        self._lock = threading.Lock()
        #: Inference batches served per inference device so far.
        self.inference_batches: collections.Counter[str] = collections.Counter()

    @property
    def distributed(self) -> bool:
        """Whether training runs through a distribution strategy."""
        return self.strategy is not None

    @property
    def inference_devices(self) -> list[str]:
        """The devices inference goes round-robin over; empty when inference is not placed."""
        return list(self._inference)

    def scope(self):
        """The context to create the agent's variables in (the strategy's scope)."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def inference_device(self):
        """The context of the next inference call: the next inference device in turn."""
        if not self._inference:
            return contextlib.nullcontext()
        import tensorflow as tf

        with self._lock:
            device = self._inference[next(self._turn) % len(self._inference)]
            self.inference_batches[device] += 1
        return tf.device(device)

    def can_shard(self, batch: int) -> bool:
        """Whether a batch of ``batch`` items gives every training replica at least one."""
        return self.distributed and batch >= self.replicas

    def make_train_step(
        self, loss_fn: Callable, optimizer, variables: Callable[[], list], clip_norm: float
    ) -> "ReplicatedStep":
        """A training step that runs ``loss_fn`` on every replica's shard of a batch (see
        :class:`ReplicatedStep`)."""
        return ReplicatedStep(self, loss_fn, optimizer, variables, clip_norm)


def default_placement() -> Placement:
    """The placement of a learner that was given none: one device, no strategy."""
    return Placement()


class ReplicatedStep:
    """One data-parallel update whose result equals the one-device update on the whole batch.

    The batch is split along its batch axis into one contiguous shard per training replica.
    Each replica computes its loss as the mean over its shard, weighted by its share of the
    global batch (shard size / batch size): every loss of the agents is a mean over batch
    elements, so the sum of the weighted shard losses is the mean over the whole batch, and the
    all-reduced (summed) gradient is the whole batch's gradient. Clipping to a global norm then
    applies to that all-reduced gradient, as on one device, and every replica applies the same
    update to its copy of the variables. Scalar metrics (means over the batch) are combined the
    same way; per-sample outputs (R2D2's priorities) come back in batch order.

    Args:
      placement: the placement (with a strategy).
      loss_fn: ``loss_fn(*shard) -> (loss, metrics, per_sample)`` in replica context: a scalar
        loss that is a mean over the shard's batch elements, a dict of such scalar means, and
        a tuple of per-sample tensors with the batch on axis 0.
      optimizer: built under the strategy's scope with ``pre_reduced=True`` (it must not sum
        gradients again).
      variables: returns the trainable variables.
      clip_norm: global-norm clipping of the all-reduced gradient; 0 disables.
    """

    def __init__(
        self,
        placement: Placement,
        loss_fn: Callable,
        optimizer,
        variables: Callable[[], list],
        clip_norm: float,
    ):
        import tensorflow as tf

        self._placement = placement
        self._loss_fn = loss_fn
        self._optimizer = optimizer
        self._variables = variables
        self._clip_norm = float(clip_norm)
        self._gradients = tf.function(self._gradients_impl, reduce_retracing=True)
        self._apply = tf.function(self._apply_impl, reduce_retracing=True)

    def __call__(self, args: Sequence[np.ndarray], axes: Sequence[int | None]):
        """Runs the step on a whole batch.

        Args:
          args: the loss function's arguments as arrays.
          axes: the batch axis of each argument, or None for an argument every replica gets
            whole (e.g. a scalar coefficient).

        Returns:
          the metrics (dict of scalar tensors, with ``grad_norm``) and the per-sample outputs
          (tuple of arrays, whole batch).
        """
        strategy = self._placement.strategy
        n = self._placement.replicas
        sizes = {np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None}
        if len(sizes) != 1:
            raise ValueError(f"arguments disagree on the batch size: {sorted(sizes)}")
        total = sizes.pop()
        bounds = np.concatenate([[0], np.cumsum(split_sizes(total, n))])

        def shard(ctx):
            i = ctx.replica_id_in_sync_group
            share = np.float32((bounds[i + 1] - bounds[i]) / total)
            return (share,) + tuple(
                a if ax is None else np.take(a, np.arange(bounds[i], bounds[i + 1]), axis=ax)
                for a, ax in zip(args, axes)
            )

        values = strategy.experimental_distribute_values_from_function(shard)
        grads, grad_norm, metrics, per_sample = self._gradients(values)
        local = strategy.experimental_local_results
        # Every replica holds the same all-reduced norm. A non-finite one skips the update:
        # nothing changes (see seedrl.learner.optimizers.clip_and_apply).
        if np.isfinite(local(grad_norm)[0].numpy()):
            self._apply(grads, grad_norm)
        metrics = {k: local(v)[0] for k, v in metrics.items()}
        metrics["grad_norm"] = local(grad_norm)[0]
        per_sample = tuple(np.concatenate([np.asarray(p) for p in local(t)]) for t in per_sample)
        return metrics, per_sample

    def _gradients_impl(self, values):
        return self._placement.strategy.run(self._replica_gradients, args=values)

    def _apply_impl(self, grads, grad_norm):
        return self._placement.strategy.run(self._replica_apply, args=(grads, grad_norm))

    def _replica_gradients(self, share, *shard):
        """share: this shard's fraction of the batch; shard: the loss function's arguments.
        Returns the all-reduced gradients and their global norm, the metrics and the
        per-sample outputs."""
        import tensorflow as tf

        ctx = tf.distribute.get_replica_context()
        variables = self._variables()
        with tf.GradientTape() as tape:
            loss, metrics, per_sample = self._loss_fn(*shard)
            weighted = loss * share
        grads = tape.gradient(weighted, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        metrics = ctx.all_reduce(
            tf.distribute.ReduceOp.SUM,
            {k: tf.cast(v, tf.float32) * share for k, v in metrics.items()},
        )
        return grads, tf.linalg.global_norm(grads), metrics, tuple(per_sample)

    def _replica_apply(self, grads, grad_norm):
        """Clips and applies the all-reduced gradients (finite: checked by the caller)."""
        from seedrl.learner.optimizers import clip_and_apply_finite

        clip_and_apply_finite(
            self._optimizer, list(grads), self._variables(), self._clip_norm, grad_norm
        )


def split_sizes(batch: int, replicas: int) -> list[int]:
    """Shard sizes of a batch over replicas, as :class:`ReplicatedStep` splits it: contiguous,
    differing by at most one."""
    bounds = np.linspace(0, batch, replicas + 1).round().astype(int)
    return [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
