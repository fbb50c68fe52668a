"""Many actor streams against one learner: env steps/s, inference batch size, step latency.

    python bench/streams.py                       # the scaling table: 1..32 streams
    python bench/streams.py --streams 1000 --envs-per-stream 1 --seconds 20   # scale simulation

One learner process serves inference only (no training) for a cheap built-in env (CartPole);
one load process runs every stream as a real ActorClient stepping real envs in one event loop.
For each stream count it reports env steps/s, the learner's mean inference batch, p50 and p99
of the per-step round trip seen by the actors, the learner's CPU time per message (user +
system time of the learner process over the window, every thread included, divided by the Step
messages it received) and whether any stream failed or reconnected.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


from seedrl.common import finite_json  # noqa: E402
from seedrl.common.hardware import machine_facts  # noqa: E402

EXPERIMENT = """\
apiVersion: seedrl.dev/v1alpha1
kind: Experiment
metadata: {{name: bench-streams}}
spec:
  env: {{id: {env_id}}}
  learner: {{inferenceBatchSize: {batch}, inferenceMaxWaitMs: {wait_ms}}}
  budget: {{maxEnvSteps: 0, maxSeconds: 0}}
"""


def _load(
    address: str,
    env_id: str,
    streams: int,
    envs_per_stream: int,
    warmup: float,
    seconds: float,
    out,
) -> None:
    """Runs ``streams`` actor clients in one event loop and reports what they saw."""
    import asyncio

    from seedrl.actors.client import ActorClient, Backoff
    from seedrl.actors.envs import EnvBatch
    from seedrl.common.config import EnvConfig

    import logging

    logging.basicConfig(level=logging.ERROR)
    cfg = EnvConfig(id=env_id)
    clients = [
        ActorClient(
            EnvBatch(
                cfg, envs_per_stream, list(range(i * envs_per_stream, (i + 1) * envs_per_stream))
            ),
            "bench-streams",
            f"load-{i}",
            address,
            backoff=Backoff(0.05, 1.0),
        )
        for i in range(streams)
    ]

    import gc

    gc.freeze()  # as the actors' main does: no full collections walking the clients

    async def main():
        tasks = [asyncio.ensure_future(c.run()) for c in clients]
        deadline = time.monotonic() + 120
        while min(c.connections for c in clients) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        connected = sum(c.connections >= 1 for c in clients)
        await asyncio.sleep(warmup)
        out.put(("window_start", time.time()))
        for c in clients:
            c.latencies.clear()
        steps0 = sum(c.env_steps for c in clients)
        t0 = time.monotonic()
        cpu0 = time.process_time()
        await asyncio.sleep(seconds)
        cpu = time.process_time() - cpu0
        steps = sum(c.env_steps for c in clients) - steps0
        elapsed = time.monotonic() - t0
        out.put(("window_end", time.time()))
        lat = np.concatenate([np.fromiter(c.latencies, float) for c in clients]) * 1000.0
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "streams": streams,
            "envs_per_stream": envs_per_stream,
            "connected": connected,
            "steps_per_s": steps / elapsed,
            "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
            "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
            "percentiles_ms": {
                str(q): float(np.percentile(lat, q)) for q in (1, 10, 25, 50, 75, 90, 95, 99, 99.9)
            }
            if len(lat)
            else None,
            # The actors' own cost: every stream of this process, per message it sent.
            "load_cpu_ms_per_message": cpu * 1000.0 * envs_per_stream / steps if steps else None,
            "failed_streams": len(failed),
            "reconnects": sum(max(0, c.connections - 1) for c in clients),
        }

    out.put(("result", asyncio.run(main())))
    for c in clients:
        c.envs.close()


def _read_status(run_dir: str) -> dict:
    for _ in range(50):
        try:
            with open(os.path.join(run_dir, "status.json"), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            time.sleep(0.1)
    return {}


def _wait_for_status_after(run_dir: str, moment: float, pid: int | None = None) -> dict:
    """The first status snapshot written after ``moment`` (epoch seconds); with ``pid``, the
    CPU seconds that process had used when the snapshot was read, as ``cpu_s``."""
    deadline = time.monotonic() + 10
    status = _read_status(run_dir)
    while status.get("time", 0) < moment and time.monotonic() < deadline:
        time.sleep(0.02)
        status = _read_status(run_dir)
    if pid is not None:
        status["cpu_s"] = process_cpu_seconds(pid)
    return status


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    address: str,
    run_dir: str,
    env_id: str,
    streams: int,
    envs_per_stream: int,
    warmup: float,
    seconds: float,
    learner_pid: int | None = None,
) -> dict:
    """One load run against the running learner; adds the learner's mean inference batch and,
    given its pid, its CPU milliseconds per Step message."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(
        target=_load, args=(address, env_id, streams, envs_per_stream, warmup, seconds, out)
    )
    proc.start()
    snapshots = {}
    while True:
        kind, value = out.get(timeout=300 + warmup + seconds)
        if kind == "result":
            result = value
            break
        # Read the learner's counters as the window opens and closes, not afterwards.
        snapshots[kind] = _wait_for_status_after(run_dir, value, learner_pid)
    proc.join(60)
    start, end = snapshots["window_start"], snapshots["window_end"]
    batches = end.get("inference_batches", 0) - start.get("inference_batches", 0)
    items = end.get("inference_steps", 0) - start.get("inference_steps", 0)
    result["mean_inference_batch"] = items / batches if batches else None
    result["learner_actors_at_end"] = end.get("actors")
    messages = end.get("messages", 0) - start.get("messages", 0)
    result["learner_cpu_ms_per_message"] = (
        (end["cpu_s"] - start["cpu_s"]) * 1000.0 / messages
        if learner_pid is not None and messages
        else None
    )
    return result


