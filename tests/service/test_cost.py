"""Costs of pod histories against sums worked out by hand, quantities, price tables, gauges.

Every expected figure is written out as arithmetic on the rates of PRICES below, never by
calling the code under test.
"""

import pytest
from prometheus_client import CollectorRegistry

from seedrl.common.config import ConfigError
from seedrl.service import cost
from seedrl.service.cost import PodRecord, Resources

# Round rates so that the hand arithmetic stays readable.
PRICES = cost.parse_prices({
    "version": "test-1", "region": "test-region", "takenOn": "2026-11-01", "currency": "USD",
    "cpu": {"onDemand": 0.04, "spot": 0.01},
    "memory": {"onDemand": 0.005, "spot": 0.001},
    "tpu": {"v5e": {"onDemand": 1.2, "spot": 0.4}},
    "gpu": {"nvidia-l4": {"onDemand": 0.6, "spot": 0.2}},
})
H = 3600.0
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TPU_LEARNER = Resources(cpu=8, memory_gib=32, accelerator="tpu", accelerator_type="v5e",
                        accelerator_count=4)
ACTOR = Resources(cpu=2, memory_gib=4)


def iso(ts):
    import datetime as dt
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------- price tables

def test_the_packaged_table_prices_every_documented_accelerator():
    prices = cost.load_prices(environ={})
    assert prices.region == "us-central1" and prices.currency == "USD"
    assert prices.taken_on and prices.version
    assert set(prices.tpu) >= {"v4", "v5e", "v5p", "v6e"}
    assert set(prices.gpu) >= {"nvidia-tesla-t4", "nvidia-l4", "nvidia-tesla-a100",
                               "nvidia-a100-80gb", "nvidia-h100-80gb"}
    for rate in [prices.cpu, prices.memory, *prices.tpu.values(), *prices.gpu.values()]:
        assert 0 < rate.spot < rate.on_demand


def test_an_override_file_replaces_only_what_it_names(tmp_path):
    (tmp_path / "p.yaml").write_text("version: mine-1\ntakenOn: 2026-12-01\n"
                                     "gpu:\n  nvidia-l4: {spot: 0.1}\n"
                                     "tpu:\n  v7: {onDemand: 9, spot: 3}\n")
    default = cost.load_prices(environ={})
    prices = cost.load_prices(str(tmp_path / "p.yaml"), environ={})
    assert prices.version == "mine-1" and prices.taken_on == "2026-12-01"  # a YAML date
    assert prices.gpu["nvidia-l4"].spot == 0.1
    assert prices.gpu["nvidia-l4"].on_demand == default.gpu["nvidia-l4"].on_demand
    assert prices.tpu["v7"].on_demand == 9 and prices.tpu["v5e"] == default.tpu["v5e"]


def test_the_override_comes_from_the_environment_or_a_mounted_config_map(tmp_path):
    mount = tmp_path / "configmap"
    mount.mkdir()
    (mount / "prices.yaml").write_text("version: cm-7\ncpu: {onDemand: 0.05, spot: 0.02}\n")
    assert cost.load_prices(str(mount), environ={}).version == "cm-7"
    assert cost.load_prices(environ={"SEEDRL_PRICES": str(mount)}).cpu.spot == 0.02


def problems_of(tmp_path, text):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        cost.load_prices(str(tmp_path / "bad.yaml"), environ={})
    return dict(err.value.problems)


def test_bad_overrides_name_each_field_path(tmp_path):
    problems = problems_of(tmp_path, "version: x\ncpus: {}\ngpu:\n  nvidia-l4: {spot: cheap}\n"
                                     "  nvidia-t4: {onDemand: 0.1, spot: 0.3}\n"
                                     "memory: {onDemand: -1, spot: 0, perMonth: 3}\n"
                                     "currency: EUR\n")
    assert "unknown field" in problems["prices.cpus"]
    assert problems["prices.gpu.nvidia-l4.spot"] == \
        "must be a number >= 0 (USD per hour), got 'cheap'"
    assert problems["prices.gpu.nvidia-t4.spot"] == "must not exceed onDemand (0.1), got 0.3"
    assert "must be a number >= 0" in problems["prices.memory.onDemand"]
    assert "unknown field" in problems["prices.memory.perMonth"]
    assert "only USD" in problems["prices.currency"]


