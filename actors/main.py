"""Actor entry point: ``python -m seedrl.actors --config experiment.yaml --learner ADDRESS``.

Steps ``spec.actors.envsPerActor`` environments and streams them to the learner until it says
the run is finished (exit 0). Exits (:class:`seedrl.common.exit_codes.ExitCode`) BAD_CONFIG (2)
on a bad Experiment or environment, REFUSED (3) if the learner refuses this actor, and STOPPED
(75) on SIGTERM/SIGINT: the run is not finished, so a launcher runs it again.

``--env-spec-out FILE`` instead makes one environment, writes its wire spec as JSON and exits
(OK, or BAD_CONFIG with the reason when the env cannot be made): the learner serves that spec,
derived from the Experiment by the very code the actors step with. ``--env-spec-message FILE``
does the same into a container's termination message: in a cluster the operator runs it as its
own Job under the actors' identity, so no user env code runs in the learner's pod.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import sys

import grpc
import numpy as np

from seedrl.common.config import ConfigError, load_experiment
from seedrl.common.exit_codes import ExitCode

log = logging.getLogger("actors")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="actors", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the Experiment YAML file")
    p.add_argument(
        "--learner",
        help="learner address: host:port or unix:PATH (required unless --env-spec-out or "
        "--env-spec-message)",
    )
    p.add_argument(
        "--env-spec-out",
        metavar="FILE",
        help="make one env, write its spec as JSON to FILE ('-': stdout) and exit",
    )
    p.add_argument(
        "--env-spec-message",
        metavar="FILE",
        help="make one env, write its spec in place to FILE as a container termination "
        "message (a file the kubelet mounts: written, never replaced; compressed past 4096 "
        "bytes) and exit",
    )
    p.add_argument(
        "--index",
        type=_index,
        default=0,
        help="this actor's index among the replicas, or 'auto' to be granted one "
        "by the learner (unique among live actors: a Deployment's pods have "
        "no ordinal)",
    )
    p.add_argument(
        "--actor-id",
        help="stable id across reconnects, unique among the actors "
        "(default: name-pod-index, the pod from $POD_NAME, else "
        "the host name)",
    )
    p.add_argument(
        "--tls-ca",
        help="PEM CA bundle: connect with TLS and verify the learner's "
        "certificate, for the host of --learner",
    )
    p.add_argument(
        "--tls-server-name",
        help="with --tls-ca: the name the learner's certificate must carry when "
        "--learner is another address for it (an IP, a tunnel)",
    )
    p.add_argument(
        "--metrics-address",
        help="host:port of the HTTP endpoint with /metrics and /healthz (default "
        "0.0.0.0:spec.actors.metricsPort); 'off' serves none",
    )
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if not args.learner and not (args.env_spec_out or args.env_spec_message):
        p.error("--learner is required (unless --env-spec-out or --env-spec-message)")
    return args


def _index(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'auto', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _until_signal(coroutine):
    """Runs ``coroutine`` to its result, or None once SIGTERM or SIGINT stops it."""

    async def run():
        task = asyncio.ensure_future(coroutine)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            return await task
        except asyncio.CancelledError:
            return None

    return asyncio.run(run())


def env_seeds(seed: int, index: int, num_envs: int) -> list[int]:
    """Distinct, reproducible seeds for the envs of actor ``index``."""
    return [int(s) for s in np.random.SeedSequence([seed, index]).generate_state(num_envs)]


def make_env_batches(exp, index: int) -> list:
    """The actor's envs, split into one batch per stream (``spec.actors.streamsPerActor``).

    Raises:
      ValueError: if the environments cannot be made.
    """
    from seedrl.actors.envpool_envs import EnvpoolBatch, resolve_backend, usable_cores
    from seedrl.actors.envs import EnvBatch
    from seedrl.actors.process_envs import ProcessEnvBatch

    actors = exp.spec.actors
    k = actors.envs_per_actor
    seeds = env_seeds(exp.spec.seed, index, k)
    n = max(1, min(actors.streams_per_actor, k))
    bounds = np.linspace(0, k, n + 1).round().astype(int)
    envpool = resolve_backend(exp.spec.env) == "envpool"
    batches = []
    try:
        for j in range(n):
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            if envpool:
                # envpool steps its envs in threads of its own, outside the GIL: worker
                # processes would add nothing. processesPerActor, when set, sizes the threads;
                # otherwise the streams share the cores (while one waits for the learner,
                # another steps).
                share = actors.processes_per_actor or usable_cores()
                threads = max(1, round(share * (hi - lo) / k))
                batches.append(EnvpoolBatch(exp.spec.env, hi - lo, seeds[lo:hi], threads))
            elif actors.processes_per_actor:
                procs = max(1, round(actors.processes_per_actor * (hi - lo) / k))
                batches.append(ProcessEnvBatch(exp.spec.env, hi - lo, seeds[lo:hi], procs))
            else:
                batches.append(EnvBatch(exp.spec.env, hi - lo, seeds[lo:hi]))
    except BaseException:
        for b in batches:
            b.close()
        raise
    return batches


async def _run(clients) -> bool:
    """Streams every client until the learner says finished (True) or a signal stops them
    (False)."""
    tasks = [asyncio.ensure_future(c.run()) for c in clients]
    loop = asyncio.get_running_loop()

    def cancel():
        for t in tasks:
            t.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, cancel)
    try:
        # One refused stream refuses the whole actor: the others would fail the same way.
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                cancel()
                raise t.exception()
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        log.info("stopped by signal after %d env steps", sum(c.env_steps for c in clients))
        return False
    return True


def serve_metrics(args, exp, clients):
    """Starts this actor's /metrics endpoint; None if disabled or the port is taken (the
    actor steps on without it: metrics matter less than training)."""
    from seedrl.actors.metrics import ActorMetrics
    from seedrl.common.metrics_http import MetricsServer, bind_address

    bind = bind_address(args.metrics_address, exp.spec.actors.metrics_port)
    if bind is None:
        return None
    host, port = bind
    metrics = ActorMetrics(exp.metadata.name, args.index, clients)
    # Ready while at least one stream is connected to the learner.
    http = MetricsServer(
        metrics.registry, host=host, port=port, ready=lambda: any(c.connected for c in clients)
    )
    try:
        log.info("metrics on http://%s:%d/metrics", host, http.start())
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", host, port, exc)
        return None
    return http


def write_env_spec(exp, path: str, message: bool = False) -> int:
    """Writes the env spec of ``spec.env`` as JSON to ``path`` ('-': stdout); returns the exit
    code (2, with the reason on stderr, when the env cannot be made).

    Args:
      message: ``path`` is the container's termination message file
        (:meth:`~seedrl.common.wire.EnvSpec.to_message`), which the operator reads once the
        env-spec Job's pod has stopped: written in place, since the kubelet mounts that one
        file and a rename cannot replace it.
    """
    import json

    from seedrl.actors.envs import probe_spec
    from seedrl.common.wire import WireError

    try:
        spec = probe_spec(exp.spec.env)
    except ValueError as exc:
        print(f"cannot make environments: {exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    if message:
        try:
            text = spec.to_message()
        except WireError as exc:
            print(f"cannot report the env spec: {exc}", file=sys.stderr)
            return ExitCode.BAD_CONFIG
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return ExitCode.OK
    text = json.dumps(spec.to_json(), sort_keys=True) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        from seedrl.common.files import replace_file

        replace_file(path, text.encode())
    return ExitCode.OK


def main(argv=None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        exp = load_experiment(args.config)
    except ConfigError as exc:
        print(f"invalid experiment {args.config}:\n{exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    if args.env_spec_out:
        return write_env_spec(exp, args.env_spec_out)
    if args.env_spec_message:
        return write_env_spec(exp, args.env_spec_message, message=True)
    from seedrl.actors.client import ActorClient, ActorRefused, request_index
    from seedrl.actors.envs import EnvsKeepFailing

    credentials = None
    if args.tls_ca:
        with open(args.tls_ca, "rb") as fh:
            credentials = grpc.ssl_channel_credentials(root_certificates=fh.read())
    # The pod's name: unique per pod, and what the learner tells actors apart by (it refuses
    # a second live stream of one id).
    host = os.environ.get("POD_NAME") or socket.gethostname()
    if args.index == "auto":
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s actor-? %(levelname)s %(message)s"
        )
        args.actor_id = args.actor_id or f"{exp.metadata.name}-{host}"
        try:
            index = _until_signal(
                request_index(
                    args.learner,
                    exp.metadata.name,
                    args.actor_id,
                    credentials,
                    tls_server_name=args.tls_server_name,
                )
            )
        except ActorRefused as exc:
            log.error("the learner refused this actor: %s", exc)
            return ExitCode.REFUSED
        if index is None:
            return ExitCode.STOPPED
        args.index = index
        for handler in logging.getLogger().handlers:
            handler.setFormatter(
                logging.Formatter(f"%(asctime)s actor-{args.index} %(levelname)s %(message)s")
            )
        log.info("the learner granted index %d", args.index)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s actor-{args.index} %(levelname)s %(message)s",
    )

    try:
        batches = make_env_batches(exp, args.index)
    except ValueError as exc:
        print(f"cannot make environments: {exc}", file=sys.stderr)
        return ExitCode.BAD_CONFIG
    actor_id = args.actor_id or f"{exp.metadata.name}-{host}-{args.index}"
    # Several streams per actor: while the learner answers one, the actor steps another.
    firsts = np.cumsum([0] + [envs.num_envs for envs in batches])
    clients = [
        ActorClient(
            envs,
            exp.metadata.name,
            actor_id if len(batches) == 1 else f"{actor_id}/{j}",
            args.learner,
            credentials,
            actor_index=args.index,
            first_env=int(firsts[j]),
            tls_server_name=args.tls_server_name,
        )
        for j, envs in enumerate(batches)
    ]
    http = serve_metrics(args, exp, clients)
    # Everything alive now lives as long as the process: keep full garbage collections from
    # walking it (they paused every stream for ~40 ms each here).
    gc.freeze()
    try:
        finished = asyncio.run(_run(clients))
    except ActorRefused as exc:
        log.error("the learner refused this actor: %s", exc)
        return ExitCode.REFUSED
    except EnvsKeepFailing as exc:
        # The whole traceback in the log, then one line last: what the launcher reports.
        log.error("giving up on the environments; their last error:\n%s", exc.last_error.rstrip())
        print(f"{exc}", file=sys.stderr, flush=True)
        return ExitCode.ENV_FAILED
    finally:
        if http:
            http.stop()
        for envs in batches:
            envs.close()
    log.info(
        "%s after %d env steps (pid %d)",
        "done" if finished else "stopped",
        sum(c.env_steps for c in clients),
        os.getpid(),
    )
    return ExitCode.OK if finished else ExitCode.STOPPED
