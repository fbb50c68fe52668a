"""Pong frames/s side by side in one run: the two Atari backends stepping raw, seedrl end to end
with each (inference only and training on), and Sample Factory 2.x APPO with its Atari defaults.

    python bench/atari_speed.py [--seconds 30] [--warmup 15] [--json bench-atari-speed.json]
                                [--skip raw seedrl sample-factory]

seedrl runs ``examples/pong-vtrace.yaml`` in the layout of ``make bench-throughput`` (2 actors x
16 envs, 2 streams each, envs stepped in the actor processes, one gradient step per batch: see
``bench/speed.py``), once per ``spec.env.backend`` (gymnasium, envpool) and mode. Raw: as many
processes as actors, each stepping the very batches an actor makes (``make_env_batches``) with
random actions, no learner. Sample Factory: ``sf_examples.atari.train_atari`` on ``atari_pong``
with its defaults (APPO, its own Atari wrappers over ale-py), on the CPU, from the virtualenv
``make sample-factory`` builds in ``bench/.sf-venv``; its frames/s is read from its own log
(it counts skipped frames, as seedrl's frames do).

Every mode is measured over the same number of seconds after the same warm-up, one after the
other in this one process, so they share the machine's load; the JSON also records the load
average before each mode and the CPU seconds per env step of each process role (actors,
learner), which says where the time goes. Frames are agent steps x 4 (the frame skip).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import throughput as throughput_bench  # noqa: E402  (bench/throughput.py)

from seedrl.common import finite_json  # noqa: E402
from seedrl.common.hardware import machine_facts  # noqa: E402
from seedrl.common.config import load_experiment  # noqa: E402

PONG = os.path.join(ROOT, "examples", "pong-vtrace.yaml")
#: bench/speed.py's Pong layout: 2 actors x 16 envs in the actor processes, 2 streams each,
#: one gradient step per batch.
PONG_OVERRIDES = [
    "spec.actors.processesPerActor=0",
    "spec.actors.streamsPerActor=2",
    "spec.agent.vtrace.epochs=1",
    "spec.agent.vtrace.minibatches=1",
]
BACKENDS = ("gymnasium", "envpool")
SF_VENV = os.path.join(HERE, ".sf-venv")
#: One line of Sample Factory's progress log: "... Total num frames: 123456. ...".
_SF_FRAMES = re.compile(r"Total num frames: (\d+)")


def _load() -> float:
    return os.getloadavg()[0]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and all its threads, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as fh:
                kids = [int(x) for x in fh.read().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def _role(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    for role in ("seedrl.actors", "seedrl.learner"):
        if role in cmd:
            return role.split(".")[1]
    return "other"


class CpuSampler:
    """Samples, once a second, the CPU seconds used so far by this process's descendants,
    summed per role (learner, actors, other)."""

    def __init__(self):
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for pid in _descendants(os.getpid()):
                try:
                    role = self._seen[pid][0] if pid in self._seen else _role(pid)
                    if role is not None:
                        self._seen[pid] = (role, _cpu_seconds(pid))
                except OSError:
                    pass  # exited; its last reading stays
            totals: dict[str, float] = {}
            for role, cpu in self._seen.values():
                totals[role] = totals.get(role, 0.0) + cpu
            self.samples.append((time.monotonic(), totals))

    def rates(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per second of each role between two moments (monotonic clock)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return {}
        (t0, a), (t1, b) = inside[0], inside[-1]
        return {role: (b.get(role, 0.0) - a.get(role, 0.0)) / (t1 - t0) for role in b}


def _raw_worker(config, overrides, index, seconds, out) -> None:
    import numpy as np

    from seedrl.actors.main import make_env_batches

    exp = load_experiment(config, overrides)
    batches = make_env_batches(exp, index)
    rng = np.random.default_rng(index)
    for b in batches:
        b.reset()
    steps, start, cpu = 0, time.monotonic(), time.process_time()
    while time.monotonic() - start < seconds:
        for b in batches:
            b.step(rng.integers(0, b.spec.num_actions, size=b.num_envs, dtype=np.int32))
            steps += b.num_envs
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    kind = type(batches[0]).__name__
    for b in batches:
        b.close()
    out.put((steps / wall, cpu / steps, kind))


def raw(backend: str, seconds: float) -> dict:
    """Random-action env steps/s of the actors' own batches, one process per actor."""
    overrides = [*PONG_OVERRIDES, f"spec.env.backend={backend}"]
    exp = load_experiment(PONG, overrides)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(PONG, overrides, i, seconds, out))
        for i in range(exp.spec.actors.replicas)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 180) for _ in procs]
    for p in procs:
        p.join()
    steps = sum(r[0] for r in results)
    return {
        "steps_per_s": steps,
        "frames_per_s": steps * exp.spec.env.frames_per_step,
        "cpu_ms_per_step": 1e3 * sum(r[1] for r in results) / len(results),
        "batch": results[0][2],
    }


