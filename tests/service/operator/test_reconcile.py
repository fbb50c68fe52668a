"""The decisions of the operator: the CRD and validation, immutable fields, the learner Job's
state and why it failed (service/operator/reconcile.py)."""

from __future__ import annotations

import datetime
import json

import jsonschema
import kubernetes_validate
import pytest
import yaml

from seedrl.common.config import ConfigError
from seedrl.common.schema import to_json_schema
from seedrl.service.operator import crd
from seedrl.service.operator.reconcile import (
    actors_limited,
    failure_reason,
    immutable_changes,
    immutable_part,
    job_outdated,
    stranded_pods,
    validate,
    workload_pending,
)
from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import ANNOTATION_LEARNER_HASH, ENV_SPEC_CONTAINER
from seedrl.service.operator.render.learner_job import learner_hash, legacy_learner_hash
from seedrl.service.operator.status import compute_status, condition


def test_crd_is_a_valid_custom_resource_definition(k8s_version, repo_root):
    kubernetes_validate.validate(
        yaml.safe_load((repo_root / crd.CRD_PATHS[0]).read_text()), k8s_version, strict=True
    )


def test_crd_declares_subresources_and_columns():
    version = crd.crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.actors.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert "status" in version["subresources"]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase",
        "Ready",
        "Reason",
        "Agent",
        "Env",
        "Actors",
        "Desired",
        "Steps",
        "Return",
        "Cost",
        "Age",
    ]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string" and status["replicas"]["type"] == "integer"
    assert set(status["cost"]["properties"]) >= {"totalUsd", "usdPerMillionFrames"}


def crd_validator():
    schema = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft202012Validator(to_json_schema(schema, closed=True))


def test_examples_validate_against_the_crd(example, load):
    crd_validator().validate(load(example))


BAD = [
    ("spec.actors.replicas", 0, "replicas"),
    ("spec.learner.accelerator.kind", "fpga", "kind"),
    ("spec.learner.accelerator.tpu.topology", "two-by-two", "topology"),
    ("spec.learner.resources.memory", "lots", "memory"),
    ("spec.actors.spot", "yes", "spot"),
    ("spec.agent.name", "dqn", "name"),
    ("spec.env.id", "x" * 300, "id"),
    ("spec.budget.maxEnvSteps", -1, "maxEnvSteps"),
    ("spec.activeDeadlineSeconds", 0, "activeDeadlineSeconds"),
    ("spec.learner.unknownField", 1, "unknownField"),
]


