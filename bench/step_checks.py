"""Micro-benchmark: what the learner's per-message checks cost (issue 19).

Times, per Step message, the decode the learner did before the checks (dtype, shape, byte count,
env-id permutation, finite rewards) against :class:`seedrl.learner.server.StepChecker` (the same,
plus finite observations, rewards within maxAbsReward, and the per-env episode tally), and the
per-batch test that keeps actions in the action space. Both sides run here in alternating rounds
on the same messages, timed in process CPU time (the best round of each kept), so their ratio
holds even on a loaded machine; absolute figures do not.

  python bench/step_checks.py [--repeat N] [--json FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from seedrl.common import finite_json, seedrl_pb2  # noqa: E402
from seedrl.common.hardware import machine_facts  # noqa: E402
from seedrl.common.wire import EnvSpec, WireError, decode_array, encode_array  # noqa: E402
from seedrl.learner.server import StepChecker  # noqa: E402

CASES = {
    "CartPole, 16 envs": (EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2), 16),
    "CartPole, 1024 envs": (EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2), 1024),
    "Pong frames, 16 envs": (EnvSpec("ALE/Pong-v5", "uint8", (84, 84, 4), "int32", (), 6), 16),
    "Football 115 floats, 8 envs": (EnvSpec("Football/x", "float32", (115,), "int32", (), 19), 8),
    "HalfCheetah float64, 8 envs": (
        EnvSpec("HalfCheetah-v5", "float64", (17,), "float32", (6,), 0),
        8,
    ),
}


def decode_before(msg: seedrl_pb2.Step, k: int, env_ids: list[int], spec: EnvSpec):
    """The learner's decode of a Step before issue 19 (learner/server.py at fa4ba8d)."""
    ids = list(msg.env_ids)
    in_order = ids == env_ids
    if not in_order:
        if len(ids) != k:
            raise WireError("env_ids")
        if sorted(ids) != env_ids:
            raise WireError("permutation")
    obs = decode_array(
        msg.observations, "step.observations", spec.observation_dtype, (k,) + spec.observation_shape
    )
    for name in ("rewards", "terminated", "truncated"):
        if len(getattr(msg, name)) != k:
            raise WireError(name)
    rewards = np.asarray(msg.rewards, dtype=np.float32)
    if not np.isfinite(rewards).all():
        raise WireError("rewards")
    terminated = np.asarray(msg.terminated, dtype=bool)
    truncated = np.asarray(msg.truncated, dtype=bool)
    for ep in msg.episodes:
        if ep.env_id >= k:
            raise WireError("episodes")
    return obs, rewards, terminated, truncated


def _messages(spec: EnvSpec, k: int, n: int, rng, done_rate: float) -> list[seedrl_pb2.Step]:
    """``n`` Steps of a stream, the first with no outcome; in each, an env's episode ends with
    probability ``done_rate``, reported with its return (the tally verifies them)."""
    shape = (k,) + spec.observation_shape
    if spec.observation_dtype == "uint8":
        obs = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        obs = rng.normal(size=shape).astype(spec.observation_dtype)
    tensor = encode_array(obs)
    returns, lengths = np.zeros(k), np.zeros(k, np.int64)
    out = []
    for t in range(n):
        rewards = rng.normal(size=k).astype(np.float32) if t else np.zeros(k, np.float32)
        done = (rng.random(k) < done_rate) if t else np.zeros(k, bool)
        episodes = []
        if t:
            returns += rewards
            lengths += 1
            for i in np.flatnonzero(done):
                episodes.append(
                    seedrl_pb2.Episode(
                        env_id=int(i), episode_return=returns[i], length=int(lengths[i])
                    )
                )
            returns[done], lengths[done] = 0.0, 0
        out.append(
            seedrl_pb2.Step(
                env_ids=list(range(k)),
                observations=tensor,
                rewards=rewards.tolist(),
                terminated=done.tolist(),
                truncated=[False] * k,
                episodes=episodes,
            )
        )
    return out


def _per_call_us(fn, items, repeat: int = 1) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, (time.process_time() - start) / len(items))
    return best * 1e6


def _legal_actions_us(spec: EnvSpec, batch: int, repeat: int) -> float:
    """The runtime's per-batch action test (LearnerRuntime._legal_actions) on legal actions."""
    from seedrl.learner.runtime import LearnerRuntime

    class _Holder:
        env_spec = spec
        invalid_actions = 0

    rng = np.random.default_rng(0)
    if spec.discrete:
        actions = rng.integers(0, spec.num_actions, batch).astype(np.int32)
    else:
        actions = rng.normal(size=(batch,) + spec.action_shape).astype(np.float32)
    holder = _Holder()
    return _per_call_us(lambda a: LearnerRuntime._legal_actions(holder, a), [actions] * 200, repeat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7, help="timing rounds (the best is kept)")
    p.add_argument("--steps", type=int, default=400, help="messages per round")
    p.add_argument(
        "--done-rate",
        type=float,
        default=0.02,
        help="probability that an env's episode ends in a step (CartPole early in "
        "training: ~0.05; Pong: ~0.0002)",
    )
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    print(
        f"{'case':<30} {'before us':>10} {'checked us':>11} {'added us':>9} "
        f"{'ratio':>6} {'actions us':>11}"
    )
    for name, (spec, k) in CASES.items():
        messages = _messages(spec, k, args.steps, rng, args.done_rate)
        env_ids = list(range(k))

        # Bound as defaults: each case's closures measure that case (ruff B023).
        def checked(items, k=k, spec=spec):
            checker = StepChecker(k, spec, 1e6)  # a fresh stream: its first Step comes first
            for m in items:
                checker.decode(m)

        before = after = math.inf
        for _ in range(args.repeat):  # alternating, so that both see the same load
            before = min(
                before,
                _per_call_us(
                    lambda m, k=k, ids=env_ids, spec=spec: decode_before(m, k, ids, spec), messages
                ),
            )
            after = min(after, _per_call_us(checked, [messages]) / len(messages))
        actions = _legal_actions_us(spec, 64, args.repeat)
        rows.append(
            {
                "case": name,
                "envs": k,
                "before_us": before,
                "checked_us": after,
                "added_us": after - before,
                "ratio": after / before,
                "legal_actions_us_per_batch_of_64": actions,
            }
        )
        print(
            f"{name:<30} {before:>10.1f} {after:>11.1f} {after - before:>9.1f} "
            f"{after / before:>6.2f} {actions:>11.1f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            finite_json.dump({"machine": machine_facts(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
