"""`seedrl cost plan`: time and cost to N frames, SEED's layout against IMPALA's.

The model, in the spirit of the cost tables of the SEED RL paper (Espeholt et al. 2019), which
compare what it costs to reach the same number of frames with inference on a central
accelerator (SEED) and with inference on each actor's CPUs (IMPALA):

1. **Measured rates, per actor vCPU.** From a throughput benchmark (``make bench-throughput``
   writes ``bench-throughput*.json``):

   - an actor vCPU that only steps environments (SEED) does ``r_seed = raw_steps_per_s /
     replicas`` env steps/s: the benchmark's random-action stepping runs one env process per
     actor, each on a core of its own;
   - an actor vCPU that steps environments *and runs the model* (IMPALA) does ``r_impala =
     baseline_sync_vector_env.steps_per_s``: one process stepping a SyncVectorEnv and running
     the same network locally, batched over its envs;
   - so the model's inference costs ``c_inf = 1 / r_impala - 1 / r_seed`` CPU-seconds per
     env step on an actor (0 if negative: for a small MLP at a large batch it is noise).

   From a run's ``summary.json`` instead (the learner's own measurement, end to end):
   ``r_seed = env_steps_per_s / replicas / actor vCPUs`` of that run; the IMPALA layout then
   needs ``c_inf`` from a benchmark file (``--inference-from``), and is skipped without one.
2. **SEED layout.** K actors of ``a`` vCPUs each step ``K a r_seed`` env steps/s (their CPUs
   only step envs; messaging is taken as free, which holds when each message carries many envs,
   see docs/benchmarks/throughput.md), optionally capped by what the learner can serve
   (``--learner-steps-per-s``). Time to N frames: ``T = N / frames_per_step / rate``.
   Cost: ``T x (learner hourly + K x actor hourly)``.
3. **IMPALA layout at the same frame rate.** Each actor vCPU now does ``r_impala =
   1 / (1 / r_seed + c_inf)`` steps/s, so reaching the same rate takes ``K_i = ceil(K r_seed /
   r_impala)`` actors of the same machine type. The learner is the same machine (it still
   trains) and runs for the same ``T``. Cost: ``T x (learner hourly + K_i x actor hourly)``.
4. Hourly prices come from the price table (:mod:`seedrl.service.cost.prices`): vCPUs, GiB
   and accelerator chips each pod requests (the pods the operator would render), Spot rates for
   Spot pods.

What it leaves out: the learner's own capacity unless given (a TPU learner serving thousands of
actors is SEED's premise, not a measurement here), the IMPALA actors' parameter downloads,
network and storage, and differences in sample efficiency between the layouts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

from seedrl.common.config import ConfigError, load_yaml, parse_experiment, read_yaml_file
from seedrl.service.cost.prices import PriceTable
from seedrl.service.cost.pricing import hourly
from seedrl.service.cost.records import Resources, rendered_machines
from seedrl.service.cost.report import format_duration


@dataclasses.dataclass(frozen=True)
class Throughput:
    """Measured env-step rates per actor vCPU.

    Attributes:
      seed_per_cpu: env steps/s one actor vCPU delivers when it only steps envs.
      inference_cpu_s: CPU-seconds per env step of running the model on an actor, or None when
        unknown (then the IMPALA layout cannot be estimated).
      source: where the figures come from, for the report.
    """

    seed_per_cpu: float
    inference_cpu_s: float | None
    source: str
    #: Whether the figures are the packaged reference rates rather than measurements of the
    #: user's own (the report says so).
    reference: bool = False

    @property
    def impala_per_cpu(self) -> float | None:
        """Env steps/s one actor vCPU delivers when it also runs the model."""
        if self.inference_cpu_s is None:
            return None
        return 1.0 / (1.0 / self.seed_per_cpu + self.inference_cpu_s)


def _fail(path: str, reason: str) -> ConfigError:
    return ConfigError([(path, reason)])


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise _fail(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _fail(path, "must hold a JSON object")
    return data


def _positive(data: Any, key: str, path: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise _fail(f"{path}: {key}", f"must be a number > 0, got {value!r}")
    return float(value)


def is_benchmark(data: dict) -> bool:
    """Whether a JSON object is a ``bench/throughput.py --json`` result."""
    return "raw_steps_per_s" in data and "baseline_sync_vector_env" in data


def benchmark_rates(data: dict, path: str = "benchmark") -> tuple[float, float]:
    """``(r_seed, c_inf)`` of a throughput benchmark: env steps/s per vCPU that only steps envs,
    and CPU-seconds per step of local inference (see the module docstring)."""
    replicas = _positive(data, "replicas", path)
    r_seed = _positive(data, "raw_steps_per_s", path) / replicas
    sync = data.get("baseline_sync_vector_env")
    if not isinstance(sync, dict):
        raise _fail(f"{path}: baseline_sync_vector_env", "must be an object with steps_per_s")
    r_impala = _positive(sync, "steps_per_s", f"{path}: baseline_sync_vector_env")
    return r_seed, max(0.0, 1.0 / r_impala - 1.0 / r_seed)


def _run_experiment(summary_path: str, fallback: Any) -> Any:
    config = os.path.join(os.path.dirname(os.path.abspath(summary_path)), "config.yaml")
    if os.path.exists(config):
        return parse_experiment(read_yaml_file(config, "Experiment"))
    return fallback


def read_throughput(path: str, plan_exp: Any, inference_from: str | None = None) -> Throughput:
    """Rates from a benchmark file or a run's ``summary.json`` (``bench-atari.json``'s
    ``summary`` too). A run's replicas and actor vCPUs come from the ``config.yaml`` beside
    its summary, else from ``plan_exp``.

    Raises:
      ConfigError: naming the file and the missing or bad figure.
    """
    data = _read_json(path)
    if is_benchmark(data):
        r_seed, c_inf = benchmark_rates(data, path)
        return Throughput(r_seed, c_inf, f"{path} (benchmark, {data.get('env', '?')})")
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else data
    rate = _positive(summary, "env_steps_per_s", path)
    run_exp = _run_experiment(path, plan_exp)
    replicas = data.get("replicas") or run_exp.spec.actors.replicas
    actor_cpu = rendered_machines(run_exp)["actor"][0].cpu
    inference_cpu_s: float | None = None
    if inference_from:
        bench = _read_json(inference_from)
        if not is_benchmark(bench):
            raise _fail(
                inference_from,
                "must be a bench/throughput.py --json result "
                "(raw_steps_per_s, baseline_sync_vector_env)",
            )
        inference_cpu_s = benchmark_rates(bench, inference_from)[1]
    return Throughput(
        rate / replicas / actor_cpu,
        inference_cpu_s,
        f"{path} (run, {replicas} actors x {actor_cpu:g} vCPU)",
    )


#: The packaged reference rates of the example environments (``service/cost/``).
REFERENCE_FILE = "reference_throughput.yaml"


@dataclasses.dataclass(frozen=True)
class ReferenceTable:
    """Env-step rates of the example environments measured on one machine (see the file).

    Attributes:
      version: names the measurement.
      measured_on: the machine and software the figures come from.
      envs: env id -> (env steps/s per vCPU stepping envs only, network name -> CPU-seconds
        per env step of running that network on an actor).
    """

    version: str
    measured_on: str
    envs: dict[str, tuple[float, dict[str, float]]]


def parse_reference(data: Any, path: str = REFERENCE_FILE) -> ReferenceTable:
    """Checks and reads a reference-throughput document.

    Raises:
      ConfigError: naming each bad field.
    """
    problems: list[tuple[str, str]] = []
    if not isinstance(data, dict):
        raise _fail(path, "must be a mapping with version, measuredOn and envs")
    for key in ("version", "measuredOn"):
        if not isinstance(data.get(key), str) or not data.get(key):
            problems.append((f"{path}: {key}", "must be a non-empty string"))
    envs: dict[str, tuple[float, dict[str, float]]] = {}
    raw_envs = data.get("envs")
    if not isinstance(raw_envs, dict) or not raw_envs:
        problems.append((f"{path}: envs", "must map env ids to their rates"))
        raw_envs = {}
    for env_id, entry in raw_envs.items():
        where = f"{path}: envs.{env_id}"
        if not isinstance(entry, dict):
            problems.append((where, "must be a mapping with stepsPerCpu"))
            continue
        steps = entry.get("stepsPerCpu")
        if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not steps > 0:
            problems.append((f"{where}.stepsPerCpu", f"must be a number > 0, got {steps!r}"))
        costs = entry.get("inferenceCpuSeconds") or {}
        if not isinstance(costs, dict):
            problems.append(
                (
                    f"{where}.inferenceCpuSeconds",
                    "must map network names to CPU-seconds per env step",
                )
            )
            costs = {}
        for network, value in costs.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                problems.append(
                    (
                        f"{where}.inferenceCpuSeconds.{network}",
                        f"must be a number >= 0, got {value!r}",
                    )
                )
        envs[str(env_id)] = (
            float(steps) if isinstance(steps, (int, float)) else 0.0,
            {
                str(k): float(v)
                for k, v in costs.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            },
        )
    if problems:
        raise ConfigError(problems)
    return ReferenceTable(data["version"], data["measuredOn"], envs)


def load_reference() -> ReferenceTable:
    """The packaged reference table."""
    from importlib import resources

    text = resources.files("seedrl.service.cost").joinpath(REFERENCE_FILE).read_text("utf-8")
    where = f"service/cost/{REFERENCE_FILE}"
    return parse_reference(load_yaml(text, where), where)


def reference_throughput(exp: Any, table: ReferenceTable | None = None) -> Throughput | None:
    """The reference rates of the Experiment's env (and of its network's inference, when the
    table has that network), or None when the table does not cover the env."""
    table = table or load_reference()
    env_id = exp.spec.env.id
    if env_id not in table.envs:
        return None
    steps, costs = table.envs[env_id]
    network = exp.spec.agent.network.name
    return Throughput(
        steps,
        costs.get(network),
        f"reference figures for {env_id}"
        + (f" and {network}" if network in costs else "")
        + f", measured on {table.measured_on} ({table.version}), not on your "
        f"machines; pass --throughput with a benchmark or run summary of "
        f"your own",
        reference=True,
    )


@dataclasses.dataclass(frozen=True)
class LayoutPlan:
    """One layout's estimate."""

    layout: str
    actors: int
    steps_per_s: float
    frames_per_s: float
    seconds: float
    learner_usd: float
    actors_usd: float

    @property
    def total_usd(self) -> float:
        """Learner plus actors."""
        return self.learner_usd + self.actors_usd


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's answer: SEED's layout and, when the inference cost is known, IMPALA's."""

    frames: int
    seed: LayoutPlan
    impala: LayoutPlan | None
    throughput: Throughput
    learner: str
    actor: str
    price_table: str

    @property
    def seed_saving(self) -> float | None:
        """Fraction of the IMPALA layout's cost that SEED's saves (negative: SEED costs more)."""
        if self.impala is None or self.impala.total_usd == 0:
            return None
        return 1.0 - self.seed.total_usd / self.impala.total_usd