@pytest.mark.parametrize("dotted, value, field", BAD, ids=[b[0] for b in BAD])
def test_bad_experiments_are_rejected_naming_the_field(dotted, value, field, repo_root, load):
    from seedrl.common.config import set_path

    doc = load(repo_root / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml")
    set_path(doc, dotted, value)
    errors = list(crd_validator().iter_errors(doc))
    assert errors
    where = [".".join(map(str, e.absolute_path)) + ": " + e.message for e in errors]
    assert any(field in w for w in where), where
    # The operator's own check names the full path.
    with pytest.raises(ConfigError) as e:
        validate(doc)
    assert dotted in [p for p, _ in e.value.problems]


def stored(spec=None, **meta):
    """An Experiment as the API server returns it, server-side fields included."""
    return {
        "apiVersion": "seedrl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {
            "name": "exp",
            "namespace": "team-a",
            "uid": "u",
            "generation": 3,
            "resourceVersion": "17",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
            "annotations": {
                "kopf.zalando.org/last-handled-configuration": "{}",
                "seedrl.dev/last-handled-configuration": "{}",
                "seedrl.dev/on_change": "{}",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            **meta,
        },
        "spec": spec or {},
        "status": {"phase": "Running"},
    }


def test_validate_ignores_server_side_fields():
    exp = validate(stored({"actors": {"replicas": 3}}))
    assert exp.metadata.namespace == "team-a" and exp.spec.actors.replicas == 3
    assert exp.metadata.annotations == {}
    body = stored()
    body["metadata"]["annotations"]["team.example.com/owner"] = "ana"
    assert validate(body).metadata.annotations == {"team.example.com/owner": "ana"}


def test_validate_names_the_field_and_the_cluster_name_limit():
    with pytest.raises(ConfigError) as e:
        validate(stored({"learner": {"unrollLength": 0}}))
    assert e.value.problems == [("spec.learner.unrollLength", "must be >= 2, got 0")]
    with pytest.raises(ConfigError) as e:
        validate(stored(name="a" * 60))
    assert e.value.problems[0][0] == "metadata.name"


def test_immutable_changes_name_the_paths(exp_of):
    applied = immutable_part(exp_of())
    assert immutable_changes(applied, exp_of(actors={"replicas": 9})) == []
    assert immutable_changes(applied, exp_of(env={"id": "Acrobot-v1"})) == ["spec.env.id"]
    assert immutable_changes(applied, exp_of(agent={"name": "ppo"})) == ["spec.agent.name"]
    assert immutable_changes(json.loads(json.dumps(applied)), exp_of()) == []


def test_an_operator_upgrade_that_adds_fields_changes_no_running_experiment(exp_of):
    # status.appliedImmutable written by an operator from before spec.agent.vtrace.epochs:
    # the new operator reads the missing field at its default, not as a change.
    applied = json.loads(json.dumps(immutable_part(exp_of())))
    del applied["agent"]["vtrace"]["epochs"]
    assert immutable_changes(applied, exp_of()) == []
    assert immutable_changes(applied, exp_of(agent={"vtrace": {"epochs": 3}})) == [
        "spec.agent.vtrace.epochs"
    ]


def test_an_env_that_cannot_be_made_names_the_init_container_in_the_failure():
    failed = {
        "type": "Failed",
        "reason": "PodFailurePolicy",
        "message": "Container env-spec for pod team-a/exp-learner-q7 failed with exit "
        "code 2 matching FailJob rule at index 3",
    }
    pod = {
        "metadata": {"name": "exp-learner-q7"},
        "status": {
            "phase": "Failed",
            "initContainerStatuses": [
                {
                    "name": ENV_SPEC_CONTAINER,
                    "state": {
                        "terminated": {
                            "exitCode": 2,
                            "reason": "Error",
                            "finishedAt": "2026-01-01T00:00:09Z",
                            "message": "cannot make environments: spec.env.id: cannot make "
                            "'NoSuchEnv-v9'\n",
                        }
                    },
                }
            ],
            "containerStatuses": [
                {"name": "learner", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }
    reason, message = failure_reason(failed, [pod])
    assert reason == "InvalidConfiguration"
    assert "exp-learner-q7, init container env-spec: exit code 2" in message
    assert message.endswith("cannot make 'NoSuchEnv-v9'")


def _nodes(node, path="openAPIV3Schema"):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _nodes(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _nodes(node[key], f"{path}[{key}]")


def test_crd_schema_follows_the_structural_rules():
    # What the API server checks when the CRD is created (no API server runs here).
    schema = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        assert node.get("type") in ("object", "array", "string", "integer", "number", "boolean"), (
            path
        )
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object", path
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), path
        if "default" in node:
            jsonschema.Draft202012Validator(to_json_schema(node)).validate(node["default"])
        for key in node:
            assert key in {
                "type",
                "description",
                "properties",
                "items",
                "additionalProperties",
                "required",
                "default",
                "nullable",
                "enum",
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "pattern",
                "maxLength",
                "minItems",
                "maxItems",
                "format",
                "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-list-type",
                "x-kubernetes-list-map-keys",
                "x-kubernetes-validations",
            }, (path, key)
        for rule in node.get("x-kubernetes-validations", []):
            # What a rule may hold (the reasons the API server accepts); the rules themselves
            # run in a CEL runtime in tests/service/operator/test_crd.py.
            assert set(rule) <= {
                "rule",
                "message",
                "messageExpression",
                "fieldPath",
                "reason",
                "optionalOldSelf",
            }, (path, rule)
            assert rule["reason"] in (
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueRequired",
                "FieldValueDuplicate",
            ), rule


def test_strict_validation_does_reject_a_bad_manifest(exp_of, by_kind, owner):
    # The check above can fail: an unknown field or a wrong type is refused.
    deployment = by_kind(render(exp_of(), owner, "team-a"))["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy2"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.33.0", strict=True)
    job = by_kind(render(exp_of(), owner, "team-a"))["Job"]
    job["spec"]["backoffLimit"] = "six"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.29.0", strict=True)


def _failed_pod(name, exit_code, finished, reason="Error", message=""):
    return {
        "metadata": {"name": name},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "learner",
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": reason,
                            "message": message,
                            "finishedAt": finished,
                        }
                    },
                }
            ],
        },
    }


