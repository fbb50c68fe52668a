"""`seedrl train`: the whole Experiment on one machine, as local processes.

Starts one learner and ``spec.actors.replicas`` actors (the very entry points the Kubernetes
pods run), connected over a unix socket in the run directory. Before either, the env spec is
derived from the Experiment by making the env once with the actors' own code (``python -m
seedrl.actors --env-spec-out``): a run whose env cannot be made fails at once with the reason,
and the learner serves that spec (``--env-spec``), checking every actor against it.

Shows progress read from the learner's ``status.json``. Restarts the learner by its exit code,
as the cluster's learner Job does (:mod:`seedrl.common.exit_codes`): 0 ends the run (finished);
STOPPED (stopped by a signal from outside, after its final checkpoint) is run again without
counting; a crash is run again from the last checkpoint up to a limit; a permanent code
(configuration, checkpoint location) is not retried. Restarts an actor that exits while the run
goes on (whatever its exit code, with backoff and a cap, saying why on the console). On Ctrl-C
it stops the learner first (it writes a final checkpoint and the summary), then the actors,
leaving no process behind. A run with no env step for ``spec.budget.noProgressSeconds`` cannot
make progress: it is stopped and reported as failed with the reason (stop_reason
``no_progress``).

A run directory is used by one launcher at a time: :func:`prepare_run_dir` takes an exclusive
``flock`` on its ``launcher.lock`` before it changes anything, and a second ``seedrl train`` (or
``--resume``) of the same run is refused. The kernel drops the lock when the process ends,
however it ends; the learner inherits it, so that a launcher killed outright leaves the run
locked until its learner has written its final checkpoint and gone.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

import yaml

from seedrl.common import finite_json
from seedrl.common.config import Experiment, dump_experiment, to_document
from seedrl.common.exit_codes import PERMANENT, RETRY_FREELY, ExitCode, describe
from seedrl.common.learner_status import LearnerStatus
from seedrl.common.resume import bound_changes
from seedrl.common.storage import (
    CHECKPOINT_MANIFEST,
    NotFound,
    StorageError,
    open_store,
    replace_file,
    with_retries,
)
from seedrl.common.metrics_http import MetricsServer
from seedrl.service.metrics import ExperimentGauges
from seedrl.service.local.processes import Child, child_env, python_module, stop_all

log = logging.getLogger(__name__)

#: How often a crashed process is restarted before the run gives up on it (a process stopped
#: from outside, exit STOPPED, is restarted without counting).
MAX_ACTOR_RESTARTS = 20
MAX_LEARNER_RESTARTS = 3
#: Actor restarts wait 1 s, then twice as long after each quick failure, up to 30 s; an actor
#: that ran this long before it exited starts over at 1 s. Actors are restarted whatever their
#: exit code (a learner's refusal may pass: it restarted, the duplicate stream ended): the cap
#: and spec.budget.noProgressSeconds end a hopeless run instead.
ACTOR_BACKOFF_INITIAL_S = 1.0
ACTOR_BACKOFF_MAX_S = 30.0
ACTOR_HEALTHY_AFTER_S = 60.0
#: The env spec derived from the Experiment, in the run directory (the learner's --env-spec).
ENV_SPEC_FILE = "env_spec.json"
#: Longest that making one env may take (a Football scenario takes seconds; a hung import
#: must not hang the launcher).
ENV_SPEC_TIMEOUT_S = 300.0
#: The stop reason of a run stopped for making no progress.
NO_PROGRESS = "no_progress"
#: The namespace label of a local run's phase series (no Kubernetes namespace here).
LOCAL_NAMESPACE = "local"
#: Seconds between rewrites of cost.json while the run goes on.
COST_EVERY_S = 10.0


class RunDirError(RuntimeError):
    """The run directory cannot be used as asked (exists without --resume, or mismatched)."""


class RunInUse(RunDirError):
    """Another launcher (or the learner it left running) holds the run directory."""


#: The file in a run directory that its launcher holds an exclusive ``flock`` on.
LOCK_FILE = "launcher.lock"


class RunDir:
    """A run directory that this process holds: :attr:`path`, locked until :meth:`release` (or
    until this object is collected, or the process ends).

    Keep it while the run goes on, and hand :meth:`fileno` to the processes that should hold
    the lock with it (the learner: see :class:`LocalRun`).

    Raises:
      RunInUse: another process holds the lock.
    """

    def __init__(self, path: str):
        self.path = path
        lock = open(os.path.join(path, LOCK_FILE), "a+b")  # noqa: SIM115 - held while it lives
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read(32).decode("ascii", "replace").strip()
            lock.close()
            raise RunInUse(
                f"{path} is in use by another seedrl train"
                + (f" (started as pid {holder})" if holder.isdigit() else "")
                + ": wait for it to end, or stop it (Ctrl-C) first; nothing was changed"
            ) from None
        try:  # for the message above only: the lock, not this number, says who holds it
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n".encode())
            lock.flush()
        except OSError:
            pass
        self._lock = lock

    def fileno(self) -> int:
        """The locked file's descriptor (a process that inherits it holds the lock too)."""
        return self._lock.fileno()

    def release(self) -> None:
        """Drops the lock (a process that inherited it still holds it)."""
        self._lock.close()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def prepare_run_dir(exp: Experiment, runs_dir: str, resume: bool) -> RunDir:
    """Creates ``runs_dir/<name>`` or checks it for a resume, locks it (:class:`RunDir`), and
    writes the resolved config.

    Raises:
      RunDirError: if the run exists and ``resume`` is false (nothing is overwritten), or a
        resume changes a field that the checkpoint depends on.
      RunInUse: another launcher uses the run directory (nothing is changed).
    """
    run_dir = os.path.abspath(os.path.join(runs_dir, exp.metadata.name))
    config_path = os.path.join(run_dir, "config.yaml")
    exists = (
        "{run_dir} already exists: pass --resume to continue that run, or pick another name "
        "with --set metadata.name=NEW-NAME"
    )
    if os.path.exists(run_dir) and not resume:
        raise RunDirError(exists.format(run_dir=run_dir))
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    try:
        os.mkdir(run_dir)  # of two new runs of one name, only one creates it
    except FileExistsError:
        if not resume:
            raise RunDirError(exists.format(run_dir=run_dir)) from None
    held = RunDir(run_dir)
    try:
        _check_and_write(exp, run_dir, config_path, resume)
    except BaseException:
        held.release()
        raise
    return held


