"""Multi-device scenarios, each run in a fresh process by tests/learner/test_devices.py:
TensorFlow's logical CPU devices can only be configured before it initialises, once per
process. Each scenario prints one JSON line of results as its last line.

  python tests/learner/device_scenarios.py train REPLICAS OUT_DIR
  python tests/learner/device_scenarios.py runtime
  python tests/learner/device_scenarios.py skip REPLICAS
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Normalised: a path with ".." in it makes support/'s Path(__file__).parents lexical, and
# support.experiment_docs then looked for the examples under tests/learner/.
sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), "..")))

from seedrl.common.config import DevicesConfig, parse_experiment
from seedrl.common.wire import EnvSpec
from seedrl.learner import devices

CARTPOLE = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2)
PENDULUM = EnvSpec("Pendulum-v1", "float32", (3,), "float32", (1,), 0)
LOGICAL_CPUS = 4
# Small enough that clipping is active in these steps: it must act on the all-reduced gradient.
CLIP = 0.05
#: Training steps each agent takes (tests/learner/test_devices.py derives its tolerances from
#: this and from the batch shapes below).
STEPS = 2
#: Envs (rows) per batch, time steps per unroll (rows per env: unroll + 1) and R2D2's sequence
#: length: a gradient element sums over at most SEQUENCE_LENGTH x BATCH samples.
BATCH, UNROLL, SEQUENCE_LENGTH = 8, 5, 10
# Adam's step m / (sqrt(v) + epsilon) divides a gradient element by its own size: with the
# usual tiny epsilon, a rounding difference in a near-zero gradient element (one that
# cancels over the batch) moves its parameter by up to the learning rate, so no float32 bound
# holds for a comparison of two summation orders. An epsilon above every gradient element
# (clipping keeps each below CLIP) makes Adam's step about lr / epsilon x the gradient, as
# well conditioned as SGD's, and a gradient summed over replicas instead of averaged shows.
ADAM_EPSILON = CLIP


def experiment(agent: str, optimizer: str = "sgd", **agent_spec):
    # SGD's step is proportional to the gradient, so a gradient summed over replicas instead
    # of averaged shows; Adam's would hide it with a small epsilon (see ADAM_EPSILON).
    spec = {
        "seed": 3,
        "agent": {"name": agent, "network": {"hiddenSizes": [16], "lstmSize": 8}, **agent_spec},
        "learner": {
            "unrollLength": UNROLL,
            "batchSize": BATCH,
            "optimizer": {
                "name": optimizer,
                "gradClipNorm": CLIP,
                "learningRate": 0.1,
                "momentum": 0.5,
                "epsilon": ADAM_EPSILON,
            },
        },
        "actors": {"replicas": 2},
    }
    return parse_experiment({"metadata": {"name": "devices"}, "spec": spec})


def placement(replicas: int):
    """0: the one-device path (no strategy); n: MirroredStrategy over the first n logical CPUs.

    One strategy per process: TensorFlow's collective ops key their groups per strategy, and
    two strategies of different sizes in one process collide (as they never do in a learner).
    """
    import tensorflow as tf

    if not replicas:
        return devices.Placement()
    names = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    plan = devices.DevicePlan("cpu", "mirrored", tuple(names), tuple(names), tuple(names))
    return devices.Placement(plan, tf.distribute.MirroredStrategy(names))


def _variables(agent):
    """The agent's state that training changes: parameters, normalizers, counters (not the
    optimizer's slots, the sampling seeds, or Keras' unused dropout seed states, which
    checkpoints do not hold)."""
    return [
        v
        for name, obj in sorted(agent.checkpointables().items())
        if name not in ("optimizer", "rng")
        for v in getattr(obj, "variables", [obj])
        if "seed_generator" not in getattr(v, "path", "")
    ]


def _numpy(v):
    return v.numpy() if hasattr(v, "numpy") else np.asarray(v)


def _replica_spread(agent) -> float:
    """The largest difference between two training replicas' copies of a variable, relative
    to the variable's largest element (0 when they are identical). Every replica applies the
    same all-reduced update; TensorFlow's CPU collectives may round a sum differently on
    different devices (seen on a one-element bias over 4 replicas: 1e-12), so this is small,
    not always 0. A rounding of the sum is a few units in the last place of the tensor's
    scale, not of each element: an element near 0 beside large ones (relative to itself, a
    full-suite run measured 1.5e-6) is judged at its tensor's scale."""
    worst = 0.0
    for v in _variables(agent):
        inner = v.value if not callable(getattr(v, "value", None)) else v
        copies = getattr(inner, "values", None) or ()
        values = [np.asarray(c.numpy(), np.float64) for c in copies]
        scale = max(float(np.max(np.abs(values[0]), initial=0.0)), 1e-6) if values else 1.0
        for other in values[1:]:
            diff = np.abs(other - values[0]) / scale
            worst = max(worst, float(np.max(diff, initial=0.0)))
    return worst


