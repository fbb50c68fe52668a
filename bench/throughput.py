"""End-to-end env steps/s beside raw env steps/s and naive baselines, measured in one run.

    python bench/throughput.py [--config FILE] [--seconds 20] [--json out.json]
                               [--compare PATH=VALUE ...]

Raw: the same number of actor processes, each stepping the same K envs with random actions, no
gRPC and no model. End to end: `seedrl train`'s learner and actors, once with inference only and
once with training on; the rate is taken from the learner's metrics log after a warm-up.
Baselines: one process running the same TensorFlow model locally on every step of a gymnasium
AsyncVectorEnv with one env per env process of the run, and of a SyncVectorEnv holding as many
envs as the whole run (the strongest naive setup: batched local inference, no gRPC).

``--compare`` measures training once more with those overrides beside the config's own
(``--compare spec.agent.network.precision=float32``: the shipped precision against float32 on
this machine) and reports the ratio. A training window in which the learner made no step has
no training rate: the run fails, saying so, rather than print a ratio. The JSON names the
precision the learner chose and why, and the machine (CPU model and flags, cores, load).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time

from seedrl.common import finite_json
from seedrl.common.config import load_experiment
from seedrl.common.hardware import machine_facts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raw_worker(env_cfg, num_envs, seconds, index, out):
    import numpy as np

    from seedrl.actors.envs import EnvBatch

    envs = EnvBatch(env_cfg, num_envs, seeds=list(range(index * num_envs, (index + 1) * num_envs)))
    envs.reset()
    rng = np.random.default_rng(index)
    n = envs.spec.num_actions
    steps, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        envs.step(rng.integers(0, n, size=num_envs, dtype=np.int32))
        steps += num_envs
    out.put(steps / (time.monotonic() - start))


def raw_steps_per_second(exp, seconds: float) -> float:
    """Random-action env steps/s summed over as many processes as the run steps envs in.

    That is ``replicas`` actor processes, or ``replicas x processesPerActor`` worker processes
    when the actors step their envs in workers; the run's envs are split evenly over them.
    """
    a = exp.spec.actors
    processes = a.replicas * max(1, a.processes_per_actor)
    per_process = max(1, a.replicas * a.envs_per_actor // processes)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(exp.spec.env, per_process, seconds, i, out))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def _baseline_worker(exp, vector: str, num_envs: int, seconds: float, out) -> None:
    import gymnasium as gym
    import tensorflow as tf

    from seedrl.actors.envs import make_env, spec_of
    from seedrl.learner import distributions
    from seedrl.learner.networks import make_actor_critic

    make = [lambda: make_env(exp.spec.env)] * num_envs
    envs = gym.vector.AsyncVectorEnv(make) if vector == "async" else gym.vector.SyncVectorEnv(make)
    probe = make_env(exp.spec.env)
    spec = spec_of(probe, exp.spec.env.id)
    probe.close()
    obs, _ = envs.reset(seed=0)
    # The very network the learner would build for this Experiment.
    net = make_actor_critic(exp.spec.agent.network, spec, distributions.for_env(spec))
    dist = net.distribution
    rng = tf.random.Generator.from_seed(0)

    @tf.function(input_signature=[tf.TensorSpec([None, *obs.shape[1:]], obs.dtype)])
    def act(o):
        params, _ = net(o)
        return dist.sample(params, rng.make_seeds(1)[:, 0])

    for _ in range(10):  # trace and warm up
        act(obs)
    steps, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        obs, *_ = envs.step(act(obs).numpy())
        steps += num_envs
    out.put(steps / (time.monotonic() - start))
    envs.close()


def baseline_steps_per_second(exp, vector: str, num_envs: int, seconds: float) -> float:
    """A naive single process: a gymnasium vector env and the same model run locally."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_baseline_worker, args=(exp, vector, num_envs, seconds, out))
    proc.start()
    deadline = time.monotonic() + seconds + 300
    while True:
        try:
            rate = out.get(timeout=1.0)
            break
        except queue.Empty:
            if not proc.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {vector} baseline failed (exit code {proc.exitcode})"
                ) from None
    proc.join()
    return rate


def end_to_end_steps_per_second(
    config: str, overrides: list[str], seconds: float, warmup: float, train: bool
) -> dict:
    """Runs learner + actors for ``warmup + seconds`` and measures the steady rate."""
    from seedrl.service.local.launcher import LocalRun, prepare_run_dir

    exp = load_experiment(
        config,
        [
            *overrides,
            "spec.budget.maxEnvSteps=0",
            "spec.budget.targetReturn=null",
            f"spec.budget.maxSeconds={warmup + seconds}",
            "spec.learner.optimizer.linearDecay=false",
        ],
    )
    with tempfile.TemporaryDirectory() as runs:
        run_dir = prepare_run_dir(exp, runs, resume=False).path
        summary = LocalRun(exp, run_dir, learner_args=() if train else ("--no-train",)).run()
        if summary.get("stop_reason") != "max_seconds":
            with open(os.path.join(run_dir, "learner.log"), encoding="utf-8") as fh:
                raise RuntimeError(f"run failed: {summary}\n{fh.read()[-3000:]}")
        with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
    return {**window_rate(rows, warmup, train), "precision": summary.get("precision")}


class NoLearnerStep(RuntimeError):
    """The learner made no step in a training window: there is no training rate to report."""


