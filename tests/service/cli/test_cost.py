"""`seedrl cost NAME`: a local run's cost.json, or a cluster Experiment's status.cost read by
the real kubernetes client from a real HTTP server."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from seedrl.common.config import parse_experiment
from seedrl.service import cost
from seedrl.service.cli.main import main
from seedrl.service.cli.cost import cluster_cost
from seedrl.service.local.cost import LocalCost, read_cost_file
from seedrl.service.local.processes import Child

ROOT = Path(__file__).resolve().parents[3]
PRICES = cost.parse_prices(
    {
        "version": "cli-1",
        "region": "r",
        "takenOn": "2026-11-01",
        "currency": "USD",
        "cpu": {"onDemand": 0.04, "spot": 0.01},
        "memory": {"onDemand": 0.005, "spot": 0.001},
        "tpu": {},
        "gpu": {},
    }
)
#: The default machine types priced at PRICES: learner 4 x 0.04 + 16 x 0.005, actor
#: 1 x 0.04 + 2 x 0.005 (USD per hour).
LEARNER_HOURLY, ACTOR_HOURLY = 0.24, 0.05


def finished_children(tmp_path, names):
    """Real child processes that ran and exited, with their recorded intervals."""
    children = [Child(n, [sys.executable, "-c", "pass"], str(tmp_path / f"{n}.log")) for n in names]
    for child in children:
        child.start()
    for child in children:
        child.proc.wait(timeout=60)
        assert child.poll() == 0
    return children


def test_a_local_run_is_priced_per_process_and_a_resume_adds_to_it(tmp_path):
    exp = parse_experiment({"metadata": {"name": "loc"}, "spec": {"actors": {"replicas": 2}}})
    children = finished_children(tmp_path, ["learner", "actor-0", "actor-1"])
    status = LocalCost(exp, str(tmp_path), PRICES).update(
        children, env_steps=500_000, running=False
    )
    data = read_cost_file(str(tmp_path))
    assert [r["name"] for r in data["records"]] == ["learner@1", "actor-0@1", "actor-1@1"]
    seconds = {c.name: c.intervals[0][1] - c.intervals[0][0] for c in children}
    assert all(s > 0 for s in seconds.values())
    expected = (
        seconds["learner"] * LEARNER_HOURLY
        + (seconds["actor-0"] + seconds["actor-1"]) * ACTOR_HOURLY
    ) / 3600
    assert status["totalUsd"] == pytest.approx(expected, abs=1e-6)
    assert status["usdPerMillionFrames"] == pytest.approx(expected / 0.5, abs=1e-5)
    assert status["description"].startswith("learner 1 x cpu 4 vCPU/16 GiB ")
    assert "actors 2 x cpu 1 vCPU/2 GiB" in status["description"]

    # Resumed: a second session's processes are added to the first's.
    again = finished_children(tmp_path, ["learner", "actor-0", "actor-1"])
    resumed = LocalCost(exp, str(tmp_path), PRICES)
    assert resumed.session == 2
    status2 = resumed.update(again, env_steps=900_000, running=False)
    names = [r["name"] for r in read_cost_file(str(tmp_path))["records"]]
    assert names == ["learner@1", "actor-0@1", "actor-1@1", "learner@2", "actor-0@2", "actor-1@2"]
    assert status2["totalUsd"] > status["totalUsd"]
    assert status2["breakdown"]["learner"]["pods"] == 2


def test_seedrl_cost_reprices_a_local_run(tmp_path, capsys):
    exp = parse_experiment({"metadata": {"name": "loc"}})
    run_dir = tmp_path / "loc"
    run_dir.mkdir()
    LocalCost(exp, str(run_dir), PRICES).update(
        finished_children(tmp_path, ["learner", "actor-0"]), env_steps=10, running=False
    )
    data = read_cost_file(str(run_dir))
    # Stretch the records to 1 h each so the report's figures are round.
    for r in data["records"]:
        r["intervals"] = [[1_800_000_000.0, 1_800_003_600.0]]
    (run_dir / "cost.json").write_text(json.dumps(data))
    (tmp_path / "p.yaml").write_text(
        yaml.safe_dump(
            {
                "version": "cli-2",
                "cpu": {"onDemand": 0.04, "spot": 0.01},
                "memory": {"onDemand": 0.005, "spot": 0.001},
            }
        )
    )
    assert (
        main(["cost", "loc", "--runs-dir", str(tmp_path), "--prices", str(tmp_path / "p.yaml")])
        == 0
    )
    out = capsys.readouterr().out
    assert f"total:      ${LEARNER_HOURLY + ACTOR_HOURLY:,.4f} USD" in out  # $0.2900
    assert "cli-2" in out and "local run" in out


class ExperimentServer(BaseHTTPRequestHandler):
    """Serves one Experiment object the way the API server does, 404 for anything else."""

    obj: dict = {}

    def do_GET(self):  # http.server's naming
        meta = self.obj["metadata"]
        path = (
            f"/apis/seedrl.dev/v1alpha1/namespaces/{meta['namespace']}/experiments/{meta['name']}"
        )
        if self.path.split("?")[0] == path:
            body, code = json.dumps(self.obj).encode(), 200
        else:
            body = json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                }
            ).encode()
            code = 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    records = [
        cost.PodRecord(
            "l", "learner", cost.Resources(4, 16), False, ((1_800_000_000.0, 1_800_007_200.0),)
        )
    ]
    status_cost = cost.compute_cost(
        records, PRICES, env_frames=4_000_000, now=1_800_007_200.0, description="learner 1 x cpu"
    ).to_status()
    ExperimentServer.obj = {
        "apiVersion": "seedrl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "exp1", "namespace": "team"},
        "spec": {},
        "status": {"cost": status_cost},
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), ExperimentServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", status_cost
    finally:
        server.shutdown()
        server.server_close()


def test_the_cluster_path_reads_status_cost_through_the_kubernetes_client(api_server):
    from kubernetes import client

    url, status_cost = api_server
    config = client.Configuration(host=url)
    with client.ApiClient(config) as api:
        assert cluster_cost("exp1", "team", api) == ("team", status_cost)
        with pytest.raises(client.ApiException):
            cluster_cost("missing", "team", api)


def test_seedrl_cost_reads_a_cluster_experiment_from_the_kubeconfig(api_server, tmp_path):
    url, status_cost = api_server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "test", "context": {"cluster": "c", "user": "u", "namespace": "team"}}
                ],
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "seedrl.service.cli",
            "cost",
            "exp1",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Experiment team/exp1\n")  # the kubeconfig's namespace
    # 2 h x 0.24 $/h = 0.48; per 1M of 4M frames: 0.12
    assert "total:      $0.4800 USD" in out.stdout
    assert "$0.1200" in out.stdout