def _batch(rng, t, b, env_spec, param_size, state_sizes=(8, 8)):
    obs = rng.normal(size=(t, b) + tuple(env_spec.observation_shape)).astype(np.float32)
    if env_spec.discrete:
        action = rng.integers(0, env_spec.num_actions, size=(t, b)).astype(np.int32)
    else:
        action = rng.normal(size=(t, b) + tuple(env_spec.action_shape)).astype(np.float32)
    terminated = rng.random((t, b)) < 0.1
    truncated = rng.random((t, b)) < 0.05
    return {
        "observation": obs,
        "action": action,
        "reward": rng.normal(size=(t, b)).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated & ~terminated,
        "policy_params": rng.normal(size=(t, b, param_size)).astype(np.float32) * 0.3,
        "q_values": rng.normal(size=(t, b, max(1, env_spec.num_actions))).astype(np.float32),
        "initial_state": [rng.normal(size=(b, n)).astype(np.float32) * 0.1 for n in state_sizes],
    }


def _state_sizes(network):
    """Widths of a network's recurrent state: h, c and the previous action."""
    return [int(s.shape[-1]) for s in network.initial_state(1)]


def _run_vtrace(agent, env_spec, steps=STEPS, b=BATCH):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        out.append(
            agent.train(
                _batch(
                    rng, UNROLL + 1, b, env_spec, agent.dist.param_size, _state_sizes(agent.network)
                )
            )
        )
    return out, {}


def _run_ppo(agent, env_spec, steps=STEPS):
    rng = np.random.default_rng(0)
    out = []
    for step in range(steps):
        batch = _batch(
            rng, UNROLL + 1, BATCH, env_spec, agent.dist.param_size, _state_sizes(agent.network)
        )
        batch["policy_version"] = np.full((UNROLL + 1, BATCH), step, np.int64)
        out.append(agent.train(batch))
    return out, {}


def _run_r2d2(agent, env_spec, steps=STEPS):
    rng = np.random.default_rng(0)
    length = agent.config.burn_in + agent.config.train_length + 1
    unrolls = []
    for _ in range(24):
        one = _batch(rng, length, 1, env_spec, 1, _state_sizes(agent.online))
        unroll = {k: v[:, 0] for k, v in one.items() if k != "initial_state"}
        unroll["initial_state"] = [s[0] for s in one["initial_state"]]
        unrolls.append(unroll)
    agent.add_unrolls(unrolls)
    out = [agent.train_from_replay() for _ in range(steps)]
    return out, {
        "priorities": agent.replay.state()["priorities"].tolist()
        if "priorities" in agent.replay.state()
        else None
    }


AGENTS = {
    "vtrace": (lambda: experiment("vtrace"), CARTPOLE, _run_vtrace),
    # 7 unrolls: uneven shards (4 + 3, or 2 + 2 + 2 + 1), with Adam's slots mirrored too.
    "vtrace_continuous": (
        lambda: experiment("vtrace", "adam"),
        PENDULUM,
        lambda agent, env_spec: _run_vtrace(agent, env_spec, b=7),
    ),
    "ppo": (
        lambda: experiment("ppo", ppo={"minibatches": 2, "epochs": 2, "objective": "both"}),
        PENDULUM,
        _run_ppo,
    ),
    "r2d2": (
        lambda: experiment(
            "r2d2",
            r2d2={
                # Stored sequences hold burnIn + trainLength + 1 rows: SEQUENCE_LENGTH.
                "trainLength": SEQUENCE_LENGTH - 3,
                "burnIn": 2,
                "sequencePeriod": SEQUENCE_LENGTH - 3,
                "nStep": 2,
                "minReplaySize": 4,
                "replayCapacity": 64,
            },
        ),
        CARTPOLE,
        _run_r2d2,
    ),
    # Minibatches of one unroll: fewer than the replicas, so the one-device step runs on the
    # mirrored variables.
    "ppo_small_minibatches": (
        lambda: experiment("ppo", ppo={"minibatches": 8, "epochs": 1}),
        CARTPOLE,
        _run_ppo,
    ),
}