def seedrl(backend: str, train: bool, seconds: float, warmup: float, passes: bool = False) -> dict:
    """seedrl end to end, with the CPU each role used per env step while measured; with
    ``passes``, training as the example does (4 epochs x 4 minibatches per batch, as Sample
    Factory's Atari defaults train) instead of one gradient step per batch."""
    layout = [o for o in PONG_OVERRIDES if not passes or ".vtrace." not in o]
    overrides = [*layout, f"spec.env.backend={backend}"]
    exp = load_experiment(PONG, overrides)
    with CpuSampler() as cpu:
        result = throughput_bench.end_to_end_steps_per_second(
            PONG, overrides, seconds, warmup, train=train
        )
        end = time.monotonic()
    # The run's last `seconds` before its stop (its warm-up is over by then).
    rates = cpu.rates(end - seconds - 2, end - 3)
    steps = result["steps_per_s"]
    return {
        **result,
        "frames_per_s": steps * exp.spec.env.frames_per_step,
        "cpu_ms_per_step": {role: 1e3 * r / steps for role, r in rates.items() if steps},
        "cores_busy": sum(rates.values()),
    }


def sample_factory_python() -> str | None:
    python = os.path.join(SF_VENV, "bin", "python")
    return python if os.path.exists(python) else None


def sample_factory(seconds: float, warmup: float) -> dict:
    """Sample Factory's APPO on Pong with its Atari defaults, on the CPU: frames/s from its
    log over ``seconds`` after ``warmup`` seconds of reported progress."""
    python = sample_factory_python()
    if python is None:
        raise RuntimeError(f"no Sample Factory in {SF_VENV}: run `make sample-factory`")
    with tempfile.TemporaryDirectory() as train_dir:
        cmd = [
            python,
            "-m",
            "sf_examples.atari.train_atari",
            "--env=atari_pong",
            "--experiment=bench-pong",
            f"--train_dir={train_dir}",
            "--device=cpu",
            "--with_wandb=False",
            "--save_every_sec=100000",
            "--keep_checkpoints=1",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # its own virtualenv, none of ours
        proc = subprocess.Popen(
            cmd,
            cwd=train_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its workers go with it on SIGINT to the group
        )
        points: list[tuple[float, int]] = []  # (when, total frames), from its log
        tail: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                text = line.decode(errors="replace").rstrip()
                tail[:] = (tail + [text])[-40:]
                match = _SF_FRAMES.search(text)
                if match and int(match.group(1)) > 0:
                    points.append((time.monotonic(), int(match.group(1))))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        with CpuSampler() as cpu:
            deadline = time.monotonic() + warmup + seconds + 300  # start-up included
            while proc.poll() is None and time.monotonic() < deadline:
                if points and points[-1][0] - points[0][0] >= warmup + seconds:
                    break
                time.sleep(0.5)
            end = time.monotonic()
            rates = cpu.rates(end - seconds, end)
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        reader.join(10)
    first = points[0][0] if points else None
    steady = [p for p in points if first is not None and p[0] - first >= warmup]
    if len(steady) < 2:
        raise RuntimeError("Sample Factory reported no progress:\n" + "\n".join(tail))
    (t0, f0), (t1, f1) = steady[0], steady[-1]
    fps = (f1 - f0) / (t1 - t0)
    return {
        "frames_per_s": fps,
        "steps_per_s": fps / 4,
        "cpu_ms_per_step": 1e3 * sum(rates.values()) / (fps / 4) if fps else None,
        "cores_busy": sum(rates.values()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per mode")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds skipped at the start")
    p.add_argument("--skip", nargs="*", default=[], choices=["raw", "seedrl", "sample-factory"])
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args(argv)
    print(
        f"Pong on {os.cpu_count()} cores, {args.seconds:.0f} s per mode after "
        f"{args.warmup:.0f} s of warm-up; load {_load():.2f}",
        flush=True,
    )
    results: dict = {
        "cores": os.cpu_count(),
        "machine": machine_facts(),
        "seconds": args.seconds,
        "warmup": args.warmup,
    }
    rows = []
    errors = []

    def record(key, label, fn, raw_key=None):
        load = _load()
        try:
            r = fn()
        except (RuntimeError, OSError, ValueError) as exc:
            errors.append(f"{label}: {exc}")
            print(f"{label} failed: {exc}", flush=True)
            return
        r["load_before"] = load
        results[key] = r
        rows.append((label, r, raw_key))
        print(f"{label}: {r['frames_per_s']:,.0f} frames/s (load {load:.2f})", flush=True)

    if "raw" not in args.skip:
        for b in BACKENDS:
            record(f"raw_{b}", f"raw stepping, {b}", lambda b=b: raw(b, args.seconds))
    if "seedrl" not in args.skip:
        for train in (False, True):
            for b in BACKENDS:
                mode = "training on" if train else "inference only"
                record(
                    f"seedrl_{b}_{'training' if train else 'inference_only'}",
                    f"seedrl end to end, {mode}, {b}",
                    lambda b=b, train=train: seedrl(b, train, args.seconds, args.warmup),
                    f"raw_{b}",
                )
        for b in BACKENDS:
            record(
                f"seedrl_{b}_training_4x4",
                f"seedrl end to end, training on (4 epochs x 4 minibatches), {b}",
                lambda b=b: seedrl(b, True, args.seconds, args.warmup, passes=True),
                f"raw_{b}",
            )
    if "sample-factory" not in args.skip:
        record(
            "sample_factory_appo",
            "Sample Factory 2.1.1 APPO (its Atari defaults)",
            lambda: sample_factory(args.seconds, args.warmup),
            "raw_gymnasium",
        )
    ratios = {}
    for _, r, raw_key in rows:
        if raw_key in results:
            r["ratio_to_raw"] = r["frames_per_s"] / results[raw_key]["frames_per_s"]
    g, e = (results.get(f"seedrl_{b}_training") for b in BACKENDS)
    sf = results.get("sample_factory_appo")
    if g and e:
        ratios["envpool_over_gymnasium_training"] = e["frames_per_s"] / g["frames_per_s"]
    if e and sf:
        ratios["envpool_training_over_sample_factory"] = e["frames_per_s"] / sf["frames_per_s"]
    e4 = results.get("seedrl_envpool_training_4x4")
    g4 = results.get("seedrl_gymnasium_training_4x4")
    if e4 and g4:
        ratios["envpool_over_gymnasium_training_4x4"] = e4["frames_per_s"] / g4["frames_per_s"]
    if e4 and sf:
        ratios["envpool_training_4x4_over_sample_factory"] = e4["frames_per_s"] / sf["frames_per_s"]
    results["ratios"] = ratios
    results["errors"] = errors
    print(f"\n{'mode':<52} {'frames/s':>10} {'vs raw':>7} {'CPU ms/step':>22}")
    for label, r, _ in rows:
        ratio = r.get("ratio_to_raw")
        cpu = r.get("cpu_ms_per_step")
        if isinstance(cpu, dict):
            cpu_text = " ".join(f"{k[:5]} {v:.2f}" for k, v in sorted(cpu.items()) if v > 0.005)
        else:
            cpu_text = "-" if cpu is None else f"{cpu:.2f}"
        ratio_text = "-" if ratio is None else f"{ratio:.2f}"
        print(f"{label:<52} {r['frames_per_s']:>10,.0f} {ratio_text:>7} {cpu_text:>22}")
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump(results, fh, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
