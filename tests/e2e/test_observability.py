"""Debian's real Prometheus scrapes two real local runs (PPO and R2D2, so that agent-specific
panels have data); every query of every Grafana dashboard must parse and return data from
them, and the alert rules load and evaluate."""

import json
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
import yaml

from e2e.test_train import ROOT, processes_mentioning, start, wait_for
from seedrl.service.generate import dashboards

RULES = ROOT / "helm" / "seedrl-operator" / "rules" / "seedrl-alerts.yaml"
RUNS = {
    # Its learning rate decays over maxEnvSteps, which these time-limited runs leave at 0.
    "obs-ppo": ("examples/cartpole-ppo.yaml", ["spec.learner.optimizer.linearDecay=false"]),
    "obs-r2d2": (
        "examples/cartpole-r2d2.yaml",
        ["spec.actors.replicas=2", "spec.agent.r2d2.minReplaySize=40"],
    ),
}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:  # 400 carries the parse error
        return json.load(exc)


@pytest.fixture
def prometheus(tmp_path):
    """Starts prometheus on loopback, scraping every second the endpoints the runs list in
    their prometheus-targets.json, with seedrl's alert rules loaded."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: run `make prometheus` (Debian's prometheus package)"
    port = _free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "seedrl",
                "file_sd_configs": [
                    {
                        "files": [
                            str(tmp_path / name / "prometheus-targets.json") for name in RUNS
                        ],
                        "refresh_interval": "1s",
                    }
                ],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - the child writes it
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def ready():
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        try:
            return (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2).status == 200
            )
        except OSError:
            return False

    try:
        wait_for(ready, 60, "prometheus to be ready")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@pytest.mark.prometheus
def test_every_dashboard_query_returns_data_from_real_runs(tmp_path, prometheus):
    runs = []
    for name, (example, overrides) in RUNS.items():
        cmd = [
            sys.executable,
            "-m",
            "seedrl.service.cli",
            "train",
            str(ROOT / example),
            "--runs-dir",
            str(tmp_path),
            "--quiet",
            "--set",
            f"metadata.name={name}",
            "--set",
            "spec.budget.maxEnvSteps=0",
            "--set",
            "spec.budget.maxSeconds=240",
            "--set",
            "spec.budget.targetReturn=null",
            "--set",
            "spec.checkpoint.intervalSeconds=3",
        ]
        for o in overrides:
            cmd += ["--set", o]
        runs.append(start(cmd))
    checks = [
        (
            uid,
            title,
            expr.replace("$experiment", "obs-ppo|obs-r2d2").replace("$__rate_interval", "10s"),
        )
        for uid in dashboards.DASHBOARDS
        for title, expr in dashboards.queries(dashboards.build(uid))
    ]
    missing = checks
    try:

        def all_answered():
            nonlocal missing
            for proc in runs:
                assert proc.poll() is None, proc.communicate()[0][-3000:]
            still = []
            for uid, title, expr in missing:
                answer = _query(prometheus, expr)
                # A query that does not parse fails at once, with Prometheus's reason.
                assert answer["status"] == "success", (uid, title, expr, answer)
                if not answer["data"]["result"]:
                    still.append((uid, title, expr))
            missing = still
            return not missing

        try:
            wait_for(all_answered, 200, "every panel query to return data")
        except AssertionError:
            pytest.fail(
                f"{len(missing)} of {len(checks)} panel queries returned no data: "
                + "; ".join(f"{uid} / {title}: {expr}" for uid, title, expr in missing)
            )
        # Both runs' processes are scraped, and the alert rules loaded and evaluate cleanly.
        up = _query(prometheus, "count by (seedrl_role) (up == 1)")["data"]["result"]
        roles = {r["metric"]["seedrl_role"]: int(r["value"][1]) for r in up}
        assert roles == {"learner": 2, "actor": 4, "launcher": 2}
        rules = json.load(
            urllib.request.urlopen(f"http://127.0.0.1:{prometheus}/api/v1/rules", timeout=10)
        )["data"]["groups"]
        evaluated = [r for g in rules for r in g["rules"]]
        assert len(evaluated) == 5 and all(r["health"] == "ok" for r in evaluated), evaluated
        assert not [r for r in evaluated if r["state"] == "firing"]
    finally:
        for proc in runs:
            proc.send_signal(signal.SIGINT)
        for proc in runs:
            try:
                proc.communicate(timeout=120)
            finally:
                proc.kill()
    # Nothing of the runs is left (prometheus, the fixture's, stops after the test).
    assert not processes_mentioning(f"--runs-dir {tmp_path}")
    assert not processes_mentioning(f"--config {tmp_path}")