def test_a_missing_version_or_rate_and_bad_yaml_are_refused(tmp_path):
    problems = problems_of(tmp_path, "version: x\ngpu:\n  nvidia-new: {onDemand: 0.1}\n")
    assert problems["prices.gpu.nvidia-new.spot"] == "required field is missing"
    assert "own version" in problems_of(tmp_path, "cpu: {onDemand: 1, spot: 0.5}\n")[
        "prices.version"]
    assert "not valid YAML" in next(iter(problems_of(tmp_path, "version: [\n").values()))
    with pytest.raises(ConfigError, match="cannot read"):
        cost.load_prices(str(tmp_path / "missing.yaml"), environ={})


# ---------------------------------------------------------------------------- pricing by hand

def test_a_tpu_learner_and_spot_actors_for_two_hours():
    records = [PodRecord("learner", "learner", TPU_LEARNER, False, ((T0, T0 + 2 * H),))]
    records += [PodRecord(f"actor-{i}", "actor", ACTOR, True, ((T0, T0 + 2 * H),))
                for i in range(3)]
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
    records = [PodRecord("learner-a", "learner", TPU_LEARNER, False, ((T0, T0 + H),)),
               PodRecord("learner-b", "learner", TPU_LEARNER, False,
                         ((T0 + H + 300, T0 + 2 * H + 300),))]
    report = cost.compute_cost(records, PRICES, now=T0 + 3 * H)
    assert report.roles["learner"].total_usd == pytest.approx(2 * 5.28)
    assert report.roles["learner"].pods == 2
    assert report.usd_per_million_frames is None  # no frames yet


def test_a_suspended_interval_costs_nothing():
    # Ran 30 min, suspended (no pods) for 1 h, resumed and still running 30 min later.
    records = [PodRecord("learner-1", "learner", TPU_LEARNER, False, ((T0, T0 + 1800),)),
               PodRecord("actor-1", "actor", ACTOR, False, ((T0, T0 + 1800),)),
               PodRecord("learner-2", "learner", TPU_LEARNER, False, ((T0 + 5400, None),)),
               PodRecord("actor-2", "actor", ACTOR, False, ((T0 + 5400, None),))]
    report = cost.compute_cost(records, PRICES, env_frames=2_000_000, now=T0 + 7200)
    # 1 h of each: learner 5.28; actor on demand 2 x 0.04 + 4 x 0.005 = 0.10
    assert report.total_usd == pytest.approx(5.38)
    assert report.usd_per_hour == pytest.approx(5.38)  # the resumed pair still runs
    assert report.usd_per_million_frames == pytest.approx(2.69)


def test_overlapping_intervals_of_one_pod_count_once_and_gpu_spot_rates_apply():
    gpu = Resources(cpu=4, memory_gib=16, accelerator="gpu", accelerator_type="nvidia-l4",
                    accelerator_count=2)
    record = PodRecord("g", "learner", gpu, True, ((T0, T0 + H), (T0 + 1800, T0 + 2 * H)))
    report = cost.compute_cost([record], PRICES, now=T0 + 5 * H)
    # 2 h x (2 x 0.2 + 4 x 0.01 + 16 x 0.001) = 2 x 0.456
    assert report.total_usd == pytest.approx(0.912)


def test_an_unpriced_accelerator_and_an_unknown_role_are_errors():
    odd = Resources(cpu=1, memory_gib=1, accelerator="tpu", accelerator_type="v9",
                    accelerator_count=1)
    with pytest.raises(KeyError, match="no tpu 'v9'"):
        cost.compute_cost([PodRecord("x", "learner", odd, False, ((T0, T0 + 1),))], PRICES,
                          now=T0 + 1)
    with pytest.raises(ValueError, match="role"):
        cost.compute_cost([PodRecord("x", "evaluator", ACTOR, False, ())], PRICES, now=T0)


def test_records_round_trip_through_plain_data():
    record = PodRecord("u-1", "learner", TPU_LEARNER, True, ((T0, T0 + 5), (T0 + 9, None)))
    assert cost.record_from_dict(record.to_dict()) == record


# ---------------------------------------------------------------------------- pod objects

