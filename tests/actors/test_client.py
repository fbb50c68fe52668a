"""The actor's streaming client against a real learner: backoff and reconnect on restart."""

import asyncio
import random
import threading
import time
import types

import numpy as np
import pytest

from seedrl.actors import client as client_module
from seedrl.actors.client import INDEX_RETRY_CAP_S, ActorClient, Backoff, request_index
from seedrl.actors.envs import EnvBatch
from seedrl.common.config import EnvConfig
from support.learner_harness import start_learner, stop_learner


def wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets():
    b = Backoff(initial=0.1, cap=1.0, rng=random.Random(0))
    delays = [b.delay() for _ in range(8)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(d <= 1.0 for d in delays) and delays[-1] >= 0.5
    b.reset()
    assert b.delay() <= 0.1


def test_an_actor_asking_for_its_index_waits_at_most_a_second_between_asks(tmp_path, monkeypatch):
    # Actors usually start long before the learner: however long one has asked, it gets its
    # index within a second of the learner answering (it waited 5-10 s with the streams' cap).
    waits = []

    class Enough(Exception):
        pass

    async def sleep(seconds):
        waits.append(seconds)
        if len(waits) == 12:
            raise Enough
        await asyncio.sleep(0)

    monkeypatch.setattr(client_module, "asyncio", types.SimpleNamespace(sleep=sleep))
    with pytest.raises(Enough):
        asyncio.run(request_index(f"unix:{tmp_path}/nobody.sock", "test-exp", "actor-x"))
    assert max(waits) <= INDEX_RETRY_CAP_S == 1.0
    assert min(waits[-4:]) >= INDEX_RETRY_CAP_S / 2  # still backing off, not hammering


def test_actor_waits_for_the_learner_and_reconnects_after_it_restarts(tmp_path):
    address = f"unix:{tmp_path}/learner.sock"
    envs = EnvBatch(EnvConfig(id="CartPole-v1"), 2, seeds=[0, 1])
    client = ActorClient(
        envs, "test-exp", "actor-x", address, backoff=Backoff(initial=0.05, cap=0.5)
    )
    result = {}

    def run():
        try:
            asyncio.run(client.run())
            result["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()  # before the learner exists: the actor must retry, quickly while the
    # learner has never answered (it is usually starting), with growing waits up to 4x
    wait_for(
        lambda: client.startup_backoff._next >= client.startup_backoff.cap,
        what="the actor to retry",
    )
    assert client.startup_backoff.cap <= 0.1 and client.backoff._next == 0.05
    first = start_learner(address)
    try:
        wait_for(lambda: first.runtime.env_steps > 100, what="steps on the first learner")
    finally:
        stop_learner(first)
    steps_before = client.env_steps
    second = start_learner(address)
    try:
        wait_for(lambda: second.runtime.env_steps > 100, what="steps on the restarted learner")
        assert client.connections == 2
        assert client.env_steps > steps_before
        second.runtime.finish("max_env_steps")
        thread.join(30)
    finally:
        stop_learner(second)
    assert result == {"ok": True}


def test_steps_carry_the_final_observations_of_truncated_episodes():
    from seedrl.common.wire import decode_array

    envs = EnvBatch(EnvConfig(id="CartPole-v1", max_episode_steps=2), 2, seeds=[0, 1])
    client = ActorClient(envs, "exp", "a0", "unix:/nonexistent", first_env=4)
    assert client._hello().hello.first_env == 4
    client._obs = envs.reset()
    outcomes = []
    for _ in range(2):
        (
            client._obs,
            client._rewards,
            client._terminated,
            client._truncated,
            client._episodes,
            client._finals,
        ) = envs.step(np.zeros(2, np.int32))
        outcomes.append(client._step_message().step)
    assert list(outcomes[0].final_env_ids) == []
    assert list(outcomes[1].final_env_ids) == [0, 1]  # the 2-step time limit cut both
    finals = decode_array(outcomes[1].final_observations, "final", "float32", (2, 4))
    np.testing.assert_array_equal(finals, client._finals[1])
    assert not np.array_equal(finals, client._obs)  # not the next episode's first
    envs.close()
