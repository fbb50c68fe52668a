"""Costs of pod histories against sums worked out by hand (on the round rates of
support/cost_data.py's PRICES, never by calling the code under test)."""

import pytest

from seedrl.service import cost
from seedrl.service.cost import PodRecord, Resources
from support.cost_data import ACTOR, H, PRICES, T0, TPU_LEARNER, tpu_pod


def test_a_tpu_learner_and_spot_actors_for_two_hours():
    records = [PodRecord("learner", "learner", TPU_LEARNER, False, ((T0, T0 + 2 * H),))]
    records += [
        PodRecord(f"actor-{i}", "actor", ACTOR, True, ((T0, T0 + 2 * H),)) for i in range(3)
    ]
    report = cost.compute_cost(records, PRICES, env_frames=50_000_000, now=T0 + 2 * H)
    # learner: 2 h x (4 chips x 1.2 + 8 vCPU x 0.04 + 32 GiB x 0.005) = 2 x 5.28
    assert report.roles["learner"].accelerator_usd == pytest.approx(9.6)
    assert report.roles["learner"].cpu_usd == pytest.approx(0.64)
    assert report.roles["learner"].memory_usd == pytest.approx(0.32)
    assert report.roles["learner"].total_usd == pytest.approx(10.56)
    # actors on Spot: 3 x 2 h x (2 vCPU x 0.01 + 4 GiB x 0.001) = 6 x 0.024
    assert report.roles["actor"].total_usd == pytest.approx(0.144)
    assert report.roles["actor"].pods == 3 and report.roles["actor"].pod_hours == 6
    assert report.total_usd == pytest.approx(10.704)
    assert report.usd_per_million_frames == pytest.approx(10.704 / 50)  # 0.21408
    assert report.usd_per_hour == 0  # every pod has finished
    status = report.to_status()
    assert status["totalUsd"] == pytest.approx(10.704)
    assert status["priceTable"] == "test-1" and status["breakdown"]["actor"]["cpuUsd"] == 0.12


def test_a_restarted_learner_is_priced_for_each_pod_and_not_for_the_gap():
    # Pod A failed after 1 h; its replacement B was scheduled 5 minutes later and ran 1 h.
    records = [
        PodRecord("learner-a", "learner", TPU_LEARNER, False, ((T0, T0 + H),)),
        PodRecord("learner-b", "learner", TPU_LEARNER, False, ((T0 + H + 300, T0 + 2 * H + 300),)),
    ]
    report = cost.compute_cost(records, PRICES, now=T0 + 3 * H)
    assert report.roles["learner"].total_usd == pytest.approx(2 * 5.28)
    assert report.roles["learner"].pods == 2
    assert report.usd_per_million_frames is None  # no frames yet


def test_a_suspended_interval_costs_nothing():
    # Ran 30 min, suspended (no pods) for 1 h, resumed and still running 30 min later.
    records = [
        PodRecord("learner-1", "learner", TPU_LEARNER, False, ((T0, T0 + 1800),)),
        PodRecord("actor-1", "actor", ACTOR, False, ((T0, T0 + 1800),)),
        PodRecord("learner-2", "learner", TPU_LEARNER, False, ((T0 + 5400, None),)),
        PodRecord("actor-2", "actor", ACTOR, False, ((T0 + 5400, None),)),
    ]
    report = cost.compute_cost(records, PRICES, env_frames=2_000_000, now=T0 + 7200)
    # 1 h of each: learner 5.28; actor on demand 2 x 0.04 + 4 x 0.005 = 0.10
    assert report.total_usd == pytest.approx(5.38)
    assert report.usd_per_hour == pytest.approx(5.38)  # the resumed pair still runs
    assert report.usd_per_million_frames == pytest.approx(2.69)


def test_overlapping_intervals_of_one_pod_count_once_and_gpu_spot_rates_apply():
    gpu = Resources(
        cpu=4, memory_gib=16, accelerator="gpu", accelerator_type="nvidia-l4", accelerator_count=2
    )
    record = PodRecord("g", "learner", gpu, True, ((T0, T0 + H), (T0 + 1800, T0 + 2 * H)))
    report = cost.compute_cost([record], PRICES, now=T0 + 5 * H)
    # 2 h x (2 x 0.2 + 4 x 0.01 + 16 x 0.001) = 2 x 0.456
    assert report.total_usd == pytest.approx(0.912)


