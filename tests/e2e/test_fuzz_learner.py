"""Fuzzing the real learner process: thousands of random mutations of valid Hellos and Steps
(field values and raw bytes), with two real actors training beside them.

The learner must stay up, end every fuzzed stream with a status that names the problem (never
UNKNOWN, which is an unhandled exception, and never a hang), keep its memory within a bound,
and keep training the real actors.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import yaml

from seedrl.common.exit_codes import ExitCode
from seedrl.common import seedrl_pb2
from seedrl.common.wire import ALLOWED_DTYPES, PROTOCOL_VERSION, encode_array
from seedrl.service.local.launcher import derive_env_spec
from support.learner_harness import CARTPOLE, RealActors, wait_for

ROOT = Path(__file__).resolve().parents[2]
#: Mutated messages sent in all, and the most seconds spent sending them: whichever comes
#: first ends the fuzzing (a loaded machine does fewer, never takes longer).
MUTATIONS = 3000
TIME_LIMIT_S = 240.0
#: Fewest mutations that must have been sent for the run to mean anything.
MIN_MUTATIONS = 500
#: Growth of the learner's resident memory allowed over the fuzzing. Before the caps, one
#: 40-byte hello with 10**7 envs cost ~380 MB; what the fuzzing may legitimately leave behind
#: is Python's and gRPC's free lists and the allocator's fragmentation.
RSS_GROWTH_MB = 200
#: How a fuzzed stream may end: a refusal naming the problem, or OK (a stream whose mutations
#: happened to be valid, closed by the client).
EXPECTED_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
}


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Mutator:
    """Random mutations of valid messages: one field at a time, or raw bytes."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def number(self, kind: str):
        r = self.rng
        if kind == "float":
            return r.choice(
                [
                    float("nan"),
                    float("inf"),
                    -float("inf"),
                    1e38,
                    -3.4e38,
                    1e300,
                    0.0,
                    -1.0,
                    r.uniform(-1e6, 1e6),
                    5e-324,
                ]
            )
        if kind == "uint32":
            return r.choice([0, 1, 2, 3, 4096, 4097, 2**31, 2**32 - 1, r.randrange(2**32)])
        return r.choice([0, -1, 1, 2, 2**31, 2**40, 2**63 - 1, -(2**63), r.randrange(-100, 100)])

    def shape(self):
        r = self.rng
        return [
            self.number("int64") if r.random() < 0.3 else r.randrange(0, 9)
            for _ in range(r.choice([0, 1, 1, 2, 3, 9, 40]))
        ]

    def hello(self, actor_id: str) -> seedrl_pb2.ActorMessage:
        msg = seedrl_pb2.ActorMessage(
            hello=seedrl_pb2.Hello(
                protocol_version=PROTOCOL_VERSION,
                experiment="fuzz",
                actor_id=actor_id,
                num_envs=2,
                env_spec=CARTPOLE.to_proto(),
            )
        )
        h, spec, r = msg.hello, msg.hello.env_spec, self.rng
        choice = r.randrange(12)
        if choice == 0:
            h.num_envs = self.number("uint32")
        elif choice == 1:
            h.actor_id = r.choice(["", "x" * 300, "real-0", "real-1", "\u2603" * 10])
        elif choice == 2:
            h.experiment = r.choice(["", "other", "fuzz" * 50])
        elif choice == 3:
            h.protocol_version = self.number("uint32")
        elif choice == 4:
            spec.observation_dtype = r.choice(sorted(ALLOWED_DTYPES) + ["object", "", "V8"])
        elif choice == 5:
            del spec.observation_shape[:]
            spec.observation_shape.extend(self.shape())
        elif choice == 6:
            del spec.action_shape[:]
            spec.action_shape.extend(self.shape())
        elif choice == 7:
            spec.num_actions = self.number("int64")
        elif choice == 8:
            spec.action_dtype = r.choice(sorted(ALLOWED_DTYPES) + ["complex64"])
        elif choice == 9:
            spec.env_id = r.choice(["", "Pong", "CartPole-v0"])
        elif choice == 10:
            h.actor_index = self.number("uint32")
        else:
            msg = seedrl_pb2.ActorMessage(step=self._valid_step(2))
        return msg

    def _valid_step(self, k: int) -> seedrl_pb2.Step:
        obs = np.asarray(
            [[self.rng.uniform(-1, 1) for _ in range(4)] for _ in range(k)], np.float32
        )
        return seedrl_pb2.Step(
            env_ids=list(range(k)),
            observations=encode_array(obs),
            rewards=[1.0] * k,
            terminated=[False] * k,
            truncated=[False] * k,
        )

    def step(self, k: int) -> seedrl_pb2.ActorMessage:
        s, r = self._valid_step(k), self.rng
        choice = r.randrange(12)
        if choice == 0:
            ids = list(range(k)) * r.choice([0, 1, 2, 500])
            r.shuffle(ids)
            del s.env_ids[:]
            s.env_ids.extend(ids if ids else [self.number("uint32")])
        elif choice == 1:
            s.observations.dtype = r.choice(sorted(ALLOWED_DTYPES) + ["object", "<f4"])
        elif choice == 2:
            del s.observations.shape[:]
            s.observations.shape.extend(self.shape())
        elif choice == 3:
            data = bytearray(s.observations.data)
            cut = r.randrange(len(data) + 1)
            s.observations.data = bytes(data[:cut]) + bytes(r.randrange(0, 64))
        elif choice == 4:
            obs = np.frombuffer(s.observations.data, np.float32).copy()
            with np.errstate(over="ignore"):  # 1e300 becomes inf in float32, as meant
                obs[r.randrange(obs.size)] = self.number("float")
            s.observations.data = obs.tobytes()
        elif choice == 5:
            s.rewards[r.randrange(k)] = self.number("float")
        elif choice == 6:
            s.rewards.extend([0.0] * r.randrange(1, 5))
        elif choice == 7:
            s.terminated[r.randrange(k)] = True
            s.truncated.append(True)
        elif choice in (8, 9, 10):
            for _ in range(r.choice([1, 1, 2, 3, 50])):
                s.episodes.add(
                    env_id=self.number("uint32") if r.random() < 0.3 else r.randrange(k),
                    episode_return=self.number("float"),
                    length=self.number("int64"),
                )
        else:
            return seedrl_pb2.ActorMessage(hello=self.hello("again").hello)
        return seedrl_pb2.ActorMessage(step=s)

    def corrupt(self, data: bytes) -> bytes:
        """The serialized message with a few bytes flipped, cut or inserted."""
        b = bytearray(data)
        for _ in range(self.rng.randrange(1, 4)):
            op = self.rng.randrange(3)
            i = self.rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[min(i, len(b) - 1)] ^= 1 << self.rng.randrange(8)
            elif op == 1:
                del b[i : i + self.rng.randrange(1, 8)]
            else:
                b[i:i] = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 8)))
        return bytes(b)