def _checkpoint_round_trip(name, exp, env_spec, agent, where, replicas, out_dir) -> dict:
    """Checkpoints move between device counts: the one-device run saves; a run on replicas
    restores that checkpoint into a fresh agent (every replica's copy) and saves its own,
    which a fresh one-device agent restores. Returns the largest differences seen."""
    import tensorflow as tf

    from seedrl.learner.agents import build_agent
    from seedrl.learner.checkpoint import trackables

    def values(a):
        return [np.array(_numpy(v)) for v in _variables(a)]

    one_device_ckpt = os.path.join(out_dir, f"{name}-ckpt-0")
    if not replicas:
        tf.train.Checkpoint(**trackables(agent)).write(one_device_ckpt)
        return {}
    fresh = build_agent(exp, env_spec, where)
    tf.train.Checkpoint(**trackables(fresh)).read(one_device_ckpt).expect_partial()
    with np.load(os.path.join(out_dir, f"{name}-0.npz")) as saved:
        restored_diff = max(
            float(np.max(np.abs(v - saved[f"arr_{i}"]), initial=0.0))
            for i, v in enumerate(values(fresh))
        )
    path = tf.train.Checkpoint(**trackables(agent)).write(
        os.path.join(out_dir, f"{name}-ckpt-{replicas}")
    )
    single = build_agent(exp, env_spec)
    tf.train.Checkpoint(**trackables(single)).read(path).expect_partial()
    back_diff = max(
        float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(values(single), values(agent))
    )
    return {
        "restored_from_one_device": restored_diff,
        "restored_spread": _replica_spread(fresh),
        "restored_on_one_device": back_diff,
    }


def train(replicas: int, out_dir: str) -> dict:
    """Every agent of AGENTS trained for two steps on fixed batches from the initial weights
    in ``out_dir`` (written by the first run, which must be the one-device one), under the
    placement of ``replicas``; writes each agent's parameters to ``out_dir`` and returns the
    metrics, whether the replicas' copies agree, and R2D2's new priorities."""
    import tensorflow as tf

    from seedrl.learner.agents import build_agent

    devices.configure_logical_cpus(LOGICAL_CPUS)
    # The same result on every run of this process, whatever the machine's load: each op
    # computes deterministically, and one intra-op thread makes Eigen split its reductions the
    # same way on any number of cores. (The one-device and multi-replica runs still sum in
    # different orders: the test compares them with a tolerance derived from that.)
    tf.config.experimental.enable_op_determinism()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    where = placement(replicas)
    results = {}
    for name, (make_exp, env_spec, run) in AGENTS.items():
        exp = make_exp()
        initial_path = os.path.join(out_dir, f"{name}-initial.npz")
        agent = build_agent(exp, env_spec, where)
        variables = _variables(agent)
        if not os.path.exists(initial_path):
            np.savez(initial_path, *[np.array(_numpy(v)) for v in variables])
        with np.load(initial_path) as initial:
            for i, v in enumerate(variables):
                v.assign(initial[f"arr_{i}"])
        metrics, extra = run(agent, env_spec)
        trained = [np.array(_numpy(v)) for v in variables]
        np.savez(os.path.join(out_dir, f"{name}-{replicas}.npz"), *trained)
        results[name] = {
            "replicas": where.replicas,
            "metrics": metrics,
            "replica_spread": _replica_spread(agent),
            "priorities": extra.get("priorities"),
            **_checkpoint_round_trip(name, exp, env_spec, agent, where, replicas, out_dir),
        }
    return results