def window_rate(rows: list[dict], warmup: float, train: bool) -> dict:
    """The steady rate of a run from its ``metrics.jsonl`` rows, after ``warmup`` seconds.

    Raises:
      RuntimeError: fewer than two rows in the window.
      NoLearnerStep: ``train`` and the learner made no step within the window: its env steps
        then measure acting on an untrained policy, not training.
    """
    steady = [r for r in rows if r["elapsed"] >= warmup and r["state"] == "running"]
    if len(steady) < 2:
        raise RuntimeError("run too short to measure; raise --seconds")
    first, last = steady[0], steady[-1]
    seconds = last["elapsed"] - first["elapsed"]
    steps = last["learner_steps"] - first["learner_steps"]
    if train and steps <= 0:
        raise NoLearnerStep(
            f"the learner made no step in the measured window ({seconds:.0f} s after "
            f"{warmup:.0f} s of warm-up, {last['learner_steps']} steps in all): no training "
            f"rate to report. Is its arithmetic emulated here (the run's precision)? Raise "
            f"--warmup/--seconds if it is only slow to start."
        )
    return {
        "steps_per_s": (last["env_steps"] - first["env_steps"]) / seconds,
        "mean_inference_batch": last["mean_inference_batch"],
        "learner_steps": last["learner_steps"],
        "learner_steps_in_window": steps,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(ROOT, "examples", "cartpole-vtrace.yaml"))
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per mode")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds skipped at the start")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override an Experiment field (repeatable)",
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="measure training again with this override too, beside the config's own "
        "(repeatable), e.g. spec.agent.network.precision=float32",
    )
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    try:
        return run(args)
    except NoLearnerStep as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def run(args) -> int:
    """Measures every mode and prints (and writes) the figures."""
    exp = load_experiment(args.config, args.overrides)
    a = exp.spec.actors
    machine = machine_facts()
    print(
        f"{exp.spec.env.id}: {a.replicas} actor processes x {a.envs_per_actor} envs, "
        f"{args.seconds:.0f} s per mode on {machine['cores']} cores of {machine['cpu']}, "
        f"load {machine['load_average'][0]:.2f}",
        flush=True,
    )
    env_processes = a.replicas * max(1, a.processes_per_actor)
    total_envs = a.replicas * a.envs_per_actor
    raw = raw_steps_per_second(exp, args.seconds)
    infer = end_to_end_steps_per_second(
        args.config, args.overrides, args.seconds, args.warmup, train=False
    )
    train = end_to_end_steps_per_second(
        args.config, args.overrides, args.seconds, args.warmup, train=True
    )
    compared = (
        end_to_end_steps_per_second(
            args.config, [*args.overrides, *args.compare], args.seconds, args.warmup, train=True
        )
        if args.compare
        else None
    )
    async_base = baseline_steps_per_second(exp, "async", env_processes, args.seconds)
    sync_base = baseline_steps_per_second(exp, "sync", total_envs, args.seconds)
    rows = [
        ("raw env steps (random actions, no learner)", raw, None),
        ("end to end, inference only", infer["steps_per_s"], infer["mean_inference_batch"]),
        ("end to end, training on", train["steps_per_s"], train["mean_inference_batch"]),
        (
            f"baseline: AsyncVectorEnv({env_processes}) + local model",
            async_base,
            float(env_processes),
        ),
        (f"baseline: SyncVectorEnv({total_envs}) + local model", sync_base, float(total_envs)),
    ]
    if compared is not None:
        rows.insert(
            3,
            (
                "end to end, training on, --compare",
                compared["steps_per_s"],
                compared["mean_inference_batch"],
            ),
        )
    print(f"{'mode':<44} {'env steps/s':>12} {'vs raw':>7} {'mean batch':>11}")
    for name, rate, batch in rows:
        batch_text = "-" if batch is None else f"{batch:.1f}"
        print(f"{name:<44} {rate:>12,.0f} {rate / raw:>7.2f} {batch_text:>11}")
    for label, mode in (("training", train), ("compared", compared)):
        if mode is not None and mode["precision"]:
            print(f"{label}: {mode['precision']['precision']} ({mode['precision']['reason']})")
    comparison = None
    if compared is not None:
        comparison = {
            "overrides": args.compare,
            "training": compared,
            "ratio_training_to_compared": train["steps_per_s"] / compared["steps_per_s"],
        }
        print(
            f"training / training with {' '.join(args.compare)}: "
            f"{comparison['ratio_training_to_compared']:.2f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump(
                {
                    "machine": machine,
                    "config": args.config,
                    "overrides": args.overrides,
                    "precision": train["precision"],
                    "env": exp.spec.env.id,
                    "replicas": a.replicas,
                    "envs_per_actor": a.envs_per_actor,
                    "raw_steps_per_s": raw,
                    "inference_only": infer,
                    "training": train,
                    "baseline_async_vector_env": {
                        "num_envs": env_processes,
                        "steps_per_s": async_base,
                    },
                    "baseline_sync_vector_env": {"num_envs": total_envs, "steps_per_s": sync_base},
                    "ratio_inference_only": infer["steps_per_s"] / raw,
                    "ratio_training": train["steps_per_s"] / raw,
                    "ratio_inference_only_to_best_baseline": infer["steps_per_s"]
                    / max(async_base, sync_base),
                    **({"compare": comparison} if comparison else {}),
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