def _fuzz_stream(method, mutator: Mutator, n: int) -> tuple[int, grpc.StatusCode, str]:
    """One stream: a hello (mutated or not), then valid or mutated steps; returns the number
    of mutated messages sent and how the stream ended."""
    r = mutator.rng
    mutated = 0
    messages = []
    if r.random() < 0.4:
        hello = mutator.hello(f"fuzz-{n}")
        mutated += 1
    else:
        hello = seedrl_pb2.ActorMessage(
            hello=seedrl_pb2.Hello(
                protocol_version=PROTOCOL_VERSION,
                experiment="fuzz",
                actor_id=f"fuzz-{n}",
                num_envs=2,
                env_spec=CARTPOLE.to_proto(),
            )
        )
    messages.append(hello.SerializeToString())
    for _ in range(r.randrange(1, 5)):
        if r.random() < 0.75:
            messages.append(mutator.step(2).SerializeToString())
            mutated += 1
        else:
            messages.append(
                seedrl_pb2.ActorMessage(step=mutator._valid_step(2)).SerializeToString()
            )
    if r.random() < 0.25:
        i = r.randrange(len(messages))
        messages[i] = mutator.corrupt(messages[i])
        mutated += 1
    try:
        for _ in method(iter(messages), timeout=60):
            pass
    except grpc.RpcError as err:
        return mutated, err.code(), err.details() or ""
    return mutated, grpc.StatusCode.OK, ""