def _check_and_write(exp: Experiment, run_dir: str, config_path: str, resume: bool) -> None:
    """What :func:`prepare_run_dir` does once it holds the run directory."""
    if resume:
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as fh:
                old = yaml.safe_load(fh) or {}
            changed = bound_changes(old.get("spec") or {}, to_document(exp.spec))
            if changed:
                raise RunDirError(
                    f"{'.'.join(changed[0].split('.')[:2])} differs from the run being "
                    f"resumed ({config_path}); its checkpoints only fit the original — start "
                    f"a new run instead"
                )
        for stale in ("summary.json", "status.json"):
            path = os.path.join(run_dir, stale)
            if os.path.exists(path):
                os.replace(path, path + ".previous")
    replace_file(config_path, dump_experiment(exp).encode())


def check_checkpoint_location(exp: Experiment, resume: bool) -> None:
    """Refuses a new run whose ``spec.checkpoint.uri`` already holds another run's checkpoints.

    The learner resumes from whatever checkpoints it finds, and its retention would in time
    delete the older ones: so taking over a location must be asked for with ``--resume``.
    The default location (inside the run directory) is covered by :func:`prepare_run_dir`.

    Raises:
      RunDirError: the location holds checkpoints and ``resume`` is false, or it cannot be
        read.
    """
    uri = exp.spec.checkpoint.uri
    if not uri or resume:
        return
    try:
        store = open_store(uri)
        with_retries(lambda: store.read(CHECKPOINT_MANIFEST), what=f"reading {uri}", attempts=3)
    except NotFound:
        return
    except (StorageError, ValueError, OSError) as exc:
        raise RunDirError(f"cannot read the checkpoint location {uri}: {exc}") from None
    raise RunDirError(
        f"{uri} already holds checkpoints: pass --resume to continue from them, "
        f"or set another spec.checkpoint.uri"
    )


