"""The Pong V-trace example with many actors against a learner on the GPU, then on the CPU, as JSON.

    python bench/gpu.py [--actors 16] [--seconds 60] [--warmup 30] [--modes gpu cpu]
                        [--set PATH=VALUE ...] [--json bench-gpu.json]

Each mode runs ``examples/pong-vtrace.yaml`` (its own training: 4 epochs x 4 minibatches per
batch) with ``--actors`` actor processes through ``seedrl train``'s launcher for ``warmup +
seconds`` and reports, over the last ``seconds``:

- end-to-end frames/s and env steps/s (frames are agent steps x the frame skip of 4);
- learner updates/s (gradient steps);
- the inference batch (env steps per call, from the learner's counters) and the inference
  latency (mean, p50, p99 of one batched call, from its ``/metrics`` histogram), and the actors'
  round trip (send a step, receive its actions);
- GPU utilisation and memory (``nvidia-smi``, sampled each second), or null without one.

``gpu`` runs the learner as the machine is (TensorFlow uses the GPU it finds; the learner's log
line ``devices: ...`` is in the JSON); ``cpu`` hides every GPU from it
(``CUDA_VISIBLE_DEVICES=-1``). On a machine where ``nvidia-smi`` lists no GPU the ``gpu`` mode is
skipped with its reason, so the command still runs on a CPU (the CI smoke test runs it for a few
seconds with 2 actors). The JSON goes to stdout (and ``--json``); progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from seedrl.common import finite_json
from seedrl.common.hardware import machine_facts
from seedrl.common.config import load_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PONG = os.path.join(ROOT, "examples", "pong-vtrace.yaml")
MODES = ("gpu", "cpu")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_LE = re.compile(r'le="([^"]+)"')


def log(message: str) -> None:
    """Progress on stderr (stdout carries the JSON)."""
    print(message, file=sys.stderr, flush=True)


def gpus() -> tuple[list[str], str | None]:
    """The GPUs ``nvidia-smi -L`` lists, and why there are none (None when there are)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], "no nvidia-smi on this machine"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"nvidia-smi failed: {exc}"
    listed = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    return listed, None if listed else f"nvidia-smi lists no GPU ({out.stderr.strip()})"


class GpuSampler(threading.Thread):
    """``nvidia-smi`` utilisation and memory of every GPU, once a second, with the time."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float, float]] = []  # (when, util %, memory MiB)
        self._proc = None

    def run(self) -> None:
        cmd = [
            "nvidia-smi",
            "--query-gpu=utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
            "-l",
            "1",
        ]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                util, memory = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, memory))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
        self.join(10)


def scrape(address: str) -> dict[str, list[tuple[str, float]]]:
    """A Prometheus text endpoint's samples: name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            out.setdefault(match.group(1), []).append((match.group(2) or "", float(match.group(3))))
    return out