def tpu_pod(uid, start, phase="Running", finished=None, deleted=None, restarts=0):
    container_state = ({"terminated": {"startedAt": iso(start), "finishedAt": iso(finished),
                                       "exitCode": 1}} if finished else
                       {"running": {"startedAt": iso(start + 40 + 60 * restarts)}})
    meta = {"name": f"exp-learner-{uid}", "uid": uid, "labels": {"seedrl.dev/role": "learner"}}
    if deleted:
        meta["deletionTimestamp"] = iso(deleted)
    return {
        "metadata": meta,
        "spec": {
            "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                             "cloud.google.com/gke-tpu-topology": "2x2"},
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "1"}}}],
            "containers": [
                {"name": "learner", "resources": {
                    "requests": {"cpu": "7500m", "memory": "30Gi"},
                    "limits": {"google.com/tpu": "4", "memory": "30Gi"}}},
                {"name": "metrics", "resources": {"requests": {"cpu": "500m",
                                                               "memory": "2048Mi"}}},
            ],
        },
        "status": {"phase": phase, "startTime": iso(start),
                   "containerStatuses": [{"name": "learner", "restartCount": restarts,
                                          "state": container_state}]},
    }


def test_a_tpu_pod_object_becomes_its_record():
    record = cost.pod_record(tpu_pod("a", T0))
    assert record.role == "learner" and record.name == "a" and not record.spot
    assert record.resources == TPU_LEARNER  # 7.5 + 0.5 vCPU, 30 + 2 GiB, 4 v5e chips
    assert record.intervals == ((T0, None),)


def test_pod_histories_with_a_crash_restarts_and_a_deletion_match_the_hand_sum():
    # Pod a: ran 1 h and Failed. Pod b: its replacement, 3 container restarts (the pod's
    # resources stay reserved, so the bill runs on), deleted at 2 h 30 min after T0.
    a = cost.pod_record(tpu_pod("a", T0, phase="Failed", finished=T0 + H))
    b = cost.pod_record(tpu_pod("b", T0 + H + 120, restarts=3, deleted=T0 + 2.5 * H))
    assert a.intervals == ((T0, T0 + H),)
    assert b.intervals == ((T0 + H + 120, T0 + 2.5 * H),)
    report = cost.compute_cost([a, b], PRICES, now=T0 + 10 * H)
    # (1 h + 1 h 28 min) x 5.28 $/h
    assert report.total_usd == pytest.approx((1 + 88 / 60) * 5.28)