def learner_address(run_dir: str) -> str:
    """A unix socket in the run directory (no port to collide), or loopback TCP if too long."""
    path = os.path.join(run_dir, "learner.sock")
    if len(path) < 100:  # sun_path holds 108 bytes
        return f"unix:{path}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def read_json(path: str) -> dict | None:
    """A JSON file's content, or None if it is missing or being replaced."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def read_status(path: str) -> LearnerStatus | None:
    """The learner's ``status.json``, or None if it is missing, being replaced or unreadable."""
    try:
        with open(path, "rb") as fh:
            return LearnerStatus.from_json(fh.read())
    except (OSError, ValueError):
        return None


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on loopback now (held open together while choosing)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def last_line(path: str, limit: int = 8192) -> str:
    """The last non-empty line of a text file (read from its end only), or ''."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def start_env_spec(config_path: str, out_path: str, env: dict[str, str] | None = None):
    """Starts making the Experiment's env once, with the actors' code, to write its spec to
    ``out_path`` (atomically); :func:`env_spec_result` waits for it. Started beside the
    learner, it runs while the learner imports TensorFlow instead of before it."""
    import subprocess

    return subprocess.Popen(
        python_module("seedrl.actors", "--config", config_path, "--env-spec-out", out_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def env_spec_result(proc, config_path: str, timeout: float = ENV_SPEC_TIMEOUT_S) -> str | None:
    """Waits for :func:`start_env_spec`'s process; returns None, or why the env cannot be
    made (one line)."""
    import subprocess

    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"making one {config_path} env took over {timeout:.0f} s"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = lines[-1] if lines else f"exit code {proc.returncode}"
    return reason.removeprefix("cannot make environments: ")


def derive_env_spec(
    config_path: str,
    out_path: str,
    env: dict[str, str] | None = None,
    timeout: float = ENV_SPEC_TIMEOUT_S,
) -> str | None:
    """Makes the Experiment's env once, with the actors' code, and writes its spec to
    ``out_path``; returns None, or why the env cannot be made (one line)."""
    return env_spec_result(start_env_spec(config_path, out_path, env), config_path, timeout)


#: Prometheus file-based service discovery of a local run's /metrics endpoints.
PROMETHEUS_TARGETS = "prometheus-targets.json"


def write_prometheus_targets(run_dir: str, experiment: str, ports: list[int]) -> str:
    """Writes ``prometheus-targets.json`` (Prometheus ``file_sd_configs`` format) listing the
    learner's, each actor's and the launcher's endpoints (``ports`` in that order), labelled
    as the cluster's PodMonitor labels pods."""
    groups = [
        {
            "targets": [f"127.0.0.1:{ports[0]}"],
            "labels": {"seedrl_experiment": experiment, "seedrl_role": "learner"},
        }
    ]
    groups += [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {
                "seedrl_experiment": experiment,
                "seedrl_role": "actor",
                "seedrl_actor": str(i),
            },
        }
        for i, port in enumerate(ports[1:-1])
    ]
    groups.append(
        {
            "targets": [f"127.0.0.1:{ports[-1]}"],
            "labels": {"seedrl_experiment": experiment, "seedrl_role": "launcher"},
        }
    )
    path = os.path.join(run_dir, PROMETHEUS_TARGETS)
    replace_file(path, finite_json.dumps(groups, indent=1).encode())
    return path


