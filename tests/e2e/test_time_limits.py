"""Every agent bootstraps time-limit truncations from the value of the final observation.

A real env under a time limit stepped by the actors' EnvBatch, feeding the learner's runtime
and each agent's training (no gRPC in between: the wire is tested elsewhere). On the Conveyor
env the observation a time limit interrupts (C) is worth 1 / (1 - gamma) and the one before it
(B) gamma / (1 - gamma); B is only ever followed by a truncation, so its value is right only if
the learner bootstraps from the final observation's value: from B's own (the old
approximation) it would sink to 0.
"""

import time

import numpy as np
import pytest

from seedrl.actors.envs import EnvBatch
from seedrl.common.config import EnvConfig, parse_experiment
from seedrl.learner.agents import build_agent
from seedrl.learner.runtime import LearnerRuntime
from seedrl.learner.streams import StepData

GAMMA = 0.9
CONVEYOR = EnvConfig(
    id="SeedrlTest/Conveyor-v0", imports=["support.seedrl_test_envs"], max_episode_steps=2
)
# Feed-forward for every agent, r2d2 included (whose default is recurrent).
MLP = {"hiddenSizes": [32], "activation": "relu", "denseSize": 32, "lstmSize": 0}
#: name -> (agent section, learner section, training steps the 24,000 env steps allow).
AGENTS = {
    "vtrace": (
        {"vtrace": {"discount": GAMMA, "entropyCost": 0.0}},
        {"unrollLength": 4, "batchSize": 8},
        700,
    ),
    "ppo": (
        {"ppo": {"discount": GAMMA, "lambda": 0.95, "minibatches": 2, "epochs": 4}},
        {"unrollLength": 4, "batchSize": 16},
        350,
    ),
    # 4,000 sequences of 6 steps at SEED's replay ratio of 1.5: ~180 steps of 32.
    "r2d2": (
        {
            "r2d2": {
                "discount": GAMMA,
                "trainLength": 6,
                "burnIn": 0,
                "sequencePeriod": 6,
                "nStep": 1,
                "minReplaySize": 16,
                "targetUpdatePeriod": 20,
                "replayCapacity": 2000,
            }
        },
        {"batchSize": 32},
        170,
    ),
}


def _experiment(name):
    agent, learner, _ = AGENTS[name]
    return parse_experiment(
        {
            "metadata": {"name": "t"},
            "spec": {
                "env": {"id": CONVEYOR.id},
                "agent": {"name": name, "network": MLP, **agent},
                "learner": {
                    "inferenceMaxWaitMs": 0,
                    "queueCapacity": 256,
                    "optimizer": {"learningRate": 0.003, "epsilon": 1e-7},
                    **learner,
                },
                "actors": {"replicas": 1, "envsPerActor": 16},
            },
        }
    )


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_truncated_episodes_bootstrap_from_the_final_observation(name):
    runtime = LearnerRuntime(_experiment(name), build_agent, train=True)
    envs = EnvBatch(CONVEYOR, 16, seeds=list(range(16)))
    try:
        stream = runtime.open_stream("a", 16, envs.spec)
        obs, k = envs.reset(), envs.num_envs
        rewards, terminated, truncated = (
            np.zeros(k, np.float32),
            np.zeros(k, bool),
            np.zeros(k, bool),
        )
        finals = (np.zeros(0, np.int64), None)
        for _ in range(1500):
            actions = runtime.submit(
                stream, StepData(obs, rewards, terminated, truncated, finals[0], finals[1]), []
            ).result(60)
            obs, rewards, terminated, truncated, _, finals = envs.step(actions)
        deadline = time.monotonic() + 120
        while runtime.learner_steps < AGENTS[name][2] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runtime.train_error is None
        agent = runtime.agent
        cells = np.eye(3, dtype=np.float32)
        value = agent.inference(cells, agent.initial_state(3), np.zeros(3, np.float32))[0]["value"]
        a, b, c = value
        # C's value is learned from episodes that start there; B's only through the bootstrap
        # from C at the time limit: B / C tends to gamma (0.9), where bootstrapping from B's
        # own value would drive B towards 0.
        assert c > 3.0, value
        assert 0.6 < b / c < 1.1, value
        assert 0.6 < a / b < 1.1, value
    finally:
        runtime.shutdown()
        envs.close()
