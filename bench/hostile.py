"""A learner under attack beside its real actors: its memory and the actors' rate, side by side.

    python bench/hostile.py [--seconds 20] [--silent 3000] [--hellos 100] [--json FILE]

Runs ``seedrl train examples/cartpole-vtrace.yaml`` (no target, a budget it does not reach in
the bench's time) and, once it trains, measures the real actors' env steps/s for ``--seconds``
alone; then opens ``--hellos`` streams whose hellos declare 4,096 envs and ``--silent`` streams
that never say hello (each on its own connection, over the run's unix socket) and measures
again while they stay open. Reports both rates, their ratio, the learner's RSS before and
during the attack, and the learner's own counts (refused streams, the latest reason).

Issue 27's bar: the ratio at or above 0.8 and the RSS growth within the documented bound.
Both phases run in one process tree on the same machine one after the other: compare them to
each other, not to figures from another run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

import grpc  # noqa: E402

from seedrl.common import seedrl_pb2, seedrl_pb2_grpc  # noqa: E402
from seedrl.common.hardware import machine_facts  # noqa: E402
from seedrl.common.learner_status import LearnerStatus  # noqa: E402
from seedrl.common.wire import PROTOCOL_VERSION, EnvSpec  # noqa: E402

CARTPOLE = os.path.join(ROOT, "examples", "cartpole-vtrace.yaml")
NAME = "bench-hostile"


def status(run_dir: str) -> LearnerStatus | None:
    """The run's status.json, or None while it is missing or being replaced."""
    try:
        with open(os.path.join(run_dir, "status.json"), encoding="utf-8") as fh:
            return LearnerStatus.from_json(fh.read())
    except (OSError, ValueError):
        return None


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def learner_pid(run_dir: str) -> int:
    """The run's learner process (its command names the module and the run directory)."""
    out = subprocess.run(
        ["pgrep", "-f", "--", "-m seedrl.learner"], capture_output=True, text=True
    ).stdout
    for pid in map(int, out.split()):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if run_dir.encode() in fh.read():
                return pid
    raise RuntimeError("no learner process found")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (every thread)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rate(run_dir: str, seconds: float, pid: int) -> tuple[float, float]:
    """Env steps/s the run counts over ``seconds`` (status.json, written twice a second), and
    the learner's CPU seconds per second meanwhile."""
    first, cpu = status(run_dir), cpu_seconds(pid)
    time.sleep(seconds)
    last, cpu = status(run_dir), cpu_seconds(pid) - cpu
    span = last.time - first.time
    return (last.env_steps - first.env_steps) / span, cpu / span


async def attack(address: str, spec: EnvSpec, hellos: int, silent: int, ready, release) -> dict:
    """Opens the hostile streams and holds them until ``release`` is set; returns the codes
    the learner ended them with."""
    channels, calls = [], []
    codes: dict[str, int] = {}
    # Each channel its own connection (channels to one address share one by default).
    options = [("grpc.use_local_subchannel_pool", 1)]

    def note(code) -> None:
        codes[code.name] = codes.get(code.name, 0) + 1

    async def big_hello(i: int) -> None:
        channel = grpc.aio.insecure_channel(address, options=options)
        channels.append(channel)
        call = seedrl_pb2_grpc.LearnerStub(channel).Stream()
        await call.write(
            seedrl_pb2.ActorMessage(
                hello=seedrl_pb2.Hello(
                    protocol_version=PROTOCOL_VERSION,
                    experiment=NAME,
                    actor_id=f"big-{i}",
                    num_envs=4096,
                    env_spec=spec.to_proto(),
                )
            )
        )
        try:
            await call.read()
        except grpc.aio.AioRpcError as exc:
            note(exc.code())

    async def open_silent() -> None:
        channel = grpc.aio.insecure_channel(address, options=options)
        channels.append(channel)
        call = seedrl_pb2_grpc.LearnerStub(channel).Stream()
        calls.append(call)
        await call.wait_for_connection()

    await asyncio.gather(*(big_hello(i) for i in range(hellos)))
    await asyncio.gather(*(open_silent() for _ in range(silent)), return_exceptions=True)
    ready.set()
    while not release.is_set():
        await asyncio.sleep(0.2)
    for call in calls:
        if call.done():
            note(await call.code())
        else:
            call.cancel()
    for channel in channels:
        await channel.close()
    return codes


def main(argv=None) -> int:
    """Runs the bench; prints and optionally writes the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--silent", type=int, default=3000)
    parser.add_argument("--hellos", type=int, default=100)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    runs = tempfile.mkdtemp(prefix="bench-hostile-")
    cmd = [sys.executable, "-m", "seedrl.service.cli", "train", CARTPOLE, "--runs-dir", runs]
    for o in (
        f"metadata.name={NAME}",
        "spec.budget.targetReturn=null",
        "spec.budget.maxEnvSteps=100000000",
        f"spec.budget.maxSeconds={args.seconds * 4 + 120:g}",
    ):
        cmd += ["--set", o]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    run_dir = os.path.join(runs, NAME)
    try:
        deadline = time.monotonic() + 300
        while not ((s := status(run_dir)) and s.learner_steps >= 5):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the run did not start training")
            time.sleep(0.2)
        pid = learner_pid(run_dir)
        rss_alone = rss_mb(pid)
        alone, cpu_alone = rate(run_dir, args.seconds, pid)

        import threading

        ready, release = threading.Event(), threading.Event()
        result: dict = {}
        spec = EnvSpec.read(os.path.join(run_dir, "env_spec.json"))
        attacker = threading.Thread(
            target=lambda: result.update(
                asyncio.run(
                    attack(
                        f"unix:{run_dir}/learner.sock",
                        spec,
                        args.hellos,
                        args.silent,
                        ready,
                        release,
                    )
                )
            ),
            daemon=True,
        )
        attacker.start()
        if not ready.wait(300):
            raise RuntimeError("the attack did not open its streams")
        rss_peak = rss_mb(pid)
        attacked, cpu_attacked = rate(run_dir, args.seconds, pid)
        rss_peak = max(rss_peak, rss_mb(pid))
        release.set()
        attacker.join(120)
        final = status(run_dir)
        figures = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine_facts(),
            "alone_env_steps_per_s": round(alone, 1),
            "attacked_env_steps_per_s": round(attacked, 1),
            "ratio": round(attacked / alone, 3),
            "learner_cpu_alone": round(cpu_alone, 2),
            "learner_cpu_attacked": round(cpu_attacked, 2),
            "learner_rss_mb_alone": round(rss_alone, 1),
            "learner_rss_mb_attacked": round(rss_peak, 1),
            "hellos_of_4096_envs": args.hellos,
            "silent_streams": args.silent,
            "refused_streams": final.refused_streams,
            "last_refusal": final.last_refusal,
            "stream_endings": result,
        }
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
