"""Learner steps/s against the number of training devices (logical CPU devices on this machine).

    python bench/devices.py                      # 1, 2, 4 training devices, 10 s each
    python bench/devices.py --devices 1 2 4 8 --seconds 20 --batch-size 64 --json out.json

Each count runs in its own process (one distribution strategy per process, and logical devices
are fixed when TensorFlow starts): 1 is the learner's one-device path, n > 1 is
MirroredStrategy over n logical CPU devices, each replica taking 1/n of every batch; a row of
MirroredStrategy on one device separates the strategy's own cost from the split's. The agent
(V-trace by default) trains on one fixed random batch of CartPole-shaped unrolls, so only the
training step is measured. Steps/s are reported beside the ratio to 1 device, from one run.

Logical CPU devices share the same cores: on a 2-core machine they show what the split and the
all-reduce cost, not a speed-up; on GPUs or TPU cores the same code path runs on real devices.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from seedrl.common import finite_json  # noqa: E402
from seedrl.common.hardware import machine_facts  # noqa: E402


def _worker(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    from seedrl.common.config import DevicesConfig, parse_experiment
    from seedrl.common.wire import EnvSpec
    from seedrl.learner import devices
    from seedrl.learner.agents import build_agent

    n = args.worker
    mirrored = n > 1 or args.mirrored
    config = DevicesConfig(
        logical_cpu_devices=n if n > 1 else 0,
        training_devices=n if mirrored else 0,
        strategy="mirrored" if mirrored else "default",
    )
    placement = devices.setup(config)
    hidden = [int(h) for h in args.hidden.split(",")]
    exp = parse_experiment(
        {
            "metadata": {"name": "bench-devices"},
            "spec": {
                "agent": {
                    "name": args.agent,
                    "network": {"hiddenSizes": hidden, "lstmSize": args.lstm},
                },
                "learner": {"unrollLength": args.unroll, "batchSize": args.batch_size},
            },
        }
    )
    spec = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2)
    agent = build_agent(exp, spec, placement)
    rng = np.random.default_rng(0)
    t, b = args.unroll + 1, args.batch_size
    batch = {
        "observation": rng.normal(size=(t, b, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=(t, b)).astype(np.int32),
        "reward": rng.normal(size=(t, b)).astype(np.float32),
        "terminated": rng.random((t, b)) < 0.02,
        "truncated": np.zeros((t, b), bool),
        "policy_params": np.zeros((t, b, 2), np.float32),
        "policy_version": np.zeros((t, b), np.int64),
        "initial_state": [np.zeros((b, args.lstm), np.float32)] * 2 if args.lstm else [],
    }
    for _ in range(3):  # tracing and warm-up
        agent.train(batch)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        agent.train(batch)
        steps += 1
    elapsed = time.perf_counter() - start
    return {
        "devices": n,
        "replicas": placement.replicas,
        "strategy": placement.plan.strategy,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
    }


def main(argv=None) -> int:
    """Runs the bench; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--devices",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="training device counts to measure (1 is the one-device path)",
    )
    p.add_argument("--seconds", type=float, default=10.0, help="measured time per count")
    p.add_argument("--agent", default="vtrace", choices=("vtrace", "ppo"))
    p.add_argument("--batch-size", type=int, default=32, help="unrolls per training step")
    p.add_argument("--unroll", type=int, default=20, help="unroll length T")
    p.add_argument("--hidden", default="256,256", help="MLP hidden sizes")
    p.add_argument("--lstm", type=int, default=0, help="LSTM size (0: none)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument(
        "--no-mirrored-1",
        dest="mirrored_1",
        action="store_false",
        help="skip MirroredStrategy on one device (the strategy's own overhead)",
    )
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mirrored", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        print(finite_json.dumps(_worker(args)))
        return 0
    if 1 not in args.devices:
        args.devices = [1] + args.devices
    runs = [(n, False) for n in args.devices]
    if args.mirrored_1:
        runs.insert(runs.index((1, False)) + 1, (1, True))
    rows = []
    for n, mirrored in runs:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            str(n),
            *(["--mirrored"] if mirrored else []),
            "--seconds",
            str(args.seconds),
            "--agent",
            args.agent,
            "--batch-size",
            str(args.batch_size),
            "--unroll",
            str(args.unroll),
            "--hidden",
            args.hidden,
            "--lstm",
            str(args.lstm),
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}
        )
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = next(r["steps_per_s"] for r in rows if r["devices"] == 1 and r["strategy"] == "default")
    print(
        f"{args.agent}, batch {args.batch_size} x T={args.unroll}, MLP {args.hidden}"
        f"{f', LSTM {args.lstm}' if args.lstm else ''}; {os.cpu_count()} CPU cores"
    )
    print(f"{'devices':>8} {'strategy':>9} {'steps/s':>9} {'vs 1':>6}")
    for r in rows:
        r["ratio_to_1"] = r["steps_per_s"] / base
        print(
            f"{r['devices']:>8} {r['strategy']:>9} {r['steps_per_s']:>9.1f} {r['ratio_to_1']:>6.2f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump(
                {
                    "agent": args.agent,
                    "batch_size": args.batch_size,
                    "unroll_length": args.unroll,
                    "hidden": args.hidden,
                    "lstm": args.lstm,
                    "cpu_cores": os.cpu_count(),
                    "machine": machine_facts(),
                    "results": rows,
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
