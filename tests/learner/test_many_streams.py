"""Many concurrent actor streams against one learner: none dropped, every step served."""

import asyncio

from seedrl.actors.client import ActorClient, Backoff
from seedrl.actors.envs import EnvBatch
from seedrl.common.config import EnvConfig

STREAMS = 64
STEPS = 40


async def _run_one(client: ActorClient, steps: int) -> None:
    """Streams until ``steps`` env steps are done, then leaves (cancelling its stream)."""
    task = asyncio.ensure_future(client.run())
    while client.env_steps < steps:
        if task.done():
            task.result()  # a failed stream fails the test
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_many_concurrent_streams_are_all_served(learner):
    clients = [
        ActorClient(
            EnvBatch(EnvConfig(id="CartPole-v1"), 1, [i]),
            "test-exp",
            f"many-{i}",
            learner.address,
            backoff=Backoff(0.01, 0.2),
        )
        for i in range(STREAMS)
    ]

    async def main():
        await asyncio.wait_for(asyncio.gather(*(_run_one(c, STEPS) for c in clients)), 120)

    asyncio.run(main())
    assert all(c.connections == 1 for c in clients)  # nobody was dropped and reconnected
    assert all(c.env_steps >= STEPS for c in clients)
    # The learner counted every step it was sent, and batched across streams.
    assert learner.runtime.env_steps >= STREAMS * STEPS
    assert learner.runtime.batcher.mean_batch_size > 1.5