def test_gpu_and_spot_come_from_node_affinity_and_actors_from_the_component_label():
    pod = {
        "metadata": {"name": "exp-actors-x", "labels": {"app.kubernetes.io/component": "actors"}},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]},
                    {"key": "cloud.google.com/gke-accelerator", "operator": "In",
                     "values": ["nvidia-l4"]}]}]}}},
            "containers": [{"name": "actor", "resources": {
                "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}}}],
        },
        "status": {"phase": "Succeeded", "startTime": iso(T0), "containerStatuses": [
            {"state": {"terminated": {"finishedAt": iso(T0 + 1800)}}}]},
    }
    record = cost.pod_record(pod)
    assert record.role == "actor" and record.spot and record.name == "exp-actors-x"
    assert record.resources == Resources(cpu=2, memory_gib=4, accelerator="gpu",
                                         accelerator_type="nvidia-l4", accelerator_count=1)
    report = cost.compute_cost([record], PRICES, now=T0 + H)
    # 0.5 h x (0.2 + 2 x 0.01 + 4 x 0.001)
    assert report.total_usd == pytest.approx(0.112)


def test_an_init_container_larger_than_the_others_sets_the_request():
    pod = tpu_pod("c", T0)
    pod["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = "12"
    assert cost.pod_record(pod).resources.cpu == 12


def test_pods_that_cannot_be_priced_say_why():
    pod = tpu_pod("d", T0)
    del pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"]
    with pytest.raises(ValueError, match="gke-tpu-accelerator"):
        cost.pod_record(pod)
    pod = tpu_pod("e", T0)
    pod["metadata"]["labels"] = {}
    with pytest.raises(ValueError, match="role"):
        cost.pod_record(pod)
    assert cost.pod_record(pod, role="learner").role == "learner"
    unstarted = tpu_pod("f", T0)
    del unstarted["status"]["startTime"]
    assert cost.pod_record(unstarted).intervals == ()


def test_merging_observations_keeps_gone_pods_and_closes_them():
    first = [cost.pod_record(tpu_pod("a", T0))]
    # The next observation finds pod a gone (Experiment suspended) at T0 + 1 h.
    history = cost.merge_records(first, [], now=T0 + H)
    assert history[0].intervals == ((T0, T0 + H),)
    # Resumed: pod b runs; a's closed record is kept.
    history = cost.merge_records(history, [cost.pod_record(tpu_pod("b", T0 + 3 * H))],
                                 now=T0 + 4 * H)
    report = cost.compute_cost(history, PRICES, now=T0 + 4 * H)
    assert report.total_usd == pytest.approx(2 * 5.28)


# ---------------------------------------------------------------------------- Experiments

def test_machine_types_of_an_experiment_are_what_its_pods_request():
    from seedrl.common.config import parse_experiment
    exp = parse_experiment({"metadata": {"name": "m"}, "spec": {"actors": {
        "processesPerActor": 3, "resources": {"cpu": "4", "memory": "3Gi"}}}})
    learner, spot = cost.machine_for(exp, "learner")
    # The learner section's defaults: 4 CPUs and 16Gi on CPU.
    assert (learner.cpu, learner.memory_gib, learner.accelerator_count, spot) == (4, 16, 0, False)
    actor, spot = cost.machine_for(exp, "actor")
    assert (actor.cpu, actor.memory_gib, spot) == (4, 3, False)


def test_machine_types_read_cluster_fields_when_present():
    class Section:  # the shape the cluster fields of common/config.py take
        def __init__(self, **kw):
            self.__dict__.update(kw)

    exp = Section(spec=Section(
        learner=Section(accelerator=Section(kind="tpu", type="v5e", topology="2x4"),
                        resources=Section(cpu="6", memory="24Gi")),
        actors=Section(resources={"requests": {"cpu": "1500m", "memory": "3Gi"}}, spot=True,
                       processes_per_actor=0)))
    assert cost.machine_for(exp, "learner") == (Resources(
        cpu=6, memory_gib=24, accelerator="tpu", accelerator_type="v5e",
        accelerator_count=8), False)
    assert cost.machine_for(exp, "actor") == (Resources(cpu=1.5, memory_gib=3), True)


# ---------------------------------------------------------------------------- output

def test_the_cost_line_and_the_report():
    records = [PodRecord("learner@1", "learner", Resources(4, 16), False, ((T0, T0 + 312),)),
               PodRecord("actor-0@1", "actor", Resources(1, 2), False, ((T0, T0 + 300),)),
               PodRecord("actor-1@1", "actor", Resources(1, 2), False, ((T0, T0 + 300),))]
    now = T0 + 312
    report = cost.compute_cost(records, PRICES, env_frames=1_000_000, now=now,
                               description=cost.describe_records(records, now))
    # learner 312 s x (4 x 0.04 + 16 x 0.005) $/h = 0.0208; actors 600 s x 0.05 $/h = 0.008333
    assert report.total_usd == pytest.approx(0.0208 + 0.05 / 6)
    line = cost.format_cost_line(report.to_status())
    assert line == ("cost: $0.0291 estimated (learner 1 x cpu 4 vCPU/16 GiB 0:05:12, "
                    "actors 2 x cpu 1 vCPU/2 GiB 0:10:00) = $0.0291 per million frames "
                    "[prices test-region 2026-11-01, table test-1]")
    text = cost.format_report(report.to_status())
    assert "learner" in text and "actor" in text and "test-1" in text


def test_gauges_carry_each_role_and_the_total():
    registry = CollectorRegistry()
    gauges = cost.CostGauges(registry)
    records = [PodRecord("l", "learner", TPU_LEARNER, False, ((T0, T0 + H),)),
               PodRecord("a", "actor", ACTOR, True, ((T0, T0 + H),))]
    gauges.update("exp", "rl", cost.compute_cost(records, PRICES, env_frames=10**6, now=T0 + H))

    def value(name, **labels):
        return registry.get_sample_value(name, labels)

    def usd(role):
        return value("seedrl_experiment_cost_usd", experiment="exp", namespace="rl", role=role)

    assert usd("learner") == pytest.approx(5.28)
    assert usd("actor") == pytest.approx(0.024)
    assert usd("total") == pytest.approx(5.304)
    assert value("seedrl_experiment_cost_usd_per_million_frames", experiment="exp",
                 namespace="rl") == \
        pytest.approx(5.304)
    gauges.remove("exp", "rl")
    assert value("seedrl_experiment_cost_usd", experiment="exp", namespace="rl",
                 role="total") is None


def test_the_operator_step_stores_records_and_prices_the_whole_history():
    # First observation: learner pod a running for 1 h so far.
    stored, report = cost.price_pods([], [tpu_pod("a", T0)], PRICES, env_frames=10**6,
                                     now=T0 + H)
    assert report.total_usd == pytest.approx(5.28)
    # Pod a crashed at 1 h 30 min and is gone; its replacement b runs since 2 h.
    final_a = tpu_pod("a", T0, phase="Failed", finished=T0 + 1.5 * H)
    stored, report = cost.price_pods(stored, [final_a], PRICES, now=T0 + 1.6 * H)
    stored, report = cost.price_pods(stored, [tpu_pod("b", T0 + 2 * H)], PRICES,
                                     env_frames=4 * 10**6, now=T0 + 3 * H)
    assert sorted(r["name"] for r in stored) == ["a", "b"]
    # 1.5 h + 1 h at 5.28 $/h; per million of 4M frames
    assert report.total_usd == pytest.approx(2.5 * 5.28)
    assert report.usd_per_million_frames == pytest.approx(2.5 * 5.28 / 4)


@pytest.mark.parametrize("accelerator, expected", [
    (None, (None, "", 0)),
    ({"kind": "cpu"}, (None, "", 0)),
    ("v5e", ("tpu", "v5e", 1)),
    ("nvidia-l4", ("gpu", "nvidia-l4", 1)),
    ({"kind": "gpu", "type": "nvidia-l4", "count": 2}, ("gpu", "nvidia-l4", 2)),
    ({"type": "tpu", "version": "tpu-v6e-slice", "topology": "4x4"}, ("tpu", "v6e", 16)),
    ({"kind": "tpu", "type": "tpu-v5p-slice", "topology": "2x2x1"}, ("tpu", "v5p", 4)),
    # The shape of spec.learner.accelerator in common/config.py's cluster fields:
    ({"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"},
      "gpu": {"type": "nvidia-l4", "count": 1}}, ("tpu", "v6e", 8)),
    ({"kind": "gpu", "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2"},
      "gpu": {"type": "nvidia-tesla-a100", "count": 2}}, ("gpu", "nvidia-tesla-a100", 2)),
    ({"kind": "cpu", "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2"},
      "gpu": {"type": "nvidia-l4", "count": 1}}, (None, "", 0)),
])
def test_the_accelerator_forms_a_learner_section_may_take(accelerator, expected):
    exp = {"spec": {"learner": {"accelerator": accelerator}, "actors": {}}}

    class Exp:
        spec = exp["spec"]

    resources, _ = cost.machine_for(Exp, "learner")
    assert (resources.accelerator, resources.accelerator_type,
            resources.accelerator_count) == expected


