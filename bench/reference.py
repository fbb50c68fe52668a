"""Measures the reference throughputs that `seedrl cost plan` falls back on, per example env.

    python bench/reference.py [--seconds 10] [--write service/cost/reference_throughput.yaml]

For each example Experiment: the env steps per CPU-second of one process stepping the
example's envs with random actions (what one actor vCPU does in SEED's layout), and of one
process stepping them with actions from the example's network run locally, batched over its
envs (IMPALA's layout); the difference is the network's inference cost per env step on an
actor's CPU. Rates are taken per CPU-second of the process (all its threads), so a busy machine
slows the measurement down more than it skews it. Without ``--write`` it prints the YAML.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import queue
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from seedrl.common.config import load_experiment  # noqa: E402
from seedrl.common.hardware import read_cpu  # noqa: E402

#: The examples measured: one per environment, with the network its example trains.
EXAMPLES = [
    "cartpole-vtrace.yaml",
    "pong-vtrace.yaml",
    "halfcheetah-ppo.yaml",
    "pendulum-ppo.yaml",
    "football-vtrace.yaml",
]

HEADER = """\
# Reference env-step rates of the example environments, for `seedrl cost plan` when the user
# has no measurement of their own (a --throughput file, or a run's summary.json). Written by
# `python bench/reference.py --write` (one process per measurement, random actions):
#   stepsPerCpu: env steps per CPU-second of one process stepping the example's envs (one
#     actor vCPU in SEED's layout);
#   inferenceCpuSeconds: per network, CPU-seconds per env step of running the example's network
#     on an actor, batched over its envs (1 / IMPALA-layout rate - 1 / stepsPerCpu).
# Figures from another machine: the planner labels them as reference, not as measurements.
"""


def _worker(kind: str, exp, seconds: float, out) -> None:
    """Steps the example's envs for ``seconds`` (``kind`` raw: random actions; local: actions
    from the example's network run in this process, batched over the envs) and reports env
    steps per CPU-second of this process, every thread counted."""
    import numpy as np

    from seedrl.actors.envs import EnvBatch

    k = exp.spec.actors.envs_per_actor
    try:
        envs = EnvBatch(exp.spec.env, k, seeds=list(range(k)))
    except ValueError as exc:
        out.put(str(exc))
        return
    obs = envs.reset()
    spec = envs.spec
    if kind == "raw":
        space = envs.envs[0].action_space
        rng = np.random.default_rng(0)

        def act(_):
            if spec.discrete:
                return rng.integers(0, spec.num_actions, size=k, dtype=np.int32)
            return rng.uniform(space.low, space.high, (k,) + spec.action_shape).astype(np.float32)
    else:
        import tensorflow as tf

        from seedrl.learner import distributions
        from seedrl.learner.networks import make_actor_critic

        # The very network the learner would build for this Experiment.
        net = make_actor_critic(exp.spec.agent.network, spec, distributions.for_env(spec))
        dist = net.distribution
        seeds = tf.random.Generator.from_seed(0)

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, *spec.observation_shape], tf.as_dtype(spec.observation_dtype))
            ]
        )
        def policy(o):
            params, _ = net(o)
            return dist.sample(params, seeds.make_seeds(1)[:, 0])

        def act(o):
            # Continuous actions are sampled in [-1, 1] and mapped onto the env's bounds.
            return spec.to_env_actions(policy(o).numpy())

    for _ in range(5):  # warm up (and trace)
        obs = envs.step(act(obs))[0]
    steps, wall, cpu = 0, time.monotonic(), time.process_time()
    while time.monotonic() - wall < seconds:
        obs = envs.step(act(obs))[0]
        steps += k
    out.put(steps / (time.process_time() - cpu))
    envs.close()


def steps_per_cpu_second(kind: str, exp, seconds: float) -> float:
    """What :func:`_worker` reports, from a process of its own."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(kind, exp, seconds, out))
    proc.start()
    # A worker that dies (an import error, a crash in the env) puts nothing: poll for its exit
    # instead of waiting out the whole timeout.
    deadline = time.monotonic() + seconds + 300
    while True:
        try:
            rate = out.get(timeout=1.0)
            break
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(
                    f"the {kind} worker exited with code {proc.exitcode} without a measurement"
                ) from None
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the {kind} worker measured nothing in time") from None
    proc.join()
    if isinstance(rate, str):
        raise ValueError(rate)
    return rate


def measure(path: str, seconds: float) -> tuple[str, str, float, float]:
    """(env id, network, env steps per vCPU-second, inference CPU-seconds per step) of one
    example. Rates are per CPU-second, not per wall second, so that other work on the machine
    slows the measurement without skewing it much."""
    exp = load_experiment(path)
    raw = steps_per_cpu_second("raw", exp, seconds)
    local = steps_per_cpu_second("local", exp, seconds)
    return exp.spec.env.id, exp.spec.agent.network.name, raw, max(0.0, 1 / local - 1 / raw)


def machine() -> str:
    """This machine in a few words: CPU model and flags, vCPUs, software."""
    import tensorflow as tf

    return (
        f"{os.cpu_count()} vCPU {read_cpu().describe()}, Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__}"
    )


def render(rows, note: str) -> str:
    """The YAML document of the measured rows."""
    import yaml

    today = datetime.date.today().isoformat()
    envs = {}
    for env_id, network, raw, inference in rows:
        entry = envs.setdefault(env_id, {"stepsPerCpu": round(raw, 1), "inferenceCpuSeconds": {}})
        entry["inferenceCpuSeconds"][network] = float(f"{inference:.3g}")
    doc = {
        "version": f"reference-{today}",
        "measuredOn": f"{machine()}, {today}" + (f" ({note})" if note else ""),
        "envs": envs,
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per rate")
    p.add_argument("--examples", nargs="+", default=EXAMPLES)
    p.add_argument("--note", default="", help="said of the machine, e.g. 'shared with other jobs'")
    p.add_argument("--write", help="write the YAML here instead of printing it")
    args = p.parse_args(argv)
    rows = []
    for name in args.examples:
        try:
            row = measure(os.path.join(ROOT, "examples", name), args.seconds)
        except (ValueError, RuntimeError) as exc:  # e.g. gfootball not installed
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        print(
            f"{row[0]} ({row[1]}): {row[2]:,.0f} env steps/s per vCPU, inference "
            f"{row[3] * 1e3:.4f} ms CPU per step",
            file=sys.stderr,
            flush=True,
        )
        rows.append(row)
    text = render(rows, args.note)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