def test_a_failed_experiment_names_the_cause_from_the_last_failed_pod():
    job_failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "Container learner for pod team-a/exp-learner-b failed with exit "
        "code 4 matching FailJob rule at index 2",
    }
    pods = [
        _failed_pod("exp-learner-a", 1, "2026-01-01T00:00:01Z"),
        _failed_pod(
            "exp-learner-b",
            4,
            "2026-01-01T00:00:09Z",
            message="cannot use the checkpoints at gs://x: not a bucket\n",
        ),
    ]
    reason, message = failure_reason(job_failed, pods)
    assert reason == "CheckpointLocationUnusable"
    assert "exp-learner-b" in message and "exit code 4" in message
    assert message.endswith("not a bucket")
    oom = [_failed_pod("exp-learner-c", 137, "2026-01-01T00:00:09Z", reason="OOMKilled")]
    reason, message = failure_reason(
        {
            "type": "Failed",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
        oom,
    )
    assert reason == "OOMKilled" and "reason OOMKilled" in message and "SIGKILL" in message
    assert failure_reason({"reason": "DeadlineExceeded", "message": "m"}) == (
        "DeadlineExceeded",
        "m",
    )
    no_tpu = [
        _failed_pod(
            "exp-learner-d",
            5,
            "2026-01-01T00:00:09Z",
            message="devices: scheduled for a TPU but found none\n",
        )
    ]
    reason, message = failure_reason(job_failed, no_tpu)
    assert reason == "AcceleratorMissing" and "scheduled for a TPU" in message
    assert "exit code 5 (the accelerator the learner was scheduled for is missing)" in message


def test_a_learner_edit_replaces_an_unfinished_job_only(exp_of, by_kind):
    exp = exp_of()
    job = by_kind(render(exp))["Job"]
    assert not job_outdated(exp, job)
    assert not job_outdated(exp_of(actors={"replicas": 9}), job)
    edited = exp_of(budget={"maxEnvSteps": 99})
    assert job_outdated(edited, job)
    finished = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not job_outdated(edited, finished)
    status = compute_status(
        edited, generation=2, previous=None, job=job, deployment=None, learner=None, replacing=True
    )
    assert condition(status, "SpecApplied")["reason"] == "ReplacingLearner"
    status = compute_status(
        edited, generation=2, previous=None, job=finished, deployment=None, learner=None
    )
    assert condition(status, "SpecApplied")["reason"] == "LearnerFinished"


@pytest.mark.parametrize(
    "placement, path",
    [
        ({"affinity": {"nodeAffinty": {}}}, "spec.learner.placement.affinity.nodeAffinty"),
        ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "tolerations[0].value"),
        ({"tolerations": [{"effect": "NoSchedule"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"key": "k", "tolerationSeconds": 5}]}, "tolerationSeconds"),
        ({"tolerations": [{"key": "k", "effect": "Never"}]}, "tolerations[0].effect"),
        ({"imagePullSecrets": ["Bad_Name"]}, "imagePullSecrets[0]"),
        ({"nodeSelector": {"a": 1}}, "nodeSelector.a"),
    ],
)
def test_a_bad_placement_is_refused_naming_the_field(placement, path, exp_of):
    with pytest.raises(ConfigError, match=path.replace("[", r"\[").replace("]", r"\]")):
        exp_of(learner={"placement": placement})