def runtime() -> dict:
    """The real runtime and gRPC server with inference over two dedicated logical devices and
    training over two replicas, serving several actor streams."""
    import asyncio
    import threading
    import time

    from support.learner_harness import Stream, hello, step

    from seedrl.learner.agents import build_agent
    from seedrl.learner.runtime import LearnerRuntime
    from seedrl.learner.server import start_server

    config = DevicesConfig(
        logical_cpu_devices=LOGICAL_CPUS, inference_devices=2, training_devices=2
    )
    placement = devices.setup(config)
    exp = parse_experiment(
        {
            "metadata": {"name": "test-exp"},
            "spec": {
                "learner": {
                    "unrollLength": 5,
                    "batchSize": 4,
                    "inferenceMaxWaitMs": 1,
                    "inferenceBatchSize": 4,
                    "devices": {
                        "logicalCpuDevices": 4,
                        "inferenceDevices": 2,
                        "trainingDevices": 2,
                    },
                },
                "agent": {"network": {"hiddenSizes": [8]}},
            },
        }
    )
    rt = LearnerRuntime(
        exp,
        lambda e, s: build_agent(e, s, placement),
        train=True,
        inference_lanes=len(placement.inference_devices),
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    address = f"unix:/tmp/seedrl-devices-{os.getpid()}.sock"
    server, _ = asyncio.run_coroutine_threadsafe(start_server(rt, address, None), loop).result(60)
    answered = {}
    started = time.monotonic()
    try:
        streams = [Stream(address) for _ in range(4)]
        for i, s in enumerate(streams):
            s.send(hello(actor_id=f"a{i}", num_envs=2, actor_index=i % 2))
            assert s.recv().WhichOneof("kind") == "welcome"
        rng = np.random.default_rng(0)
        for _ in range(30):
            for s in streams:
                s.send(step(2, obs=rng.normal(size=(2, 4)).astype(np.float32)))
            for i, s in enumerate(streams):
                if s.recv().WhichOneof("kind") == "actions":
                    answered[i] = answered.get(i, 0) + 1
        deadline = time.monotonic() + 60
        while rt.learner_steps < 2 and time.monotonic() < deadline and not rt.train_error:
            time.sleep(0.05)
        for s in streams:
            s.close()
        rt.shutdown()  # the trainer ends its step: the replicas' copies are compared at rest
        agent = rt.agent
        return {
            "plan": placement.plan.summary(),
            "inference_devices": placement.inference_devices,
            "training_devices": list(placement.plan.training),
            "inference_batches": dict(placement.inference_batches),
            "lane_batches": [b.batches for b in rt.batchers],
            "status_batches": rt.status().inference_batches,
            "answered": answered,
            "learner_steps": rt.learner_steps,
            "train_error": repr(rt.train_error) if rt.train_error else None,
            "replicas": agent.placement.replicas,
            "replica_spread": _replica_spread(agent),
            "seconds": time.monotonic() - started,
        }
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(30)
        rt.shutdown()
        loop.call_soon_threadsafe(loop.stop)


def skip(replicas: int) -> dict:
    """Every agent given one batch holding a NaN observation, on the one-device path (0) or
    on ``replicas`` training replicas: returns, per agent, how far any floating variable moved,
    the optimizer's step count before and after, and the reported gradient norm."""
    import tensorflow as tf

    from seedrl.learner.agents import build_agent

    devices.configure_logical_cpus(LOGICAL_CPUS)
    where = placement(replicas)
    rng = np.random.default_rng(0)
    results = {}
    for name in ("vtrace", "ppo", "r2d2"):
        make_exp, env_spec, _ = AGENTS[name]
        agent = build_agent(make_exp(), env_spec, where)
        floating = [v for v in _variables(agent) if tf.as_dtype(v.dtype).is_floating]
        before = [np.array(_numpy(v)) for v in floating]
        steps_before = int(_numpy(agent.optimizer.iterations))
        if name == "r2d2":
            length = agent.config.burn_in + agent.config.train_length + 1
            unrolls = []
            for _ in range(8):
                one = _batch(rng, length, 1, env_spec, 1, _state_sizes(agent.online))
                one["observation"][:] = np.nan
                unroll = {k: v[:, 0] for k, v in one.items() if k != "initial_state"}
                unroll["initial_state"] = [s[0] for s in one["initial_state"]]
                unrolls.append(unroll)
            agent.add_unrolls(unrolls)
            metrics = agent.train_from_replay()
        else:
            batch = _batch(rng, 6, 8, env_spec, agent.dist.param_size, _state_sizes(agent.network))
            batch["observation"][2, 3] = np.nan
            batch["policy_version"] = np.zeros((6, 8), np.int64)
            metrics = agent.train(batch)
        moved = max(
            float(np.nanmax(np.abs(np.array(_numpy(v)) - b), initial=0.0))
            if np.isfinite(_numpy(v)).all()
            else float("inf")
            for v, b in zip(floating, before)
        )
        results[name] = {
            "moved": moved,
            "steps_before": steps_before,
            "steps_after": int(_numpy(agent.optimizer.iterations)),
            "grad_norm": float(metrics["grad_norm"]),
        }
    return results


def main(argv):
    if argv[0] == "train":
        result = train(int(argv[1]), argv[2])
    elif argv[0] == "skip":
        result = skip(int(argv[1]))
    elif argv[0] == "runtime":
        result = runtime()
    else:
        raise SystemExit(f"unknown scenario {argv[0]}")
    print(json.dumps(result, default=float))


if __name__ == "__main__":
    main(sys.argv[1:])
