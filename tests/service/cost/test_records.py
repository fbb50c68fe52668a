"""Pod records: read from Kubernetes pod objects and from the pods the operator renders,
merged across observations, stored and read back."""

import pytest

from seedrl.service import cost
from seedrl.service.cost import PodRecord, Resources
from support.cost_data import H, PRICES, T0, TPU_LEARNER, iso, tpu_pod


def test_records_round_trip_through_plain_data():
    record = PodRecord("u-1", "learner", TPU_LEARNER, True, ((T0, T0 + 5), (T0 + 9, None)))
    assert cost.record_from_dict(record.to_dict()) == record


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
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "cloud.google.com/gke-spot",
                                        "operator": "In",
                                        "values": ["true"],
                                    },
                                    {
                                        "key": "cloud.google.com/gke-accelerator",
                                        "operator": "In",
                                        "values": ["nvidia-l4"],
                                    },
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "actor",
                    "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}},
                }
            ],
        },
        "status": {
            "phase": "Succeeded",
            "startTime": iso(T0),
            "containerStatuses": [{"state": {"terminated": {"finishedAt": iso(T0 + 1800)}}}],
        },
    }
    record = cost.pod_record(pod)
    assert record.role == "actor" and record.spot and record.name == "exp-actors-x"
    assert record.resources == Resources(
        cpu=2, memory_gib=4, accelerator="gpu", accelerator_type="nvidia-l4", accelerator_count=1
    )
    report = cost.compute_cost([record], PRICES, now=T0 + H)
    # 0.5 h x (0.2 + 2 x 0.01 + 4 x 0.001)
    assert report.total_usd == pytest.approx(0.112)


def test_the_env_spec_jobs_pod_is_priced_as_actor_work():
    """The env-spec Job's pod runs the actor image with the actors' resources: counted with
    the actors, not refused (which would leave the whole Experiment unpriced)."""
    from seedrl.common.config import parse_experiment
    from seedrl.service.operator.render.env_spec import render_env_spec_job

    exp = parse_experiment(
        {
            "metadata": {"name": "exp"},
            "spec": {"actors": {"resources": {"cpu": "2", "memory": "4Gi"}}},
        }
    )
    job = render_env_spec_job(exp)
    pod = {
        "metadata": {"name": "exp-envspec-x1", **job["spec"]["template"]["metadata"]},
        "spec": job["spec"]["template"]["spec"],
        "status": {
            "phase": "Succeeded",
            "startTime": iso(T0),
            "containerStatuses": [{"state": {"terminated": {"finishedAt": iso(T0 + 36)}}}],
        },
    }
    record = cost.pod_record(pod)
    assert record.role == "actor" and record.resources == Resources(cpu=2, memory_gib=4)
    # 0.01 h on demand x (2 x 0.04 + 4 x 0.005)
    assert cost.compute_cost([record], PRICES, now=T0 + H).total_usd == pytest.approx(0.001)


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
    history = cost.merge_records(
        history, [cost.pod_record(tpu_pod("b", T0 + 3 * H))], now=T0 + 4 * H
    )
    report = cost.compute_cost(history, PRICES, now=T0 + 4 * H)
    assert report.total_usd == pytest.approx(2 * 5.28)


# ---------------------------------------------------------------------------- Experiments


def experiment(**spec):
    from seedrl.common.config import parse_experiment

    return parse_experiment({"metadata": {"name": "m"}, "spec": spec})


def test_an_experiment_is_priced_as_the_pods_the_operator_renders():
    machines = cost.rendered_machines(
        experiment(actors={"processesPerActor": 3, "resources": {"cpu": "4", "memory": "3Gi"}})
    )
    # The learner section's defaults: 4 CPUs and 16Gi on CPU.
    assert machines["learner"] == (Resources(cpu=4, memory_gib=16), False)
    assert machines["actor"] == (Resources(cpu=4, memory_gib=3), False)


@pytest.mark.parametrize(
    "accelerator, expected",
    [
        ({"kind": "cpu"}, Resources(cpu=6, memory_gib=24)),
        (
            {"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"}},
            Resources(
                cpu=6, memory_gib=24, accelerator="tpu", accelerator_type="v6e", accelerator_count=8
            ),
        ),
        (
            {"kind": "tpu", "tpu": {"type": "tpu-v5p-slice", "topology": "2x2x1"}},
            Resources(
                cpu=6, memory_gib=24, accelerator="tpu", accelerator_type="v5p", accelerator_count=4
            ),
        ),
        (
            {"kind": "gpu", "gpu": {"type": "nvidia-tesla-a100", "count": 2}},
            Resources(
                cpu=6,
                memory_gib=24,
                accelerator="gpu",
                accelerator_type="nvidia-tesla-a100",
                accelerator_count=2,
            ),
        ),
    ],
)
def test_the_learner_accelerator_is_read_from_the_rendered_pod(accelerator, expected):
    exp = experiment(
        learner={"accelerator": accelerator, "resources": {"cpu": "6", "memory": "24Gi"}},
        actors={"spot": True, "resources": {"cpu": "1500m", "memory": "3Gi"}},
    )
    machines = cost.rendered_machines(exp)
    assert machines["learner"] == (expected, False)
    assert machines["actor"] == (Resources(cpu=1.5, memory_gib=3), True)


def test_local_processes_are_priced_as_the_rendered_pods():
    exp = experiment(actors={"spot": True})
    records = cost.local_records(
        exp, [("learner@1", "learner", [(T0, T0 + H)]), ("actor-0@1", "actor", [(T0, T0 + H)])]
    )
    machines = cost.rendered_machines(exp)
    assert [(r.resources, r.spot) for r in records] == [machines["learner"], machines["actor"]]