class Learner:
    """A learner process serving inference only, for the load runs."""

    def __init__(self, env_id: str, batch: int, wait_ms: float):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = os.path.join(self.tmp.name, "run")
        config = os.path.join(self.tmp.name, "experiment.yaml")
        with open(config, "w", encoding="utf-8") as fh:
            fh.write(EXPERIMENT.format(env_id=env_id, batch=batch, wait_ms=wait_ms))
        self.address = f"unix:{self.tmp.name}/learner.sock"
        self.log = open(os.path.join(self.tmp.name, "learner.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "seedrl.learner",
                "--config",
                config,
                "--run-dir",
                self.run_dir,
                "--listen",
                self.address,
                "--no-train",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Waits until the learner writes its first status (it is serving by then)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(self.run_dir, "status.json")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"learner did not start; see {self.log.name}")
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.tmp.cleanup()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--envs-per-stream", type=int, default=16)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--batch", type=int, default=1024, help="learner inferenceBatchSize")
    p.add_argument("--wait-ms", type=float, default=2.0, help="learner inferenceMaxWaitMs")
    p.add_argument("--seconds", type=float, default=8.0, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    learner = Learner(args.env, args.batch, args.wait_ms)
    rows = []
    try:
        learner.wait_ready()
        print(
            f"{args.env}, {args.envs_per_stream} envs per stream, learner batch "
            f"{args.batch}, wait {args.wait_ms} ms, inference only, {os.cpu_count()} cores"
        )
        print(
            f"{'streams':>7} {'env steps/s':>12} {'mean batch':>11} {'p50 ms':>8} "
            f"{'p99 ms':>8} {'cpu ms/msg':>10} {'failed':>7} {'reconnects':>10}",
            flush=True,
        )
        for n in args.streams:
            r = measure(
                learner.address,
                learner.run_dir,
                args.env,
                n,
                args.envs_per_stream,
                args.warmup,
                args.seconds,
                learner.proc.pid,
            )
            rows.append(r)
            batch = "-" if r["mean_inference_batch"] is None else f"{r['mean_inference_batch']:.1f}"
            cpu = (
                "-"
                if r["learner_cpu_ms_per_message"] is None
                else f"{r['learner_cpu_ms_per_message']:.3f}"
            )
            print(
                f"{n:>7} {r['steps_per_s']:>12,.0f} {batch:>11} {r['p50_ms']:>8.2f} "
                f"{r['p99_ms']:>8.2f} {cpu:>10} {r['failed_streams']:>7} "
                f"{r['reconnects']:>10}",
                flush=True,
            )
    finally:
        learner.close()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump({"machine": machine_facts(), "rows": rows}, fh, indent=1)
    bad = [
        r for r in rows if r["failed_streams"] or r["reconnects"] or r["connected"] != r["streams"]
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