def plan(
    frames: int,
    frames_per_step: int,
    replicas: int,
    learner: tuple[Resources, bool],
    actor: tuple[Resources, bool],
    throughput: Throughput,
    prices: PriceTable,
    learner_steps_per_s: float | None = None,
) -> Plan:
    """Estimates time and cost to ``frames`` env frames (see the module docstring).

    Args:
      frames: env frames to train (emulator frames for Atari).
      frames_per_step: frames per env step (Atari's frame skip, else 1).
      replicas: actors in the SEED layout.
      learner, actor: each pod's requests and whether it runs on Spot.
      throughput: measured rates.
      prices: the price table.
      learner_steps_per_s: the most env steps/s the learner serves, if known.

    Raises:
      ConfigError: no actor CPUs to step envs with.
      KeyError: an accelerator the price table does not price.
    """
    learner_hourly = hourly(*learner, prices)
    actor_hourly = hourly(*actor, prices)
    cpu = actor[0].cpu
    if cpu <= 0 or replicas < 1:
        raise ConfigError(
            [
                (
                    "spec.actors",
                    f"planning needs at least one actor with CPUs, got "
                    f"{replicas} actors of {cpu:g} vCPU",
                )
            ]
        )
    steps = frames / frames_per_step
    rate = replicas * cpu * throughput.seed_per_cpu
    if learner_steps_per_s:
        rate = min(rate, learner_steps_per_s)
    seconds = steps / rate
    hours = seconds / 3600.0
    seed = LayoutPlan(
        "SEED (inference on the learner)",
        replicas,
        rate,
        rate * frames_per_step,
        seconds,
        hours * learner_hourly,
        hours * replicas * actor_hourly,
    )
    impala = None
    if throughput.impala_per_cpu is not None:
        impala_actors = math.ceil(rate / (cpu * throughput.impala_per_cpu) - 1e-9)
        impala = LayoutPlan(
            "IMPALA (inference on the actors)",
            impala_actors,
            rate,
            rate * frames_per_step,
            seconds,
            hours * learner_hourly,
            hours * impala_actors * actor_hourly,
        )
    return Plan(
        frames=frames,
        seed=seed,
        impala=impala,
        throughput=throughput,
        learner=learner[0].describe() + (" spot" if learner[1] else ""),
        actor=actor[0].describe() + (" spot" if actor[1] else ""),
        price_table=prices.version,
    )


