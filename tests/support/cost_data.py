"""A price table with round rates and Kubernetes pod objects, for the cost tests: their
expected figures are written out as arithmetic on the rates of PRICES, never by calling the
code under test."""

from seedrl.service import cost
from seedrl.service.cost import Resources

PRICES = cost.parse_prices(
    {
        "version": "test-1",
        "region": "test-region",
        "takenOn": "2026-11-01",
        "currency": "USD",
        "cpu": {"onDemand": 0.04, "spot": 0.01},
        "memory": {"onDemand": 0.005, "spot": 0.001},
        "tpu": {"v5e": {"onDemand": 1.2, "spot": 0.4}},
        "gpu": {"nvidia-l4": {"onDemand": 0.6, "spot": 0.2}},
    }
)
H = 3600.0
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TPU_LEARNER = Resources(
    cpu=8, memory_gib=32, accelerator="tpu", accelerator_type="v5e", accelerator_count=4
)
ACTOR = Resources(cpu=2, memory_gib=4)


def iso(ts):
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tpu_pod(uid, start, phase="Running", finished=None, deleted=None, restarts=0):
    container_state = (
        {"terminated": {"startedAt": iso(start), "finishedAt": iso(finished), "exitCode": 1}}
        if finished
        else {"running": {"startedAt": iso(start + 40 + 60 * restarts)}}
    )
    meta = {"name": f"exp-learner-{uid}", "uid": uid, "labels": {"seedrl.dev/role": "learner"}}
    if deleted:
        meta["deletionTimestamp"] = iso(deleted)
    return {
        "metadata": meta,
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "1"}}}],
            "containers": [
                {
                    "name": "learner",
                    "resources": {
                        "requests": {"cpu": "7500m", "memory": "30Gi"},
                        "limits": {"google.com/tpu": "4", "memory": "30Gi"},
                    },
                },
                {"name": "metrics", "resources": {"requests": {"cpu": "500m", "memory": "2048Mi"}}},
            ],
        },
        "status": {
            "phase": phase,
            "startTime": iso(start),
            "containerStatuses": [
                {"name": "learner", "restartCount": restarts, "state": container_state}
            ],
        },
    }