def test_status_and_records_validate_against_the_schema_offered_to_the_crd():
    import jsonschema

    def to_json_schema(node):  # OpenAPI's nullable is a type list in JSON Schema
        if isinstance(node, dict):
            out = {k: to_json_schema(v) for k, v in node.items() if k != "nullable"}
            if node.get("nullable"):
                out["type"] = [node["type"], "null"]
            return out
        return node

    schema = cost.status_schema()
    records = [PodRecord("l", "learner", TPU_LEARNER, False, ((T0, None),)),
               PodRecord("a", "actor", ACTOR, True, ((T0, T0 + H),))]
    status = cost.compute_cost(records, PRICES, now=T0 + H).to_status()
    jsonschema.validate(status, to_json_schema(schema["cost"]))
    jsonschema.validate([r.to_dict() for r in records], to_json_schema(schema["records"]))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"totalUsd": "lots"}, to_json_schema(schema["cost"]))


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
        state = ({"terminated": {"exitCode": 0, "startedAt": iso(start),
                                 "finishedAt": iso(end)}} if end else
                 {"running": {"startedAt": iso(start)}})
        return {"metadata": {"name": f"exp-actors-{i:05d}",
                             "labels": {"seedrl.dev/experiment": "exp",
                                        "seedrl.dev/role": "actor"}},
                "spec": {"nodeSelector": {"cloud.google.com/gke-spot": "true"} if spot else {},
                         "containers": [{"name": "actor", "resources": {
                             "requests": {"cpu": "1" if i % 2 else "2", "memory": "2Gi"}}}]},
                "status": {"phase": "Succeeded" if end else "Running", "startTime": iso(start),
                           "containerStatuses": [{"name": "actor", "state": state}]}}

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
    assert report.roles["actor"].pod_hours == pytest.approx(exact.roles["actor"].pod_hours,
                                                            rel=1e-9)
    # Bounded: the recent pods one by one and a record per machine for the rest, far below
    # what 10,000 records take (~2 MB) and etcd's 1.5 MiB.
    assert biggest < 64 * 1024, biggest
    assert len(stored) <= cost_mod.KEEP_GONE_RECORDS + 20 + 4
    assert "10000 x" in report.description or "actors 10000" in report.description