def _total(samples: dict, name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


def _buckets(samples: dict, name: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for labels, value in samples.get(f"{name}_bucket", []):
        le = _LE.search(labels)
        if le:
            bound = math.inf if le.group(1) == "+Inf" else float(le.group(1))
            out[bound] = out.get(bound, 0.0) + value
    return out


def histogram_between(a: dict, b: dict, name: str) -> dict | None:
    """Mean, p50 and p99 (bucket upper bounds) in ms of a histogram's observations between two
    scrapes, or None if it observed nothing."""
    count = _total(b, f"{name}_count") - _total(a, f"{name}_count")
    if count <= 0:
        return None
    mean = (_total(b, f"{name}_sum") - _total(a, f"{name}_sum")) / count
    first, last = _buckets(a, name), _buckets(b, name)
    cumulative = sorted((bound, last[bound] - first.get(bound, 0.0)) for bound in last)

    def quantile(q: float) -> float | None:
        for bound, seen in cumulative:
            if seen >= q * count:
                return None if math.isinf(bound) else 1e3 * bound
        return None

    return {"mean_ms": 1e3 * mean, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "n": count}


class Scraper(threading.Thread):
    """Every 2 s, the learner's and the actors' /metrics with the learner's elapsed seconds."""

    def __init__(self, run_dir: str):
        super().__init__(daemon=True)
        self.run_dir = run_dir
        self.points: list[tuple[float, float, dict, list[dict]]] = []  # when, elapsed, ...
        self.done = threading.Event()

    def _targets(self) -> tuple[str, list[str]] | None:
        try:
            with open(
                os.path.join(self.run_dir, "prometheus-targets.json"), encoding="utf-8"
            ) as fh:
                groups = json.load(fh)
        except (OSError, ValueError):
            return None
        by_role: dict[str, list[str]] = {}
        for g in groups:
            by_role.setdefault(g["labels"]["seedrl_role"], []).extend(g["targets"])
        return by_role["learner"][0], by_role.get("actor", [])

    def run(self) -> None:
        while not self.done.wait(2.0):
            targets = self._targets()
            try:
                with open(os.path.join(self.run_dir, "status.json"), encoding="utf-8") as fh:
                    elapsed = float(json.load(fh).get("elapsed") or 0.0)
            except (OSError, ValueError):
                continue
            if targets is None:
                continue
            try:
                learner = scrape(targets[0])
                actors = [scrape(a) for a in targets[1]]
            except OSError:
                continue  # starting or stopping
            self.points.append((time.monotonic(), elapsed, learner, actors))


def run_mode(mode: str, args) -> dict:
    """One mode's run and its figures."""
    from seedrl.service.local.launcher import LocalRun, prepare_run_dir

    overrides = [
        f"spec.actors.replicas={args.actors}",
        *args.overrides,
        "spec.budget.maxEnvSteps=0",
        "spec.budget.targetReturn=null",
        f"spec.budget.maxSeconds={args.warmup + args.seconds}",
        "spec.learner.optimizer.linearDecay=false",
        "spec.checkpoint.intervalSeconds=100000",
    ]
    exp = load_experiment(args.config, overrides)
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mode == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"  # the learner (and TensorFlow) see no GPU
    sampler = GpuSampler() if mode == "gpu" else None
    load = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory() as runs:
            held = prepare_run_dir(exp, runs, resume=False)
            run_dir = held.path
            scraper = Scraper(run_dir)
            scraper.start()
            if sampler:
                sampler.start()
            try:
                summary = LocalRun(exp, run_dir, run_lock=held).run()
            finally:
                scraper.done.set()
                scraper.join(10)
                if sampler:
                    sampler.stop()
            with open(os.path.join(run_dir, "learner.log"), encoding="utf-8") as fh:
                learner_log = fh.read()
            if summary.get("stop_reason") != "max_seconds":
                raise RuntimeError(f"run failed: {summary}\n{learner_log[-3000:]}")
            with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as fh:
                rows = [json.loads(line) for line in fh]
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    steady = [r for r in rows if r["elapsed"] >= args.warmup and r["state"] == "running"]
    if len(steady) < 2:
        raise RuntimeError("run too short to measure; raise --seconds")
    first, last = steady[0], steady[-1]
    span = last["elapsed"] - first["elapsed"]
    steps = (last["env_steps"] - first["env_steps"]) / span
    calls = last["inference_batches"] - first["inference_batches"]
    inferred = last["inference_steps"] - first["inference_steps"]
    window = [p for p in scraper.points if p[1] >= args.warmup]
    latency = round_trip = None
    if len(window) >= 2:
        (_, _, la, aa), (_, _, lb, ab) = window[0], window[-1]
        latency = histogram_between(la, lb, "seedrl_learner_inference_latency_seconds")
        if len(aa) == len(ab):  # the same actors at both ends of the window
            round_trip = histogram_between(
                _sum_scrapes(aa), _sum_scrapes(ab), "seedrl_actor_round_trip_seconds"
            )
    devices = next((line for line in learner_log.splitlines() if "devices:" in line), None)
    gpu_util = None
    if sampler is not None and sampler.samples:
        # The GPU over the measured seconds: the end of the run, less its shutdown.
        inside = [s for s in sampler.samples if s[0] >= sampler.samples[-1][0] - args.seconds]
        gpu_util = {
            "mean_percent": sum(s[1] for s in inside) / len(inside),
            "max_percent": max(s[1] for s in inside),
            "max_memory_mib": max(s[2] for s in inside),
            "samples": len(inside),
        }
    return {
        "frames_per_s": steps * exp.spec.env.frames_per_step,
        "env_steps_per_s": steps,
        "learner_updates_per_s": (last["learner_steps"] - first["learner_steps"]) / span,
        "mean_inference_batch": inferred / calls if calls else None,
        "inference_calls_per_s": calls / span,
        "inference_latency": latency,
        "actor_round_trip": round_trip,
        "gpu_utilization": gpu_util,
        "learner_devices": devices.split("devices:", 1)[1].strip() if devices else None,
        "load_before": load,
    }


def _sum_scrapes(scrapes: list[dict]) -> dict:
    """Several endpoints' samples as one (a histogram's series simply concatenate)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for s in scrapes:
        for name, values in s.items():
            out.setdefault(name, []).extend(values)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=PONG)
    p.add_argument("--actors", type=int, default=16, help="actor processes (spec.actors.replicas)")
    p.add_argument("--seconds", type=float, default=60.0, help="measured seconds per mode")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds skipped at the start")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override an Experiment field (repeatable)",
    )
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    listed, no_gpu = gpus()
    exp = load_experiment(args.config, [f"spec.actors.replicas={args.actors}", *args.overrides])
    result: dict = {
        "experiment": os.path.relpath(args.config, ROOT),
        "actors": args.actors,
        "envs_per_actor": exp.spec.actors.envs_per_actor,
        "cores": os.cpu_count(),
        "machine": machine_facts(),
        "gpus": listed,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "date": time.strftime("%Y-%m-%d"),
    }
    failed = False
    for mode in args.modes:
        if mode == "gpu" and no_gpu:
            result[mode] = {"skipped": no_gpu}
            log(f"{mode}: skipped, {no_gpu}")
            continue
        log(f"{mode}: {args.actors} actors, {args.warmup:.0f} s warm-up + {args.seconds:.0f} s")
        try:
            result[mode] = run_mode(mode, args)
        except (RuntimeError, OSError, ValueError) as exc:
            result[mode] = {"error": str(exc)[-3000:]}
            failed = True
        log(f"{mode}: {json.dumps(result[mode], default=str)[:400]}")
    g, c = result.get("gpu", {}), result.get("cpu", {})
    if "frames_per_s" in g and "frames_per_s" in c:
        result["gpu_over_cpu_frames"] = g["frames_per_s"] / c["frames_per_s"]
        result["gpu_over_cpu_updates"] = g["learner_updates_per_s"] / c["learner_updates_per_s"]
    text = json.dumps(result, indent=1, default=str)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump(result, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