class LocalRun:
    """One Experiment run as local processes.

    Args:
      exp: the validated Experiment.
      run_dir: its prepared run directory (see :func:`prepare_run_dir`).
      on_status: called with each new status snapshot (progress display).
      learner_args: extra learner flags, e.g. ``--no-train`` for throughput measurements.
      cost: prices the run's processes into ``cost.json`` (see :mod:`seedrl.service.local.cost`);
        the final report is left in ``cost_status``.
      run_lock: the run directory's lock (:func:`prepare_run_dir`): the learner inherits it, so
        that the directory stays locked until the learner is gone, even if this process is
        killed before it.
    """

    def __init__(
        self,
        exp: Experiment,
        run_dir: str,
        on_status: Callable[[LearnerStatus], None] | None = None,
        learner_args: tuple[str, ...] = (),
        cost=None,
        run_lock: RunDir | None = None,
    ):
        self.exp = exp
        self.cost = cost
        self.cost_status: dict | None = None
        self.run_dir = run_dir
        self.on_status = on_status
        self.address = learner_address(run_dir)
        self._stop_signal: int | None = None
        config = os.path.join(run_dir, "config.yaml")
        self.config_path = config
        self.env_spec_path = os.path.join(run_dir, ENV_SPEC_FILE)
        env = child_env()
        self.child_env = env
        #: Why the run failed to progress (the summary's ``error``), or None.
        self.failure: str | None = None
        #: The latest actor exit worth telling, with the last line of its log.
        self.last_actor_failure: str | None = None
        self._restart_at: dict[int, float] = {}
        self._quick_failures = [0] * exp.spec.actors.replicas
        self._given_up: set[int] = set()
        replicas = exp.spec.actors.replicas
        #: Loopback ports of each process's /metrics: the learner's, then each actor's, then
        #: this launcher's own (the run's phase and cost, as the operator exports them).
        self.metrics_ports = free_ports(2 + replicas)
        self.gauges = ExperimentGauges()
        self._metrics_server = MetricsServer(
            self.gauges.registry, host="127.0.0.1", port=self.metrics_ports[-1]
        )
        self.learner = Child(
            "learner",
            python_module(
                "seedrl.learner",
                "--config",
                config,
                "--run-dir",
                run_dir,
                "--listen",
                self.address,
                "--env-spec",
                self.env_spec_path,
                "--env-spec-wait",
                str(ENV_SPEC_TIMEOUT_S),
                "--metrics-address",
                f"127.0.0.1:{self.metrics_ports[0]}",
                *learner_args,
            ),
            os.path.join(run_dir, "learner.log"),
            env,
            pass_fds=(run_lock.fileno(),) if run_lock is not None else (),
        )
        self.actors = [
            Child(
                f"actor-{i}",
                python_module(
                    "seedrl.actors",
                    "--config",
                    config,
                    "--learner",
                    self.address,
                    "--index",
                    str(i),
                    "--actor-id",
                    f"{exp.metadata.name}-local-{i}",
                    "--metrics-address",
                    f"127.0.0.1:{self.metrics_ports[1 + i]}",
                ),
                os.path.join(run_dir, f"actor-{i}.log"),
                env,
            )
            for i in range(replicas)
        ]
        self.targets_path = write_prometheus_targets(run_dir, exp.metadata.name, self.metrics_ports)

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Asks the run to stop (from a signal handler): the learner checkpoints and exits."""
        self._stop_signal = signum

    def run(self) -> dict:
        """Runs to the end; returns the summary (the learner's, or one describing a failure)."""
        summary_path = os.path.join(self.run_dir, "summary.json")
        status_path = os.path.join(self.run_dir, "status.json")
        self._metrics_server.start()
        name = self.exp.metadata.name
        self.gauges.set_phase(name, LOCAL_NAMESPACE, "Running")
        # The env spec is made while the learner imports TensorFlow (it waits for the file,
        # --env-spec-wait); the actors start once the env is known to be makeable.
        deriving = start_env_spec(self.config_path, self.env_spec_path, self.child_env)
        self.learner.start()
        cannot = env_spec_result(deriving, self.config_path)
        if cannot is not None:
            stop_all([self.learner], signal.SIGTERM, timeout=10)
            self.failure = f"actors could not start: {cannot}"
            return self._end({"experiment": name, "env_steps": 0}, summary_path)
        for actor in self.actors:
            actor.start()
        forwarded = False
        last_status_time = None
        last_cost = time.monotonic()
        env_steps = None
        last_progress = time.monotonic()
        status: LearnerStatus | None = None
        try:
            while True:
                if self._stop_signal is not None and not forwarded:
                    self.learner.signal(self._stop_signal)
                    forwarded = True
                code = self.learner.poll()
                if code is not None:
                    if forwarded or not self._restart(self.learner, code, MAX_LEARNER_RESTARTS):
                        break
                fresh = read_status(status_path)
                if fresh and fresh.time != last_status_time:
                    status = fresh
                    last_status_time = status.time
                    if env_steps is not None and status.env_steps > env_steps:
                        last_progress = time.monotonic()
                    env_steps = status.env_steps
                    if self.on_status:
                        self.on_status(status)
                if not forwarded:
                    finished = status is not None and status.state == "finished"
                    self._supervise_actors(finished)
                    if not finished:
                        self.failure = self._no_progress(time.monotonic() - last_progress, status)
                        if self.failure:
                            break
                if self.cost and time.monotonic() - last_cost >= COST_EVERY_S:
                    last_cost = time.monotonic()
                    self.cost.update([self.learner, *self.actors], env_steps or 0, running=True)
                    self.gauges.set_cost(name, LOCAL_NAMESPACE, self.cost.last_report)
                time.sleep(0.25)
        finally:
            # The learner goes first so that it can checkpoint; actors see `finished` or lose
            # their stream, and are stopped next.
            stop_all(
                [self.learner],
                signal.SIGTERM,
                timeout=self.exp.spec.learner.termination_grace_period_seconds,
            )
            stop_all(self.actors, signal.SIGTERM, timeout=10)
        summary = read_json(summary_path)
        if summary is None:
            summary = {
                "experiment": self.exp.metadata.name,
                "stop_reason": "learner_failed",
                "learner_exit_code": self.learner.poll(),
                "log": self.learner.log_path,
            }
        return self._end(summary, summary_path, env_steps or 0)

    def _end(self, summary: dict, summary_path: str, env_steps: int = 0) -> dict:
        """Completes and writes the summary (a failure's reason, when there is one), prices
        the run and sets its final phase."""
        name = self.exp.metadata.name
        if self.failure:
            summary = {**summary, "stop_reason": NO_PROGRESS, "error": self.failure}
        if self.failure or summary.get("stop_reason") == "learner_failed":
            try:
                replace_file(summary_path, finite_json.dumps(summary, indent=1).encode())
            except OSError as exc:  # the console still says why the run ended
                log.error("could not write %s: %s", summary_path, exc)
        if self.cost:
            self.cost_status = self.cost.update(
                [self.learner, *self.actors], summary.get("env_steps", env_steps), running=False
            )
            self.gauges.set_cost(name, LOCAL_NAMESPACE, self.cost.last_report)
        failed = summary.get("stop_reason") in ("learner_failed", "train_error", NO_PROGRESS)
        self.gauges.set_phase(name, LOCAL_NAMESPACE, "Failed" if failed else "Succeeded")
        self._metrics_server.stop()
        return summary

    def _no_progress(self, idle: float, status: LearnerStatus | None) -> str | None:
        """Why the run cannot make progress, or None: no env step for noProgressSeconds, or
        every actor given up on."""
        limit = self.exp.spec.budget.no_progress_seconds
        hopeless = len(self._given_up) == len(self.actors)
        if not hopeless and not (limit and idle >= limit):
            return None
        refusal = status.last_refusal if status else None
        detail = self.last_actor_failure or (
            f"the learner refused them: {refusal}"
            if refusal
            else f"no actor sent an env step (see {self.run_dir}/actor-*.log)"
        )
        if hopeless and f"code {int(ExitCode.ENV_FAILED)}:" in detail:
            return f"every actor gave up on its environments: {detail}"
        if status is None or (not status.env_steps and status.state != "running"):
            return f"actors could not start: {detail}"
        if hopeless:
            return f"every actor failed {MAX_ACTOR_RESTARTS + 1} times: {detail}"
        return f"no env steps for {idle:.0f} s: {detail}"

    def _supervise_actors(self, finished: bool) -> None:
        """Restarts actors that exited while the run goes on, with backoff and a cap."""
        now = time.monotonic()
        for i, actor in enumerate(self.actors):
            if i in self._given_up or actor.proc is None:
                continue
            code = actor.poll()
            if code is None:
                continue
            if i not in self._restart_at:  # an exit not seen before
                if finished:
                    continue  # told by the learner that the run is finished
                ran = now - actor.started_at
                self._quick_failures[i] = (
                    1 if ran >= ACTOR_HEALTHY_AFTER_S else self._quick_failures[i] + 1
                )
                why = last_line(actor.log_path)
                left = code in (ExitCode.OK, ExitCode.STOPPED)  # finished or stopped, not a crash
                if not left:
                    self.last_actor_failure = f"{actor.name} exited with code {code}" + (
                        f": {why}" if why else ""
                    )
                if code == ExitCode.ENV_FAILED:
                    # Its envs keep raising: a restarted actor would make the same envs.
                    self._given_up.add(i)
                    log.error("%s gave up on its environments: %s", actor.name, why)
                    continue
                if actor.restarts >= MAX_ACTOR_RESTARTS:
                    self._given_up.add(i)
                    log.error(
                        "%s exited with code %s after %d restarts; giving up on it: %s",
                        actor.name,
                        code,
                        actor.restarts,
                        why,
                    )
                    continue
                delay = min(
                    ACTOR_BACKOFF_MAX_S,
                    ACTOR_BACKOFF_INITIAL_S * 2 ** (self._quick_failures[i] - 1),
                )
                self._restart_at[i] = now + delay
                if not left:
                    log.warning(
                        "%s exited with code %s: %s; restarting it in %.0f s (%d/%d)",
                        actor.name,
                        code,
                        why or "(its log is empty)",
                        delay,
                        actor.restarts + 1,
                        MAX_ACTOR_RESTARTS,
                    )
            elif now >= self._restart_at[i]:
                del self._restart_at[i]
                if finished:
                    continue
                actor.restarts += 1
                if code in (ExitCode.OK, ExitCode.STOPPED):
                    log.warning(
                        "%s left while the run goes on; restarting it (%d/%d)",
                        actor.name,
                        actor.restarts,
                        MAX_ACTOR_RESTARTS,
                    )
                actor.start()

    @staticmethod
    def _restart(child: Child, code: int, limit: int) -> bool:
        """Runs ``child`` again if its exit ``code`` asks for it; returns whether it did."""
        if should_restart(code, child.restarts, limit):
            if code not in RETRY_FREELY:
                child.restarts += 1
            log.warning(
                "%s exited with %s; %s",
                child.name,
                describe(code),
                "starting it again"
                if code in RETRY_FREELY
                else f"restarting it ({child.restarts}/{limit})",
            )
            child.start()
            return True
        if code != ExitCode.OK:
            log.warning("%s exited with %s; not restarting it", child.name, describe(code))
        return False


def should_restart(code: int, restarts: int, limit: int) -> bool:
    """Whether a process that exited with ``code`` is run again, as the learner Job's
    podFailurePolicy decides in a cluster: never once finished (0) or for a permanent code;
    always when stopped from outside (STOPPED); after a crash while under ``limit`` restarts."""
    if code == ExitCode.OK or code in PERMANENT:
        return False
    return code in RETRY_FREELY or restarts < limit