def test_a_job_of_an_earlier_release_that_runs_the_spec_is_kept(exp_of, by_kind):
    # Made before LEARNER_UNREAD: its hash digests the whole spec. An operator upgrade keeps it.
    exp = exp_of()
    job = by_kind(render(exp))["Job"]
    job["metadata"]["annotations"][ANNOTATION_LEARNER_HASH] = legacy_learner_hash(exp)
    assert legacy_learner_hash(exp) != learner_hash(exp)
    assert not job_outdated(exp, job)
    assert job_outdated(exp_of(budget={"maxEnvSteps": 99}), job)


def _body(**spec):
    return {"metadata": {"name": "exp", "namespace": "team-a"}, "spec": spec}


def test_an_actor_count_past_what_the_learner_serves_is_capped_not_refused():
    # kubectl scale / an HPA: 64 envs each into 512 (8 actors), 2 streams each into 10 (5).
    body = _body(actors={"replicas": 20, "envsPerActor": 64}, learner={"maxTotalEnvs": 512})
    exp = validate(body)
    assert exp.spec.actors.replicas == 8
    assert "spec.actors.replicas is 20" in actors_limited(body, exp)
    streams = _body(actors={"replicas": 20, "streamsPerActor": 2}, learner={"maxStreams": 10})
    assert validate(streams).spec.actors.replicas == 5
    within = _body(actors={"replicas": 8, "envsPerActor": 64}, learner={"maxTotalEnvs": 512})
    assert actors_limited(within, validate(within)) is None
    # Not even one actor fits, or something else is wrong too: refused as before.
    with pytest.raises(ConfigError, match="maxTotalEnvs"):
        validate(_body(actors={"envsPerActor": 64}, learner={"maxTotalEnvs": 32}))
    with pytest.raises(ConfigError, match="batchSize"):
        validate(_body(actors={"replicas": 20}, learner={"maxTotalEnvs": 16, "batchSize": 0}))


def test_a_pod_terminating_past_its_grace_on_a_silent_node_is_stranded():
    now = datetime.datetime(2026, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)

    def pod(deleting, node="n1", phase="Running"):
        meta = {"name": "p", "deletionTimestamp": deleting} if deleting else {"name": "p"}
        return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}

    stranded = pod("2026-01-01T00:08:59Z")  # its grace ended 61 s ago
    assert stranded_pods([stranded], now, 60) == [stranded]
    # Within the margin, not being deleted, never bound, or already finished: left alone.
    assert stranded_pods([pod("2026-01-01T00:09:30Z")], now, 60) == []
    assert stranded_pods([pod(None)], now, 60) == []
    assert stranded_pods([pod("2026-01-01T00:00:00Z", node=None)], now, 60) == []
    assert stranded_pods([pod("2026-01-01T00:00:00Z", phase="Failed")], now, 60) == []


def test_a_queued_learner_says_why_kueue_has_not_admitted_it(exp_of, by_kind):
    exp = exp_of(queueName="team-a-queue")
    job = by_kind(render(exp))["Job"]
    # Kueue v0.17's Workload for a Job asking more CPU than its ClusterQueue holds
    # (tests/service/operator/test_kueue.py meets it against the real Kueue).
    why = (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
        "default, previously considered podsets requests (0) + current podset request (2) > "
        "maximum capacity (1)"
    )
    workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": why}
            ]
        }
    }
    assert workload_pending([workload]) == why
    assert workload_pending([{"status": {}}]) is None and workload_pending([]) is None
    status = compute_status(
        exp,
        generation=1,
        previous=None,
        job=job,
        deployment=None,
        learner=None,
        queue_message=why,
    )
    ready = condition(status, "LearnerReady")
    assert ready["reason"] == "Queued"
    assert ready["message"].endswith(
        f"in queue team-a-queue; the actors start once it is. Kueue: {why}"
    )