def format_plan(p: Plan) -> str:
    """The planner's table and verdict."""
    t = p.throughput
    lines = [
        f"plan: {p.frames:,} env frames; learner {p.learner}; actors {p.actor}",
        f"{'reference' if t.reference else 'measured'}: {t.seed_per_cpu:,.0f} env "
        f"steps/s per actor vCPU stepping envs only"
        + (
            ""
            if t.inference_cpu_s is None
            else f", inference on an actor {t.inference_cpu_s * 1e3:.4f} ms CPU per step "
            f"({t.impala_per_cpu:,.0f} steps/s per vCPU)"
        )
        + f" [{t.source}]",
        f"{'layout':<34} {'actors':>6} {'frames/s':>10} {'time':>10} {'learner $':>11} "
        f"{'actors $':>11} {'total $':>11} {'$/1M frames':>12}",
    ]
    for row in (p.seed, p.impala):
        if row is None:
            continue
        lines.append(
            f"{row.layout:<34} {row.actors:>6} {row.frames_per_s:>10,.0f} "
            f"{format_duration(row.seconds):>10} {row.learner_usd:>11,.4f} "
            f"{row.actors_usd:>11,.4f} {row.total_usd:>11,.4f} "
            f"{row.total_usd / (p.frames / 1e6):>12,.4f}"
        )
    saving = p.seed_saving
    if saving is None:
        lines.append(
            "IMPALA comparison: needs the model's inference cost; pass a benchmark "
            "file (make bench-throughput) as --throughput or --inference-from"
        )
    elif saving >= 0:
        lines.append(
            f"SEED's layout is {saving * 100:.1f}% cheaper than IMPALA's for the same frames"
        )
    else:
        lines.append(
            f"IMPALA's layout is {-saving / (1 - saving) * 100:.1f}% cheaper than "
            f"SEED's for the same frames (local inference of this model is cheap)"
        )
    lines.append(f"prices: {p.price_table}")
    return "\n".join(lines)