def test_an_unpriced_accelerator_and_an_unknown_role_are_errors():
    odd = Resources(
        cpu=1, memory_gib=1, accelerator="tpu", accelerator_type="v9", accelerator_count=1
    )
    with pytest.raises(KeyError, match="no tpu 'v9'"):
        cost.compute_cost(
            [PodRecord("x", "learner", odd, False, ((T0, T0 + 1),))], PRICES, now=T0 + 1
        )
    with pytest.raises(ValueError, match="role"):
        cost.compute_cost([PodRecord("x", "evaluator", ACTOR, False, ())], PRICES, now=T0)


def test_the_operator_step_stores_records_and_prices_the_whole_history():
    # First observation: learner pod a running for 1 h so far.
    stored, report = cost.price_pods([], [tpu_pod("a", T0)], PRICES, env_frames=10**6, now=T0 + H)
    assert report.total_usd == pytest.approx(5.28)
    # Pod a crashed at 1 h 30 min and is gone; its replacement b runs since 2 h.
    final_a = tpu_pod("a", T0, phase="Failed", finished=T0 + 1.5 * H)
    stored, report = cost.price_pods(stored, [final_a], PRICES, now=T0 + 1.6 * H)
    stored, report = cost.price_pods(
        stored, [tpu_pod("b", T0 + 2 * H)], PRICES, env_frames=4 * 10**6, now=T0 + 3 * H
    )
    assert sorted(r["name"] for r in stored) == ["a", "b"]
    # 1.5 h + 1 h at 5.28 $/h; per million of 4M frames
    assert report.total_usd == pytest.approx(2.5 * 5.28)
    assert report.usd_per_million_frames == pytest.approx(2.5 * 5.28 / 4)


def test_ten_thousand_pods_keep_the_stored_records_bounded_and_the_cost_exact():
    """An Experiment whose actors churn through 10,000 pods (preemptions, scaling): the records
    the operator stores stay bounded (an Experiment object is limited to 1.5 MiB), and the
    cost is what pricing every pod one by one gives."""
    import datetime as dt
    import json

    from seedrl.service import cost as cost_mod

    prices = cost_mod.load_prices(environ={})

    def iso(ts):
        return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def pod(i, start, end=None):
        spot = i % 3 == 0
        state = (
            {"terminated": {"exitCode": 0, "startedAt": iso(start), "finishedAt": iso(end)}}
            if end
            else {"running": {"startedAt": iso(start)}}
        )
        return {
            "metadata": {
                "name": f"exp-actors-{i:05d}",
                "labels": {"seedrl.dev/experiment": "exp", "seedrl.dev/role": "actor"},
            },
            "spec": {
                "nodeSelector": {"cloud.google.com/gke-spot": "true"} if spot else {},
                "containers": [
                    {
                        "name": "actor",
                        "resources": {"requests": {"cpu": "1" if i % 2 else "2", "memory": "2Gi"}},
                    }
                ],
            },
            "status": {
                "phase": "Succeeded" if end else "Running",
                "startTime": iso(start),
                "containerStatuses": [{"name": "actor", "state": state}],
            },
        }

    t0 = 1_800_000_000.0
    stored: list[dict] = []
    every = []
    biggest = 0
    # 500 polls, 20 pods each: every pod is seen running at one poll and found gone at the
    # next, which ends it there (merge_records closes a gone pod at the observation).
    for poll in range(500):
        now = t0 + 60 * (poll + 1)
        live = [pod(poll * 20 + k, now - 60 + k) for k in range(20)]
        stored, report = cost_mod.price_pods(stored, live, prices, now=now)
        every += [pod(poll * 20 + k, now - 60 + k, now + 60) for k in range(20)]
        biggest = max(biggest, len(json.dumps(stored)))
    # The last pods end: priced once more with none listed.
    end = t0 + 60 * 501
    stored, report = cost_mod.price_pods(stored, [], prices, now=end)
    exact = cost_mod.compute_cost([cost_mod.pod_record(p) for p in every], prices, now=end)
    assert len(every) == 10_000
    assert report.roles["actor"].pods == 10_000
    assert report.total_usd == pytest.approx(exact.total_usd, rel=1e-9)
    assert report.roles["actor"].pod_hours == pytest.approx(
        exact.roles["actor"].pod_hours, rel=1e-9
    )
    # Bounded: the recent pods one by one and a record per machine for the rest, far below
    # what 10,000 records take (~2 MB) and etcd's 1.5 MiB.
    assert biggest < 64 * 1024, biggest
    assert len(stored) <= cost_mod.KEEP_GONE_RECORDS + 20 + 4
    assert "10000 x" in report.description or "actors 10000" in report.description
