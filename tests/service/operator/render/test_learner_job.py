"""The learner Job: its failure policy, env spec, accelerators, scratch space and hash
(render/learner_job.py)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import (
    ANNOTATION_LEARNER_HASH,
    ENV_SPEC_FILE,
    ENV_SPEC_KEY,
    SHARED_DIR,
)


def _arg(container, flag):
    """The value of ``flag`` in a container's command."""
    command = container["command"]
    return command[command.index(flag) + 1]


def test_learner_job_is_replaced_by_exit_code_and_has_time_to_checkpoint(exp_of, by_kind):
    job = by_kind(
        render(exp_of(backoffLimit=3, activeDeadlineSeconds=99, ttlSecondsAfterFinished=60))
    )["Job"]
    assert job["spec"]["completions"] == 1 and job["spec"]["backoffLimit"] == 3
    assert job["spec"]["activeDeadlineSeconds"] == 99
    assert job["spec"]["ttlSecondsAfterFinished"] == 60
    pod = job["spec"]["template"]["spec"]
    # Never restarted in place: the Job decides, through its podFailurePolicy, and only once
    # the old pod has stopped (two learners never write the same checkpoints).
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    assert pod["terminationGracePeriodSeconds"] == 300
    assert job["spec"]["suspend"] is False
    assert pod["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def _first_rule(policy, *, exit_code=None, conditions=(), container="learner"):
    """The action of the first podFailurePolicy rule matching a pod whose ``container`` (or
    init container) failed, as the Job controller picks it (None: no rule matches, the
    failure counts against backoffLimit)."""
    for rule in policy["rules"]:
        codes = rule.get("onExitCodes")
        if (
            codes
            and exit_code is not None
            and codes.get("containerName") in (None, container)
            and (exit_code in codes["values"]) == (codes["operator"] == "In")
        ):
            return rule["action"]
        for pattern in rule.get("onPodConditions") or []:
            if (pattern["type"], pattern.get("status", "True")) in conditions:
                return rule["action"]
    return None


def test_failure_policy_follows_the_exit_codes(exp_of, by_kind):
    from seedrl.common.exit_codes import ExitCode

    policy = by_kind(render(exp_of()))["Job"]["spec"]["podFailurePolicy"]
    # A drained, evicted or preempted pod is replaced without counting, whatever it exited.
    assert _first_rule(policy, exit_code=137, conditions=[("DisruptionTarget", "True")]) == "Ignore"
    # Stopped by a signal after its final checkpoint (a drain that deleted it, a suspend). A
    # learner its liveness probe kills exits FAILED instead (learner/health.py): counted.
    assert _first_rule(policy, exit_code=ExitCode.STOPPED) == "Ignore"
    assert _first_rule(policy, exit_code=ExitCode.BAD_CONFIG) == "FailJob"
    assert _first_rule(policy, exit_code=ExitCode.CHECKPOINT_LOCATION) == "FailJob"
    # Scheduled on a GPU or TPU it does not find: another pod of this Job would land on the
    # same kind of node with the same image.
    assert _first_rule(policy, exit_code=ExitCode.NO_ACCELERATOR) == "FailJob"
    # Crashes count against backoffLimit.
    assert _first_rule(policy, exit_code=ExitCode.FAILED) is None
    assert _first_rule(policy, exit_code=137) is None
    # SIGTERM from the learner itself (143) is no clean stop: counted.
    assert _first_rule(policy, exit_code=143) is None
    # No rule names a container the pod lacks (the API server refuses such a Job).
    assert {r["onExitCodes"]["containerName"] for r in policy["rules"] if "onExitCodes" in r} == {
        "learner"
    }
    for rule in policy["rules"]:
        assert 0 not in (rule.get("onExitCodes") or {}).get("values", [])  # the API refuses 0


def test_the_learner_pod_runs_no_actor_code_and_serves_the_derived_env_spec(exp_of, by_kind, owner):
    """The env spec comes from the env-spec Job, through its ConfigMap: the learner pod has no
    init container, runs only the learner image and pulls only with the learner's secrets."""
    exp = exp_of(
        env={"id": "ALE/Pong-v5"},
        learner={"placement": {"imagePullSecrets": ["learner-cred"]}},
        actors={
            "image": "registry.example/seedrl/actors:custom",
            "placement": {"imagePullSecrets": ["actors-cred"]},
        },
    )
    job = by_kind(render(exp, owner, "team-a"))["Job"]
    pod = job["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    (learner,) = pod["containers"]
    assert learner["image"].split("/")[-1].startswith("learner:")
    at = learner["command"].index("--env-spec")
    assert learner["command"][at + 1] == ENV_SPEC_FILE
    assert ENV_SPEC_FILE == f"{SHARED_DIR}/{ENV_SPEC_KEY}"
    (shared,) = [v for v in pod["volumes"] if v["name"] == "shared"]
    assert shared == {"name": "shared", "configMap": {"name": "exp-envspec"}}
    assert {"name": "shared", "mountPath": SHARED_DIR, "readOnly": True} in learner["volumeMounts"]
    assert pod["imagePullSecrets"] == [{"name": "learner-cred"}]
    assert "imagePullSecrets" not in by_kind(render(exp_of()))["Job"]["spec"]["template"]["spec"]
    kubernetes_validate.validate(job, "1.33.0", strict=True)


def test_a_spot_learner_budgets_its_final_checkpoint_for_the_15_seconds_gke_gives(exp_of, by_kind):
    objs = by_kind(render(exp_of(learner={"spot": True})))
    pod = objs["Job"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 15
    # The learner is told, and gives up on its final checkpoint 5 s before the kill.
    assert _arg(pod["containers"][0], "--grace-seconds") == "15"
    on_demand = by_kind(render(exp_of()))["Job"]["spec"]["template"]["spec"]
    assert on_demand["terminationGracePeriodSeconds"] == 300
    assert _arg(on_demand["containers"][0], "--grace-seconds") == "300"


def test_tpu_learner_gets_node_selectors_chips_and_toleration(exp_of, by_kind):
    exp = exp_of(
        learner={
            "accelerator": {"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"}}
        }
    )
    pod = by_kind(render(exp))["Job"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    res = pod["containers"][0]["resources"]
    assert res["requests"]["google.com/tpu"] == res["limits"]["google.com/tpu"] == "8"
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # The TPU build of this release's learner, told to fail rather than train on the CPU.
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/seedrl/learner:0.1.0-tpu"
    assert _arg(container, "--accelerator") == "tpu"


@pytest.mark.parametrize(
    "tpu_type,topology,chips",
    [
        ("tpu-v4-podslice", "2x2x1", "4"),
        ("tpu-v5p-slice", "2x2x1", "4"),
        ("tpu-v5-lite-podslice", "1x1", "1"),
        ("tpu-v5-lite-podslice", "2x2", "4"),
        ("tpu-v5-lite-podslice", "2x4", "8"),
        ("tpu-v6e-slice", "2x2", "4"),
    ],
)
def test_tpu_chips_requested_are_the_topologys(tpu_type, topology, chips, exp_of, by_kind):
    exp = exp_of(
        learner={"accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}}
    )
    pod = by_kind(render(exp))["Job"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == chips
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology


def test_an_explicit_learner_image_wins_over_the_accelerators(exp_of, by_kind):
    exp = exp_of(
        learner={"image": "europe-docker.pkg.dev/p/r/learner:mine", "accelerator": {"kind": "tpu"}}
    )
    container = by_kind(render(exp))["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "europe-docker.pkg.dev/p/r/learner:mine"


def test_gpu_and_cpu_learners(exp_of, by_kind):
    pod = by_kind(
        render(
            exp_of(
                learner={"accelerator": {"kind": "gpu", "gpu": {"type": "nvidia-l4", "count": 2}}}
            )
        )
    )["Job"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["containers"][0]["image"] == "ghcr.io/seedrl/learner:0.1.0-gpu"
    assert _arg(pod["containers"][0], "--accelerator") == "gpu"
    cpu = by_kind(render(exp_of()))["Job"]["spec"]["template"]["spec"]
    assert cpu["containers"][0]["image"] == "ghcr.io/seedrl/learner:0.1.0"
    assert "nodeSelector" not in cpu and "tolerations" not in cpu
    assert cpu["containers"][0]["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "2048Mi"},
        "limits": {"memory": "16Gi"},
    }


def _job_hash(objs):
    return objs["Job"]["metadata"]["annotations"][ANNOTATION_LEARNER_HASH]


def test_learner_hash_covers_what_the_learner_runs_but_scaling_and_suspend(exp_of, by_kind):
    base = _job_hash(by_kind(render(exp_of())))
    for change in (
        {"budget": {"maxEnvSteps": 5}},
        {"learner": {"batchSize": 4}},
        {"backoffLimit": 1},
        {"learner": {"image": "example.com/l:2"}},
    ):
        assert _job_hash(by_kind(render(exp_of(**change)))) != base, change
    # What the learner's pod never reads: the actors' own pods, the run volume's claim, the
    # finished Job's TTL, the operator's progress check.
    for change in (
        {"actors": {"replicas": 17}},
        {"suspend": True},
        {"actors": {"resources": {"cpu": "3"}, "spot": True, "metricsPort": 9999}},
        {"actors": {"serviceAccountName": "envs", "processesPerActor": 2}},
        {"actors": {"placement": {"nodeSelector": {"pool": "actors"}}}},
        {"checkpoint": {"volumeSize": "99Gi", "volumeRetention": "Delete"}},
        {"checkpoint": {"volumeStorageClassName": "ssd"}},
        {"ttlSecondsAfterFinished": 60},
        {"budget": {"noProgressSeconds": 5}},
    ):
        assert _job_hash(by_kind(render(exp_of(**change)))) == base, change
    # What the learner's pod does read of the actors: their envs, streams and image.
    for change in (
        {"actors": {"envsPerActor": 3}},
        {"actors": {"streamsPerActor": 2}},
        {"actors": {"image": "example.com/a:2"}},
    ):
        assert _job_hash(by_kind(render(exp_of(**change)))) != base, change
    # R2D2's exploration schedule is defined over the actor count: the learner must know it.
    r2d2 = {"agent": {"name": "r2d2"}}
    assert _job_hash(by_kind(render(exp_of(**r2d2)))) != _job_hash(
        by_kind(render(exp_of(actors={"replicas": 3}, **r2d2)))
    )


def _scratch(job):
    pod = job["spec"]["template"]["spec"]
    (tmp,) = [v for v in pod["volumes"] if v["name"] == "tmp"]
    (learner,) = [c for c in pod["containers"] if c["name"] == "learner"]
    return tmp["emptyDir"].get("sizeLimit"), learner["resources"]


def test_the_learners_tmp_is_bounded_by_what_a_checkpoint_stages(exp_of, by_kind):
    """Every checkpoint is staged in /tmp before it is published: its emptyDir is bounded and
    that much node disk requested, R2D2's replay included (at most replayCheckpointMaxGb)."""
    size, resources = _scratch(by_kind(render(exp_of()))["Job"])
    assert size == "2048Mi" and resources["requests"]["ephemeral-storage"] == size
    assert "ephemeral-storage" not in resources["limits"]  # the sizeLimit bounds /tmp
    r2d2 = exp_of(agent={"name": "r2d2", "r2d2": {"replayCheckpointMaxGb": 1.5}})
    size, resources = _scratch(by_kind(render(r2d2))["Job"])
    assert size == f"{2048 + -(-1_500_000_000 // 2**20)}Mi"
    assert resources["requests"]["ephemeral-storage"] == size
    # The user's own figure is the request, the limit and the bound.
    own = exp_of(learner={"resources": {"cpu": "1", "memory": "2Gi", "ephemeralStorage": "7Gi"}})
    size, resources = _scratch(by_kind(render(own))["Job"])
    assert size == "7Gi" and resources["requests"]["ephemeral-storage"] == "7Gi"
    assert resources["limits"]["ephemeral-storage"] == "7Gi"
    # Queued through Kueue: bounded, but no request its ClusterQueue may not cover.
    size, resources = _scratch(by_kind(render(exp_of(queueName="team-q")))["Job"])
    assert size == "2048Mi" and "ephemeral-storage" not in resources["requests"]


def test_actor_pods_keep_an_unbounded_tmp(exp_of, by_kind):
    """Actors stage nothing: their /tmp stays as it was."""
    deployment = by_kind(render(exp_of()))["Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert [v for v in volumes if v["name"] == "tmp"] == [{"name": "tmp", "emptyDir": {}}]