def test_thousands_of_mutated_messages_leave_the_learner_serving(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = run_dir / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "fuzz"},
                "spec": {
                    "learner": {"unrollLength": 5, "batchSize": 2, "inferenceMaxWaitMs": 1},
                    "agent": {"network": {"hiddenSizes": [8]}},
                    "checkpoint": {"intervalSteps": 0, "intervalSeconds": 0},
                    "budget": {"maxEnvSteps": 0},
                },
            }
        )
    )
    assert derive_env_spec(str(config), str(run_dir / "env_spec.json")) is None
    address = f"unix:{run_dir}/l.sock"
    log = open(run_dir / "learner.log", "ab")  # noqa: SIM115 - handed to the child
    learner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seedrl.learner",
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
            "--listen",
            address,
            "--env-spec",
            str(run_dir / "env_spec.json"),
            "--metrics-address",
            "off",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    log.close()
    real = None
    channel = None
    try:

        def status():
            try:
                return yaml.safe_load((run_dir / "status.json").read_text()) or {}
            except (OSError, yaml.YAMLError):
                return {}

        wait_for(lambda: status().get("state"), 120, "the learner")
        real = RealActors(address, experiment="fuzz")
        wait_for(lambda: status().get("learner_steps", 0) >= 10, 180, "training", real.check)
        rss_before = _rss_mb(learner.pid)
        steps_before = status()["learner_steps"]

        channel = grpc.insecure_channel(address)
        method = channel.stream_stream(
            "/seedrl.v1.Learner/Stream",
            request_serializer=lambda b: b,
            response_deserializer=seedrl_pb2.LearnerMessage.FromString,
        )
        mutator = Mutator(seed=19)
        sent, streams, ends = 0, 0, {}
        started = time.monotonic()
        while sent < MUTATIONS and time.monotonic() - started < TIME_LIMIT_S:
            mutated, code, details = _fuzz_stream(method, mutator, streams)
            sent += mutated
            streams += 1
            ends[code] = ends.get(code, 0) + 1
            assert code in EXPECTED_CODES, (code, details)
            assert learner.poll() is None, "the learner exited"
            real.check()
        seconds = time.monotonic() - started
        print(
            f"\n{sent} mutated messages in {streams} streams in {seconds:.0f} s; ends: "
            f"{ {c.name: n for c, n in ends.items()} }; learner RSS {rss_before:.0f} -> "
            f"{_rss_mb(learner.pid):.0f} MB"
        )
        assert sent >= MIN_MUTATIONS
        assert ends.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > streams // 4
        assert _rss_mb(learner.pid) - rss_before < RSS_GROWTH_MB
        # The real actors' training went on beside the fuzzing, and goes on after it (in a
        # status snapshot taken since: status.json is rewritten every half second).
        fuzz_end = time.time()
        wait_for(
            lambda: (
                status().get("time", 0) > fuzz_end + 1
                and status().get("learner_steps", 0) >= steps_before + 20
            ),
            180,
            "training after the fuzzing",
            real.check,
        )
        after = status()
        assert after["actors"] == 2 and after["refused_streams"] >= ends.get(
            grpc.StatusCode.INVALID_ARGUMENT, 0
        )
        assert after["mean_return"] is None or 0 < after["mean_return"] <= 500
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(120) == ExitCode.STOPPED  # SIGTERM before the end
    finally:
        if channel is not None:
            channel.close()
        if real is not None:
            real.stop()
        learner.kill()
