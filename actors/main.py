"""Actor entry point: ``python -m actors --config experiment.yaml --learner ADDRESS``.

Steps ``spec.actors.envsPerActor`` environments and streams them to the learner until it says
the run is finished (exit 0). Exits 2 on a bad Experiment or environment, 3 if the learner
refuses this actor, and 0 on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys

import grpc
import numpy as np

from common.config import ConfigError, load_experiment

log = logging.getLogger("actors")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="actors", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the Experiment YAML file")
    p.add_argument("--learner", required=True, help="learner address: host:port or unix:PATH")
    p.add_argument("--index", type=int, default=0, help="this actor's index among the replicas")
    p.add_argument("--actor-id", help="stable id across reconnects (default: name-host-index)")
    p.add_argument("--tls-ca", help="PEM CA bundle: connect with TLS and verify the learner")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def env_seeds(seed: int, index: int, num_envs: int) -> list[int]:
    """Distinct, reproducible seeds for the envs of actor ``index``."""
    return [int(s) for s in np.random.SeedSequence([seed, index]).generate_state(num_envs)]


async def _run(client) -> None:
    task = asyncio.ensure_future(client.run())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped by signal after %d env steps", client.env_steps)


def main(argv=None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s actor-{args.index} %(levelname)s %(message)s")
    try:
        exp = load_experiment(args.config)
    except ConfigError as exc:
        print(f"invalid experiment {args.config}:\n{exc}", file=sys.stderr)
        return 2
    from actors.client import ActorClient, ActorRefused
    from actors.envs import EnvBatch

    k = exp.spec.actors.envs_per_actor
    try:
        envs = EnvBatch(exp.spec.env, k, env_seeds(exp.spec.seed, args.index, k))
    except ValueError as exc:
        print(f"cannot make environments: {exc}", file=sys.stderr)
        return 2
    credentials = None
    if args.tls_ca:
        with open(args.tls_ca, "rb") as fh:
            credentials = grpc.ssl_channel_credentials(root_certificates=fh.read())
    actor_id = args.actor_id or f"{exp.metadata.name}-{socket.gethostname()}-{args.index}"
    client = ActorClient(envs, exp.metadata.name, actor_id, args.learner, credentials)
    try:
        asyncio.run(_run(client))
    except ActorRefused as exc:
        log.error("the learner refused this actor: %s", exc)
        return 3
    finally:
        envs.close()
    log.info("done after %d env steps (pid %d)", client.env_steps, os.getpid())
    return 0
