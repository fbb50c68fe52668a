"""The pods the operator renders, run as local processes: the learner Job's and the actor
Deployment's container commands, reading the ConfigMap's config.yaml, over TCP on loopback.
Only the paths and the Service name are mapped to this machine; the flags are the pods' own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import re

from seedrl.common.exit_codes import ExitCode
from seedrl.common.learner_status import STATES, LearnerStatus
from seedrl.common.config import parse_experiment
from seedrl.service.operator import reconcile
from seedrl.service.operator.render import render
from seedrl.service.operator.render.tls import learner_dns_names
from seedrl.service.operator.reconciler import fetch_url
from support.pods import derive_env_spec, free_port, localize

ROOT = Path(__file__).resolve().parents[2]


def write_certificate(tmp_path, experiment_name, namespace):
    """The operator's self-signed certificate of the learner, where the pods mount it."""
    from seedrl.service.operator import certificates

    (tmp_path / "tls").mkdir()
    for key, data in certificates.self_signed(
        learner_dns_names(experiment_name, namespace)
    ).items():
        (tmp_path / "tls" / key).write_bytes(data)


def test_rendered_learner_and_actor_commands_train_to_the_budget(tmp_path):
    port, metrics = free_port(), free_port()
    exp = parse_experiment(
        {
            "metadata": {"name": "pods", "namespace": "ml"},
            "spec": {
                "learner": {"port": port, "metricsPort": metrics, "batchSize": 4},
                # Both actors share one port here (one pod each in a cluster): the second goes
                # without.
                "actors": {"replicas": 2, "envsPerActor": 4, "metricsPort": free_port()},
                "budget": {"maxEnvSteps": 6000},
            },
        }
    )
    objs = {o["kind"]: o for o in render(exp)}
    (tmp_path / "config.yaml").write_text(objs["ConfigMap"]["data"]["config.yaml"])
    write_certificate(tmp_path, "pods", "ml")
    service = objs["Service"]["metadata"]["name"]
    learner = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    actor = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # The env-spec Job first: the env spec, made with the actors' code, as the learner mounts it.
    spec = derive_env_spec(exp, tmp_path, env)
    assert spec["env_id"] == "CartPole-v1" and spec["observation_shape"] == [4]
    # The actors first, as a Deployment's pods often are, and the learner once both ask it
    # for an index: an actor still importing TensorFlow on a loaded machine when the learner
    # reached its budget never heard that the run was over, and retried (as it must: in a
    # cluster the operator scales its Deployment to 0).
    actor_logs = [tmp_path / f"actor-{i}.log" for i in range(2)]
    actors = []
    for pod, path in zip(
        ("pods-actors-5d8c9b7f4-x2k9q", "pods-actors-5d8c9b7f4-m7w4z"), actor_logs
    ):
        with path.open("w") as out:
            actors.append(
                subprocess.Popen(
                    localize(actor["command"], tmp_path, service, port),
                    cwd=ROOT,
                    env={**env, "POD_NAME": pod},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
    deadline = time.monotonic() + 240
    while not all("no index from the learner" in path.read_text() for path in actor_logs):
        assert time.monotonic() < deadline and all(a.poll() is None for a in actors), [
            path.read_text()[-2000:] for path in actor_logs
        ]
        time.sleep(0.05)
    procs = [
        subprocess.Popen(
            localize(learner["command"], tmp_path, service, port),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        *actors,
    ]
    # Meanwhile, read the learner's /status as the operator does, through its parser.
    seen = []
    url = f"http://127.0.0.1:{metrics}/status"
    deadline = time.monotonic() + 240
    while procs[0].poll() is None and time.monotonic() < deadline:
        try:
            seen.append(LearnerStatus.from_json(fetch_url(url, timeout=1.0)))
        except OSError:
            pass  # not serving yet, or already gone
        time.sleep(0.05)
    streamed = []
    try:
        codes = [procs[0].wait(timeout=240)]
        # The actor Deployment's pods run until the operator scales it to 0 once the learner's
        # Job is done. An actor that streamed heard `finished` and ended by itself. One still
        # asking for its index or connecting when the learner reached its budget (it asks
        # again within a second, but a loaded machine may let the other actor train the whole
        # budget first) retries; it is stopped as that scale-down stops it, with SIGTERM.
        for actor, path in zip(actors, actor_logs):
            streamed.append("connected to" in path.read_text())
            if not streamed[-1]:
                actor.terminate()
            codes.append(actor.wait(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = [procs[0].stdout.read(), *(path.read_text() for path in actor_logs)]
    assert any(streamed), logs
    # SIGTERM before an actor's handlers are installed (while it makes its envs) kills it.
    stopped = (ExitCode.OK, ExitCode.STOPPED, -signal.SIGTERM)
    assert codes[0] == 0, logs[0]
    assert all(
        code == 0 if heard else code in stopped for code, heard in zip(codes[1:], streamed)
    ), (codes, logs)
    assert "no --env-spec" not in logs[0]  # it served the derived spec from the start
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 6000 and summary["stop_reason"] == "max_env_steps", summary
    assert seen, "the learner's /status never answered"
    assert {s.state for s in seen} <= set(STATES)
    assert any(s.state == "running" and s.env_steps > 0 for s in seen), seen[-3:]
    assert any(s.episodes > 0 and s.mean_return is not None and s.actors >= 1 for s in seen), seen[
        -3:
    ]
    # The learner granted the two actors distinct indices (`--index auto`).
    granted = [
        int(m.group(1))
        for log in logs[1:]
        for m in [re.search(r"the learner granted index (\d+)", log)]
        if m
    ]
    assert granted and len(set(granted)) == len(granted) and set(granted) <= {0, 1}, logs[1:]
    assert len(granted) >= sum(streamed), logs[1:]
    # The learner left its final status where the kubelet reads a termination message.
    final = reconcile.final_learner_status(
        [
            {
                "metadata": {"name": "l"},
                "status": {
                    "containerStatuses": [
                        {
                            "name": "learner",
                            "state": {
                                "terminated": {
                                    "exitCode": 0,
                                    "message": (tmp_path / "termination-log").read_text(),
                                }
                            },
                        }
                    ]
                },
            }
        ]
    )
    assert final.state == "finished" and final.stop_reason == "max_env_steps"
    assert final.env_steps == summary["env_steps"]
