"""The pure side of the operator: rendering, validation, the learner's status, and status."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from seedrl.common.learner_status import LearnerStatus
from seedrl.common.config import ConfigError, load_yaml, parse_experiment, to_document
from seedrl.common.schema import to_json_schema
from seedrl.service.operator import crd, reconcile

ROOT = Path(__file__).parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "k8s" / "examples").glob("*.yaml")
)
K8S_VERSIONS = ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0")
OWNER = reconcile.owner_reference("exp", "4f1c7e8a-0000-4000-8000-000000000001")


@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once():
    """kubernetes-validate re-reads its JSON schema files (megabytes) on every call; read each
    once for this module (5x faster, same validation)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            kubernetes_validate.utils,
            "schema_contents",
            functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents),
        )
        yield


def load(path: Path) -> dict:
    return load_yaml(path.read_text(), str(path))


def exp_of(**spec):
    return parse_experiment({"metadata": {"name": "exp", "namespace": "team-a"}, "spec": spec})


def by_kind(objects):
    return {o["kind"]: o for o in objects}


# --------------------------------------------------------------------------------------------
# The CRD
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_crd_is_a_valid_custom_resource_definition(version):
    kubernetes_validate.validate(
        yaml.safe_load((ROOT / crd.CRD_PATHS[0]).read_text()), version, strict=True
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
        "Agent",
        "Env",
        "Actors",
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


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_crd(path):
    crd_validator().validate(load(path))


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
def test_bad_experiments_are_rejected_naming_the_field(dotted, value, field):
    from seedrl.common.config import set_path

    doc = load(ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml")
    set_path(doc, dotted, value)
    errors = list(crd_validator().iter_errors(doc))
    assert errors
    where = [".".join(map(str, e.absolute_path)) + ": " + e.message for e in errors]
    assert any(field in w for w in where), where
    # The operator's own check names the full path.
    with pytest.raises(ConfigError) as e:
        reconcile.validate(doc)
    assert dotted in [p for p, _ in e.value.problems]


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_rendered_manifests_pass_kubernetes_validate_strict(path):
    exp = reconcile.validate(load(path))
    variants = [
        reconcile.render(exp, OWNER, "team-a"),
        reconcile.render(
            parse_experiment(
                {
                    **to_document(exp),
                    "spec": {
                        **to_document(exp.spec),
                        "suspend": True,
                        "queueName": "q",
                        "activeDeadlineSeconds": 60,
                        "ttlSecondsAfterFinished": 0,
                    },
                }
            ),
            OWNER,
            "team-a",
            finished=True,
        ),
    ]
    for objects in variants:
        for obj in objects:
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    raise AssertionError(f"{obj['kind']} for {version}: {exc}") from None


def test_children_have_owner_references_and_labels():
    objects = reconcile.render(exp_of(), OWNER, "team-a")
    assert [o["kind"] for o in objects] == [
        "ConfigMap",
        "PersistentVolumeClaim",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Job",
        "Deployment",
    ]
    for obj in objects:
        # The run volume holds the checkpoints: the garbage collector must not take it with
        # the Experiment (test_the_run_volume_outlives_the_experiment_unless_asked).
        owned = obj["kind"] != "PersistentVolumeClaim"
        assert obj["metadata"].get("ownerReferences") == ([OWNER] if owned else None)
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"][reconcile.LABEL_EXPERIMENT] == "exp"


def test_the_run_volume_outlives_the_experiment_unless_asked():
    claim = by_kind(reconcile.render(exp_of(), OWNER, "team-a"))["PersistentVolumeClaim"]
    # No owner reference: `kubectl delete experiment` and `helm uninstall` leave the claim,
    # and GKE's default StorageClass (reclaim Delete) keeps its disk.
    assert "ownerReferences" not in claim["metadata"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    deleted = by_kind(
        reconcile.render(
            exp_of(checkpoint={"volumeRetention": "Delete", "volumeStorageClassName": "ssd"}),
            OWNER,
            "team-a",
        )
    )["PersistentVolumeClaim"]
    assert deleted["metadata"]["ownerReferences"] == [OWNER]
    assert deleted["spec"]["storageClassName"] == "ssd"
    with pytest.raises(ConfigError, match="spec.checkpoint.volumeRetention"):
        exp_of(checkpoint={"volumeRetention": "Forget"})


def test_config_map_holds_the_resolved_experiment():
    exp = exp_of(actors={"replicas": 3})
    cm = by_kind(reconcile.render(exp))["ConfigMap"]
    assert parse_experiment(yaml.safe_load(cm["data"]["config.yaml"])) == exp


def test_pods_run_the_entry_points_with_the_config():
    objs = by_kind(reconcile.render(exp_of(learner={"port": 7000})))
    learner = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert learner["command"][:5] == [
        "python",
        "-m",
        "seedrl.learner",
        "--config",
        reconcile.CONFIG_FILE,
    ]
    assert "[::]:7000" in learner["command"]
    actor = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert actor["command"] == [
        "python",
        "-m",
        "seedrl.actors",
        "--config",
        reconcile.CONFIG_FILE,
        "--learner",
        "exp-learner:7000",
        "--index",
        "auto",
        "--tls-ca",
        f"{reconcile.TLS_DIR}/ca.crt",
    ]
    for container in (learner, actor):
        assert {"name": "config", "mountPath": "/etc/seedrl", "readOnly": True} in container[
            "volumeMounts"
        ]


def test_containers_are_locked_down():
    for obj in reconcile.render(exp_of()):
        if obj["kind"] not in ("Job", "Deployment"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_learner_job_is_replaced_by_exit_code_and_has_time_to_checkpoint():
    job = by_kind(
        reconcile.render(
            exp_of(backoffLimit=3, activeDeadlineSeconds=99, ttlSecondsAfterFinished=60)
        )
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


def test_failure_policy_follows_the_exit_codes():
    from seedrl.common.exit_codes import ExitCode

    policy = by_kind(reconcile.render(exp_of()))["Job"]["spec"]["podFailurePolicy"]
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
    # The env spec init container: an env the Experiment cannot make fails the Job at once; a
    # crash of it counts as one; only the learner's codes mean the learner's outcome.
    env_spec = reconcile.ENV_SPEC_CONTAINER
    assert _first_rule(policy, exit_code=ExitCode.BAD_CONFIG, container=env_spec) == "FailJob"
    assert _first_rule(policy, exit_code=ExitCode.FAILED, container=env_spec) is None
    assert _first_rule(policy, exit_code=ExitCode.STOPPED, container=env_spec) is None
    assert _first_rule(policy, exit_code=ExitCode.CHECKPOINT_LOCATION, container=env_spec) is None
    for rule in policy["rules"]:
        assert 0 not in (rule.get("onExitCodes") or {}).get("values", [])  # the API refuses 0


def test_the_learner_pod_derives_its_env_spec_with_the_actor_image_first():
    # As `seedrl train` does locally: the actors' code makes the env once and writes its spec,
    # which the learner serves (--env-spec) and checks every actor's hello against.
    exp = exp_of(
        env={"id": "ALE/Pong-v5"},
        learner={"resources": {"cpu": "3", "memory": "12Gi"}, "accelerator": {"kind": "gpu"}},
        actors={"image": "registry.example/seedrl/actors:custom"},
    )
    job = by_kind(reconcile.render(exp, OWNER, "team-a"))["Job"]
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (learner,) = pod["containers"]
    assert init["name"] == reconcile.ENV_SPEC_CONTAINER
    assert init["image"] == "registry.example/seedrl/actors:custom"
    assert init["command"] == [
        "python",
        "-m",
        "seedrl.actors",
        "--config",
        reconcile.CONFIG_FILE,
        "--env-spec-out",
        reconcile.ENV_SPEC_FILE,
    ]
    at = learner["command"].index("--env-spec")
    assert learner["command"][at + 1] == reconcile.ENV_SPEC_FILE
    assert reconcile.ENV_SPEC_FILE.startswith(reconcile.SHARED_DIR + "/")
    # One emptyDir between them: written by the init container, read-only to the learner.
    (shared,) = [v for v in pod["volumes"] if v["name"] == "shared"]
    assert shared == {"name": "shared", "emptyDir": {}}
    mounts = {m["name"]: m for m in init["volumeMounts"]}
    assert mounts["shared"]["mountPath"] == reconcile.SHARED_DIR
    assert not mounts["shared"].get("readOnly") and mounts["config"]["readOnly"]
    assert {"name": "shared", "mountPath": reconcile.SHARED_DIR, "readOnly": True} in learner[
        "volumeMounts"
    ]
    # Least privilege: no run directory, no TLS key; locked down as the learner is.
    assert set(mounts) == {"config", "shared", "tmp"}
    assert init["securityContext"] == learner["securityContext"]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    # The learner's CPU and memory, none of its GPU: the pod asks for no more than before.
    assert init["resources"]["requests"] == {"cpu": "3", "memory": "12Gi"}
    assert reconcile.GPU_RESOURCE in learner["resources"]["limits"]
    assert reconcile.GPU_RESOURCE not in init["resources"]["limits"]
    # Why it failed reaches the Experiment: the end of its log.
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    kubernetes_validate.validate(job, "1.33.0", strict=True)


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
                    "name": reconcile.ENV_SPEC_CONTAINER,
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
    reason, message = reconcile.failure_reason(failed, [pod])
    assert reason == "InvalidConfiguration"
    assert "exp-learner-q7, init container env-spec: exit code 2" in message
    assert message.endswith("cannot make 'NoSuchEnv-v9'")


def test_learner_is_protected_from_voluntary_disruption_and_kept_off_spot():
    objs = by_kind(reconcile.render(exp_of()))
    pod_template = objs["Job"]["spec"]["template"]
    assert pod_template["metadata"]["annotations"][reconcile.ANNOTATION_SAFE_TO_EVICT] == "false"
    pdb = objs["PodDisruptionBudget"]["spec"]
    # A Job has no scale subresource: only an integer minAvailable is honoured for its pods.
    assert pdb["minAvailable"] == 1 and "maxUnavailable" not in pdb
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["selector"]["matchLabels"].items() <= pod_template["metadata"]["labels"].items()
    terms = pod_template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # Off Spot and off the older preemptible VMs alike: both give a pod 15 s.
    assert terms == [
        {
            "matchExpressions": [
                {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
                {"key": "cloud.google.com/gke-preemptible", "operator": "DoesNotExist"},
            ]
        }
    ]
    # Asked for, it goes to Spot nodes.
    spot = by_kind(reconcile.render(exp_of(learner={"spot": True})))["Job"]["spec"]["template"][
        "spec"
    ]
    assert "affinity" not in spot
    assert spot["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert spot["tolerations"][0]["key"] == "cloud.google.com/gke-spot"


def test_a_spot_learner_budgets_its_final_checkpoint_for_the_15_seconds_gke_gives():
    objs = by_kind(reconcile.render(exp_of(learner={"spot": True})))
    pod = objs["Job"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 15
    # The learner is told, and gives up on its final checkpoint 5 s before the kill.
    assert _arg(pod["containers"][0], "--grace-seconds") == "15"
    on_demand = by_kind(reconcile.render(exp_of()))["Job"]["spec"]["template"]["spec"]
    assert on_demand["terminationGracePeriodSeconds"] == 300
    assert _arg(on_demand["containers"][0], "--grace-seconds") == "300"


def test_without_a_checkpoint_uri_the_run_directory_outlives_the_pod():
    objs = by_kind(reconcile.render(exp_of(checkpoint={"volumeSize": "5Gi"})))
    claim = objs["PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    volumes = {v["name"]: v for v in objs["Job"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["run"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    actor_volumes = {
        v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    }
    assert actor_volumes["run"] == {"name": "run", "emptyDir": {}}
    with_uri = by_kind(reconcile.render(exp_of(checkpoint={"uri": "gs://bucket/runs/x"})))
    assert "PersistentVolumeClaim" not in with_uri
    volumes = {v["name"]: v for v in with_uri["Job"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["run"] == {"name": "run", "emptyDir": {}}


def test_probes_on_healthz_and_readyz():
    objs = by_kind(reconcile.render(exp_of()))
    for kind in ("Job", "Deployment"):
        container = objs[kind]["spec"]["template"]["spec"]["containers"][0]
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert "metrics" in [p["name"] for p in container["ports"]]
        # Five minutes for TensorFlow's import and a checkpoint restore before liveness counts.
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] == 300
    # The actors reach the learner through its Service only once it is ready: a learner that
    # serves is in it within a second, while the many actors are probed every 5 s.
    learner = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    actor = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert (
        learner["startupProbe"]["periodSeconds"] == learner["readinessProbe"]["periodSeconds"] == 1
    )
    assert actor["readinessProbe"]["periodSeconds"] == 5


def test_spot_actors_get_at_most_the_15_seconds_gke_gives():
    pod = by_kind(reconcile.render(exp_of(actors={"spot": True})))["Deployment"]["spec"][
        "template"
    ]["spec"]
    assert pod["terminationGracePeriodSeconds"] <= 15


def _arg(container, flag):
    """The value of ``flag`` in a container's command."""
    command = container["command"]
    return command[command.index(flag) + 1]


@pytest.mark.parametrize("enabled", [True, False])
def test_tls_mounts_the_learners_key_into_the_learner_and_only_the_ca_into_actors(enabled):
    objs = by_kind(reconcile.render(exp_of(learner={"tls": {"enabled": enabled}})))
    learner = objs["Job"]["spec"]["template"]["spec"]
    actor = objs["Deployment"]["spec"]["template"]["spec"]
    secrets = {
        role: [
            (v["secret"]["secretName"], [i["key"] for i in v["secret"]["items"]])
            for v in pod["volumes"]
            if "secret" in v
        ]
        for role, pod in (("learner", learner), ("actor", actor))
    }
    if not enabled:
        assert secrets == {"learner": [], "actor": []}
        assert "--tls-cert" not in learner["containers"][0]["command"]
        assert "--tls-ca" not in actor["containers"][0]["command"]
        return
    assert secrets == {
        "learner": [("exp-learner-tls", ["tls.crt", "tls.key"])],
        "actor": [("exp-learner-tls", ["ca.crt"])],
    }
    assert _arg(learner["containers"][0], "--tls-cert") == f"{reconcile.TLS_DIR}/tls.crt"
    assert _arg(learner["containers"][0], "--tls-key") == f"{reconcile.TLS_DIR}/tls.key"
    assert _arg(actor["containers"][0], "--tls-ca") == f"{reconcile.TLS_DIR}/ca.crt"
    # The actors verify the name they connect to, which the certificate carries.
    assert _arg(actor["containers"][0], "--learner").split(":")[0] in reconcile.learner_dns_names(
        "exp", "default"
    )
    for pod in (learner, actor):
        assert {"name": "tls", "mountPath": reconcile.TLS_DIR, "readOnly": True} in pod[
            "containers"
        ][0]["volumeMounts"]


def test_cert_manager_signs_the_learner_with_a_ca_of_the_experiments_own():
    exp = exp_of()
    root, ca, ca_issuer, leaf = reconcile.render_certificate(exp, OWNER, namespace="rl")
    assert (root["kind"], root["spec"]) == ("Issuer", {"selfSigned": {}})
    # A CA whose key never rotates signs the leaf: the leaf Secret's ca.crt, all the actors
    # trust, stays the same when the leaf renews (rotationPolicy Always: a new key each time).
    assert ca["kind"] == "Certificate" and ca["spec"]["isCA"] is True
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert ca["spec"]["issuerRef"]["name"] == root["metadata"]["name"]
    assert ca_issuer["kind"] == "Issuer"
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    assert leaf["kind"] == "Certificate" and "isCA" not in leaf["spec"]
    assert leaf["spec"]["secretName"] == "exp-learner-tls"
    assert leaf["spec"]["privateKey"]["rotationPolicy"] == "Always"
    assert leaf["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "Issuer",
        "name": ca_issuer["metadata"]["name"],
    }
    assert leaf["spec"]["dnsNames"] == [
        "exp-learner",
        "exp-learner.rl",
        "exp-learner.rl.svc",
        "exp-learner.rl.svc.cluster.local",
    ]
    assert len({(o["kind"], o["metadata"]["name"]) for o in (root, ca, ca_issuer, leaf)}) == 4
    for obj in (root, ca, ca_issuer, leaf):
        assert obj["metadata"]["ownerReferences"] == [OWNER]
    assert reconcile.render_certificate(exp_of(learner={"tls": {"enabled": False}})) == []


def test_tpu_learner_gets_node_selectors_chips_and_toleration():
    exp = exp_of(
        learner={
            "accelerator": {"kind": "tpu", "tpu": {"type": "tpu-v6e-slice", "topology": "2x4"}}
        }
    )
    pod = by_kind(reconcile.render(exp))["Job"]["spec"]["template"]["spec"]
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
def test_tpu_chips_requested_are_the_topologys(tpu_type, topology, chips):
    exp = exp_of(
        learner={"accelerator": {"kind": "tpu", "tpu": {"type": tpu_type, "topology": topology}}}
    )
    pod = by_kind(reconcile.render(exp))["Job"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == chips
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology


def test_an_explicit_learner_image_wins_over_the_accelerators():
    exp = exp_of(
        learner={"image": "europe-docker.pkg.dev/p/r/learner:mine", "accelerator": {"kind": "tpu"}}
    )
    container = by_kind(reconcile.render(exp))["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "europe-docker.pkg.dev/p/r/learner:mine"


def test_gpu_and_cpu_learners():
    pod = by_kind(
        reconcile.render(
            exp_of(
                learner={"accelerator": {"kind": "gpu", "gpu": {"type": "nvidia-l4", "count": 2}}}
            )
        )
    )["Job"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["containers"][0]["image"] == "ghcr.io/seedrl/learner:0.1.0-gpu"
    assert _arg(pod["containers"][0], "--accelerator") == "gpu"
    cpu = by_kind(reconcile.render(exp_of()))["Job"]["spec"]["template"]["spec"]
    assert cpu["containers"][0]["image"] == "ghcr.io/seedrl/learner:0.1.0"
    assert "nodeSelector" not in cpu and "tolerations" not in cpu
    assert cpu["containers"][0]["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "16Gi"},
    }


def test_spot_actors_service_account_and_kueue():
    objs = by_kind(
        reconcile.render(
            exp_of(actors={"spot": True}, serviceAccountName="wi-sa", queueName="team-a-queue")
        )
    )
    actor_pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert actor_pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert actor_pod["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
    # The learner's account (Workload Identity: the checkpoint bucket) is not the actors'.
    assert "serviceAccountName" not in actor_pod
    assert objs["Job"]["spec"]["template"]["spec"]["serviceAccountName"] == "wi-sa"
    own = by_kind(reconcile.render(exp_of(actors={"serviceAccountName": "envs"})))
    assert own["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "envs"
    assert "serviceAccountName" not in own["Job"]["spec"]["template"]["spec"]
    # Kueue admits a queued Job by unsuspending it.
    assert objs["Job"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert objs["Job"]["spec"]["suspend"] is True


def test_suspend_and_finish_scale_actors_to_zero():
    assert by_kind(reconcile.render(exp_of(suspend=True)))["Deployment"]["spec"]["replicas"] == 0
    assert by_kind(reconcile.render(exp_of(suspend=True)))["Job"]["spec"]["suspend"] is True
    assert by_kind(reconcile.render(exp_of(), finished=True))["Deployment"]["spec"]["replicas"] == 0
    assert (
        by_kind(reconcile.render(exp_of(actors={"replicas": 5})))["Deployment"]["spec"]["replicas"]
        == 5
    )


def test_network_policy_admits_only_this_experiments_actors_to_grpc():
    objs = by_kind(reconcile.render(exp_of(learner={"port": 7000, "metricsPort": 7001})))
    policy = objs["NetworkPolicy"]["spec"]
    learner_labels = objs["Job"]["spec"]["template"]["metadata"]["labels"]
    actor_labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]

    def selects(selector, labels):
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(policy["podSelector"]["matchLabels"], learner_labels)
    assert not selects(policy["podSelector"]["matchLabels"], actor_labels)
    grpc_rule, metrics_rule = policy["ingress"]
    assert grpc_rule["ports"] == [{"protocol": "TCP", "port": 7000}]
    assert selects(grpc_rule["from"][0]["podSelector"]["matchLabels"], actor_labels)
    other = dict(actor_labels, **{reconcile.LABEL_EXPERIMENT: "other"})
    assert not selects(grpc_rule["from"][0]["podSelector"]["matchLabels"], other)
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 7001}]}
    service = objs["Service"]["spec"]
    assert selects(service["selector"], learner_labels)
    assert [p["port"] for p in service["ports"]] == [7000, 7001]


def _template_hash(objs):
    return objs["Deployment"]["spec"]["template"]["metadata"]["annotations"][
        reconcile.ANNOTATION_CONFIG_HASH
    ]


def _job_hash(objs):
    return objs["Job"]["metadata"]["annotations"][reconcile.ANNOTATION_LEARNER_HASH]


def test_only_what_actors_read_rolls_them():
    base = by_kind(reconcile.render(exp_of()))
    for change in ({"env": {"id": "Acrobot-v1"}}, {"seed": 7}, {"actors": {"envsPerActor": 3}}):
        assert _template_hash(by_kind(reconcile.render(exp_of(**change)))) != _template_hash(
            base
        ), change
    # Scaling, and any learner-only edit, leave the actors' template as it is.
    for change in (
        {"actors": {"replicas": 17}},
        {"budget": {"maxEnvSteps": 5}},
        {"learner": {"batchSize": 4}},
        {"suspend": True},
    ):
        objs = by_kind(reconcile.render(exp_of(**change)))
        assert objs["Deployment"]["spec"]["template"] == base["Deployment"]["spec"]["template"], (
            change
        )


def test_learner_hash_covers_what_the_learner_runs_but_scaling_and_suspend():
    base = _job_hash(by_kind(reconcile.render(exp_of())))
    for change in (
        {"budget": {"maxEnvSteps": 5}},
        {"learner": {"batchSize": 4}},
        {"backoffLimit": 1},
        {"learner": {"image": "example.com/l:2"}},
    ):
        assert _job_hash(by_kind(reconcile.render(exp_of(**change)))) != base, change
    for change in ({"actors": {"replicas": 17}}, {"suspend": True}):
        assert _job_hash(by_kind(reconcile.render(exp_of(**change)))) == base, change
    # R2D2's exploration schedule is defined over the actor count: the learner must know it.
    r2d2 = {"agent": {"name": "r2d2"}}
    assert _job_hash(by_kind(reconcile.render(exp_of(**r2d2)))) != _job_hash(
        by_kind(reconcile.render(exp_of(actors={"replicas": 3}, **r2d2)))
    )


def test_a_label_or_annotation_edit_neither_replaces_the_learner_nor_rolls_the_actors():
    def rendered(labels, annotations):
        return by_kind(
            reconcile.render(
                parse_experiment(
                    {
                        "metadata": {
                            "name": "exp",
                            "labels": labels,
                            "annotations": annotations,
                        },
                        "spec": {},
                    }
                )
            )
        )

    base = rendered({"team": "rl"}, {})
    # kubectl label, an Argo CD annotation, the chart's helm.sh/chart label of a new version.
    edited = rendered(
        {"team": "rl", "helm.sh/chart": "seedrl-experiment-0.2.0", "cost-center": "42"},
        {"argocd.argoproj.io/tracking-id": "x"},
    )
    assert _job_hash(edited) == _job_hash(base)
    for kind in ("Job", "Deployment"):
        assert edited[kind]["spec"]["template"] == base[kind]["spec"]["template"], kind
        # The objects themselves still carry the user's labels.
        assert edited[kind]["metadata"]["labels"]["cost-center"] == "42"


# --------------------------------------------------------------------------------------------
# Validation and immutable fields
# --------------------------------------------------------------------------------------------


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
    exp = reconcile.validate(stored({"actors": {"replicas": 3}}))
    assert exp.metadata.namespace == "team-a" and exp.spec.actors.replicas == 3
    assert exp.metadata.annotations == {}
    body = stored()
    body["metadata"]["annotations"]["team.example.com/owner"] = "ana"
    assert reconcile.validate(body).metadata.annotations == {"team.example.com/owner": "ana"}


def test_validate_names_the_field_and_the_cluster_name_limit():
    with pytest.raises(ConfigError) as e:
        reconcile.validate(stored({"learner": {"unrollLength": 0}}))
    assert e.value.problems == [("spec.learner.unrollLength", "must be >= 2, got 0")]
    with pytest.raises(ConfigError) as e:
        reconcile.validate(stored(name="a" * 60))
    assert e.value.problems[0][0] == "metadata.name"


def test_immutable_changes_name_the_paths():
    applied = reconcile.immutable_part(exp_of())
    assert reconcile.immutable_changes(applied, exp_of(actors={"replicas": 9})) == []
    assert reconcile.immutable_changes(applied, exp_of(env={"id": "Acrobot-v1"})) == ["spec.env.id"]
    assert reconcile.immutable_changes(applied, exp_of(agent={"name": "ppo"})) == [
        "spec.agent.name"
    ]
    assert reconcile.immutable_changes(json.loads(json.dumps(applied)), exp_of()) == []


def test_an_operator_upgrade_that_adds_fields_changes_no_running_experiment():
    # status.appliedImmutable written by an operator from before spec.agent.vtrace.epochs:
    # the new operator reads the missing field at its default, not as a change.
    applied = json.loads(json.dumps(reconcile.immutable_part(exp_of())))
    del applied["agent"]["vtrace"]["epochs"]
    assert reconcile.immutable_changes(applied, exp_of()) == []
    assert reconcile.immutable_changes(applied, exp_of(agent={"vtrace": {"epochs": 3}})) == [
        "spec.agent.vtrace.epochs"
    ]


# --------------------------------------------------------------------------------------------
# The learner's status and the Experiment's status
# --------------------------------------------------------------------------------------------

LEARNER_JSON = {
    "experiment": "exp",
    "state": "running",
    "env_steps": 12000,
    "learner_steps": 30,
    "episodes": 50,
    "mean_return": 21.5,
    "actors": 2,
    "last_checkpoint": "ckpt-3",
    "stop_reason": None,
    "elapsed": 12.0,
    "metrics": {"loss": 1.0},
}


def conds(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def job(ready=0, active=0, conditions=(), start="2026-01-01T00:00:00Z"):
    return {
        "status": {
            "ready": ready,
            "active": active,
            "startTime": start,
            "conditions": [dict(c) for c in conditions],
        }
    }


def deployment(ready):
    return {"status": {"readyReplicas": ready}}


def test_status_advances_from_pending_to_running_to_succeeded():
    exp = exp_of(actors={"replicas": 2})
    s0 = reconcile.compute_status(
        exp,
        generation=1,
        previous=None,
        job=None,
        deployment=None,
        learner=None,
        now="2026-01-01T00:00:00Z",
    )
    assert s0["phase"] == "Pending" and conds(s0)["Ready"][0] == "False"
    assert s0["selector"] == "seedrl.dev/experiment=exp,seedrl.dev/role=actor"
    s1 = reconcile.compute_status(
        exp,
        generation=1,
        previous=s0,
        job=job(1, 1),
        deployment=deployment(1),
        learner=None,
        learner_error="connection refused",
        now="2026-01-01T00:01:00Z",
    )
    assert s1["phase"] == "Running"
    assert conds(s1)["ActorsReady"] == ("False", "NotAllReady")
    assert conds(s1)["Progressing"] == ("Unknown", "StatusUnavailable")
    learner = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    s2 = reconcile.compute_status(
        exp,
        generation=1,
        previous=s1,
        job=job(1, 1),
        deployment=deployment(2),
        learner=learner,
        now="2026-01-01T00:02:00Z",
    )
    assert conds(s2)["Ready"] == ("True", "Ready")
    assert conds(s2)["Progressing"] == ("True", "Training")
    assert s2["envSteps"] == 12000 and s2["learnerSteps"] == 30 and s2["meanReturn"] == 21.5
    assert s2["lastCheckpoint"] == "ckpt-3" and s2["replicas"] == 2
    assert s2["startTime"] == "2026-01-01T00:00:00Z"
    ready = next(c for c in s2["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:02:00Z"
    valid = next(c for c in s2["conditions"] if c["type"] == "Valid")
    assert valid["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged since s0
    done = job(
        0,
        0,
        [
            {
                "type": "Complete",
                "status": "True",
                "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
            }
        ],
    )
    done["status"]["completionTime"] = "2026-01-01T01:00:00Z"
    s3 = reconcile.compute_status(
        exp,
        generation=1,
        previous=s2,
        job=done,
        deployment=deployment(2),
        learner=None,
        now="2026-01-01T01:00:05Z",
    )
    assert s3["phase"] == "Succeeded" and s3["completionTime"] == "2026-01-01T01:00:00Z"
    assert s3["actors"]["desired"] == 0
    assert conds(s3)["Complete"] == ("True", "CompletionsReached")
    # The Job is deleted after ttlSecondsAfterFinished: still Succeeded, no actors wanted.
    s4 = reconcile.compute_status(
        exp, generation=1, previous=s3, job=None, deployment=deployment(0), learner=None
    )
    assert s4["phase"] == "Succeeded" and s4["actors"]["desired"] == 0
    assert conds(s4)["LearnerReady"] == ("False", "Finished")
    assert reconcile.finished_before(s4)
    assert not reconcile.finished_before(
        reconcile.invalid_status(None, 1, ConfigError([("spec.x", "bad")]), "2026-01-01T00:00:00Z")
    )


def learner_pod(state, deleting=False):
    pod = {
        "metadata": {"name": "exp-learner-x", "labels": {"seedrl.dev/role": "learner"}},
        "status": {"containerStatuses": [{"name": "learner", "state": {state: {}}}]},
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    return pod


def test_the_phase_is_running_from_the_learner_containers_start_not_its_readiness():
    # The learner imports TensorFlow and trains before its first readiness probe passes, and
    # is not ready once finished while it checkpoints: a short run read Pending -> Succeeded.
    exp = exp_of()

    def phase_of(*pods, ready=0):
        s = reconcile.compute_status(
            exp,
            generation=1,
            previous=None,
            job=job(ready, 1),
            deployment=None,
            learner=None,
            learner_pods=pods,
        )
        return s["phase"], conds(s)["LearnerReady"][1]

    assert phase_of() == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("waiting")) == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("running")) == ("Running", "PodNotReady")
    assert phase_of(learner_pod("running"), ready=1) == ("Running", "PodReady")
    # A drained or preempted learner on its way out: waiting for the next one.
    assert phase_of(learner_pod("running", deleting=True)) == ("Pending", "PodNotReady")
    assert phase_of(learner_pod("terminated")) == ("Pending", "PodNotReady")


def test_a_learner_older_than_the_operator_has_its_frames_counted_from_its_steps():
    # A learner image from before env_frames (an Experiment running through an operator
    # upgrade) reports steps only: Pong's frames are 4 per step, and its cost per million
    # frames must not read n/a to the end of the run.
    pong = exp_of(env={"id": "ALE/Pong-v5"})
    old = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    assert old.env_frames == 0
    s = reconcile.compute_status(
        pong, generation=1, previous=None, job=job(1, 1), deployment=None, learner=old
    )
    assert s["envSteps"] == 12000 and s["envFrames"] == 48000
    # A learner that counts frames is believed, and one with no steps yet has no frames.
    new = LearnerStatus.from_json(json.dumps({**LEARNER_JSON, "env_frames": 47996}))
    assert reconcile.learner_with_frames(pong, new).env_frames == 47996
    idle = LearnerStatus.from_json(json.dumps({**LEARNER_JSON, "env_steps": 0}))
    assert reconcile.learner_with_frames(pong, idle).env_frames == 0
    cartpole = reconcile.learner_with_frames(exp_of(), old)
    assert cartpole.env_frames == 12000


def test_no_env_steps_for_no_progress_seconds_turns_progressing_false():
    exp = exp_of(budget={"noProgressSeconds": 120})
    stalled = LearnerStatus.from_json(
        json.dumps(
            {
                **LEARNER_JSON,
                "state": "waiting_for_actors",
                "env_steps": 0,
                "seconds_without_env_steps": 130.4,
                "refused_streams": 3,
                "last_refusal": "a-1: env spec differs from the learner's: observation_shape",
            }
        )
    )
    assert stalled.refused_streams == 3 and stalled.last_refusal.startswith("a-1: env spec")
    status = reconcile.compute_status(
        exp,
        generation=1,
        previous=None,
        job=job(1, 1),
        deployment=deployment(2),
        learner=stalled,
        now="2026-01-01T00:02:00Z",
    )
    assert conds(status)["Progressing"] == ("False", "NoProgress")
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Progressing")
    assert "No env steps for 130 s" in message and "3 actor stream(s) refused" in message
    assert "observation_shape" in message
    # Below the limit, or with the limit off, the learner is just waiting or training.
    for budget, idle in (({"noProgressSeconds": 120}, 20.0), ({"noProgressSeconds": 0}, 1e6)):
        learner = dataclasses.replace(stalled, seconds_without_env_steps=idle)
        status = reconcile.compute_status(
            exp_of(budget=budget),
            generation=1,
            previous=None,
            job=job(1, 1),
            deployment=deployment(2),
            learner=learner,
        )
        assert conds(status)["Progressing"] == ("False", "WaitingForActors")
    with pytest.raises(ValueError, match="last_refusal"):
        LearnerStatus.from_json(json.dumps({"state": "running", "last_refusal": 3}))


def test_status_of_failed_suspended_and_refused():
    exp = exp_of()
    failed = reconcile.compute_status(
        exp,
        generation=2,
        previous=None,
        job=job(
            conditions=[
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        ),
        deployment=deployment(0),
        learner=None,
    )
    assert failed["phase"] == "Failed" and conds(failed)["Failed"][1] == "BackoffLimitExceeded"
    suspended = reconcile.compute_status(
        exp_of(suspend=True),
        generation=2,
        previous=None,
        job=job(),
        deployment=deployment(0),
        learner=None,
    )
    assert suspended["phase"] == "Suspended"
    assert conds(suspended)["Suspended"] == ("True", "SpecSuspended")
    assert conds(suspended)["ActorsReady"] == ("True", "ScaledToZero")
    refused = reconcile.compute_status(
        exp,
        generation=4,
        previous=None,
        job=job(1, 1),
        deployment=deployment(2),
        learner=None,
        refused=["spec.env.id"],
    )
    assert conds(refused)["SpecApplied"] == ("False", "ImmutableFieldChanged")
    assert (
        "spec.env.id"
        in next(c for c in refused["conditions"] if c["type"] == "SpecApplied")["message"]
    )
    assert "appliedImmutable" not in refused


def test_invalid_status_names_the_field():
    error = ConfigError([("spec.learner.unrollLength", "must be >= 2, got 0")])
    status = reconcile.invalid_status(None, 5, error, "2026-01-01T00:00:00Z")
    assert status["phase"] == "Failed" and status["observedGeneration"] == 5
    assert conds(status)["Valid"] == ("False", "ValidationFailed")
    message = next(c for c in status["conditions"] if c["type"] == "Valid")["message"]
    assert message == "spec.learner.unrollLength: must be >= 2, got 0"


def test_status_validates_against_the_crd_status_schema():
    exp = exp_of()
    learner = LearnerStatus.from_json(json.dumps(LEARNER_JSON))
    status = reconcile.compute_status(
        exp, generation=1, previous=None, job=job(1, 1), deployment=deployment(2), learner=learner
    )
    status["cost"] = {"totalUsd": 1.5, "usdPerHour": 3.0, "usdPerMillionFrames": 0.1}
    schema = to_json_schema(crd.status_schema(), closed=True)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(
        status
    )
    invalid = reconcile.invalid_status(
        status, 2, ConfigError([("spec.x", "bad")]), reconcile.now_rfc3339()
    )
    jsonschema.Draft202012Validator(schema).validate(invalid)


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


def test_strict_validation_does_reject_a_bad_manifest():
    # The check above can fail: an unknown field or a wrong type is refused.
    deployment = by_kind(reconcile.render(exp_of(), OWNER, "team-a"))["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy2"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.33.0", strict=True)
    job = by_kind(reconcile.render(exp_of(), OWNER, "team-a"))["Job"]
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
    reason, message = reconcile.failure_reason(job_failed, pods)
    assert reason == "CheckpointLocationUnusable"
    assert "exp-learner-b" in message and "exit code 4" in message
    assert message.endswith("not a bucket")
    oom = [_failed_pod("exp-learner-c", 137, "2026-01-01T00:00:09Z", reason="OOMKilled")]
    reason, message = reconcile.failure_reason(
        {
            "type": "Failed",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
        oom,
    )
    assert reason == "OOMKilled" and "reason OOMKilled" in message and "SIGKILL" in message
    assert reconcile.failure_reason({"reason": "DeadlineExceeded", "message": "m"}) == (
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
    reason, message = reconcile.failure_reason(job_failed, no_tpu)
    assert reason == "AcceleratorMissing" and "scheduled for a TPU" in message
    assert "exit code 5 (the accelerator the learner was scheduled for is missing)" in message


def test_a_learner_edit_replaces_an_unfinished_job_only():
    exp = exp_of()
    job = by_kind(reconcile.render(exp))["Job"]
    assert not reconcile.job_outdated(exp, job)
    assert not reconcile.job_outdated(exp_of(actors={"replicas": 9}), job)
    edited = exp_of(budget={"maxEnvSteps": 99})
    assert reconcile.job_outdated(edited, job)
    finished = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not reconcile.job_outdated(edited, finished)
    status = reconcile.compute_status(
        edited, generation=2, previous=None, job=job, deployment=None, learner=None, replacing=True
    )
    assert reconcile.condition(status, "SpecApplied")["reason"] == "ReplacingLearner"
    status = reconcile.compute_status(
        edited, generation=2, previous=None, job=finished, deployment=None, learner=None
    )
    assert reconcile.condition(status, "SpecApplied")["reason"] == "LearnerFinished"


def test_the_cpu_example_renders_what_day_two_on_gke_needs():
    """The example of k8s/examples as a platform engineer renders it (issue 26's checks)."""
    document = load(ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml")
    document["spec"]["serviceAccountName"] = "learner-wi"
    document["spec"]["learner"]["spot"] = True
    objs = by_kind(reconcile.render(parse_experiment(document), OWNER, "team-a"))
    assert "ownerReferences" not in objs["PersistentVolumeClaim"]["metadata"]
    assert objs["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert "serviceAccountName" not in objs["Deployment"]["spec"]["template"]["spec"]
    assert objs["Job"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] <= 15
    labelled = dict(document, metadata={**document["metadata"], "labels": {"team": "x"}})
    labelled["metadata"]["annotations"] = {"argocd.argoproj.io/sync-wave": "1"}
    assert _job_hash(by_kind(reconcile.render(parse_experiment(labelled)))) == _job_hash(objs)


PLACEMENT = {
    "nodeSelector": {"cloud.google.com/gke-nodepool": "rl", "cloud.google.com/gke-spot": "x"},
    "tolerations": [
        {"key": "team", "value": "rl", "effect": "NoSchedule"},
        {
            "key": "maintenance",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    },
    "priorityClassName": "rl-high",
    "imagePullSecrets": ["regcred"],
}


def test_placement_of_each_role_is_merged_with_the_operators_own():
    tpu = {"kind": "tpu", "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x2"}}
    objs = by_kind(
        reconcile.render(
            exp_of(
                learner={"accelerator": tpu, "placement": PLACEMENT},
                actors={"spot": True, "placement": {"priorityClassName": "rl-low"}},
            )
        )
    )
    learner = objs["Job"]["spec"]["template"]["spec"]
    # The operator's selectors win on a shared key; the user's are kept.
    assert learner["nodeSelector"]["cloud.google.com/gke-nodepool"] == "rl"
    assert learner["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    # The operator's tolerations first (the TPU taint), then the user's as the API has them.
    assert learner["tolerations"][0]["key"] == "google.com/tpu"
    assert learner["tolerations"][1:] == [
        {"operator": "Equal", "key": "team", "value": "rl", "effect": "NoSchedule"},
        {
            "operator": "Exists",
            "key": "maintenance",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ]
    # Off Spot in every one of the user's terms (ORed), which keep their own expressions.
    terms = learner["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 2
    for term, zone in zip(terms, "ab"):
        keys = [e["key"] for e in term["matchExpressions"]]
        assert keys == ["zone", "cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible"]
        assert term["matchExpressions"][0]["values"] == [zone]
    assert learner["affinity"]["podAntiAffinity"] == PLACEMENT["affinity"]["podAntiAffinity"]
    assert learner["priorityClassName"] == "rl-high"
    assert learner["imagePullSecrets"] == [{"name": "regcred"}]
    actors = objs["Deployment"]["spec"]["template"]["spec"]
    assert actors["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert actors["priorityClassName"] == "rl-low" and "imagePullSecrets" not in actors
    # What the operator renders is a valid pod spec for the API server.
    for obj in objs.values():
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


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
def test_a_bad_placement_is_refused_naming_the_field(placement, path):
    with pytest.raises(ConfigError, match=path.replace("[", r"\[").replace("]", r"\]")):
        exp_of(learner={"placement": placement})


def _images(objs):
    learner = objs["Job"]["spec"]["template"]["spec"]
    return (
        learner["containers"][0]["image"],
        learner["initContainers"][0]["image"],
        objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"],
    )


def test_both_roles_take_their_default_images_from_one_registry_and_release():
    from seedrl.common.config import ImageDefaults

    # The CRD stores no actor image: the operator resolves both roles' defaults alike.
    assert exp_of().spec.actors.image == ""
    assert _images(by_kind(reconcile.render(exp_of()))) == (
        "ghcr.io/seedrl/learner:0.1.0",
        "ghcr.io/seedrl/actors:0.1.0",
        "ghcr.io/seedrl/actors:0.1.0",
    )
    mirror = ImageDefaults(registry="europe-docker.pkg.dev/p/seedrl", release="0.2.0")
    gpu = exp_of(learner={"accelerator": {"kind": "gpu"}})
    assert _images(by_kind(reconcile.render(gpu, images=mirror))) == (
        "europe-docker.pkg.dev/p/seedrl/learner:0.2.0-gpu",
        "europe-docker.pkg.dev/p/seedrl/actors:0.2.0",
        "europe-docker.pkg.dev/p/seedrl/actors:0.2.0",
    )
    # An image the spec names wins, for either role.
    named = exp_of(actors={"image": "example.com/a:1"}, learner={"image": "example.com/l:1"})
    assert _images(by_kind(reconcile.render(named, images=mirror))) == (
        "example.com/l:1",
        "example.com/a:1",
        "example.com/a:1",
    )


def test_an_operator_upgrade_keeps_the_images_an_experiment_started_with():
    from seedrl.common.config import ImageDefaults

    old, new = ImageDefaults(release="0.1.0"), ImageDefaults(release="0.2.0")
    # First reconcile: the running operator's defaults, recorded in the status.
    assert reconcile.image_defaults(None, new) == new
    status = reconcile.compute_status(
        exp_of(),
        generation=1,
        previous=None,
        job=None,
        deployment=None,
        learner=None,
        images=old,
    )
    assert status["images"] == {"registry": "ghcr.io/seedrl", "release": "0.1.0"}
    # A newer operator renders that Experiment (and any replacement learner) with them.
    assert reconcile.image_defaults(status, new) == old
    assert _images(by_kind(reconcile.render(exp_of(), images=old)))[0].endswith(":0.1.0")
    jsonschema.validate(
        {"images": status["images"]}, to_json_schema(crd.status_schema(), closed=True)
    )


def _job_obj(uid, failed=0, start=None):
    status = {"failed": failed}
    if start:
        status["startTime"] = start
    return {"metadata": {"uid": uid}, "status": status}


def test_a_replaced_or_resumed_learner_does_not_start_its_limits_from_zero():
    exp = exp_of(backoffLimit=6, activeDeadlineSeconds=3600)
    t0, t1, t2 = "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z"
    # Job A ran 10 minutes and counted 2 failures.
    usage = reconcile.advance_usage(None, _job_obj("a", 0, t0), t0)
    usage = reconcile.advance_usage(usage, _job_obj("a", 2, t0), t1)
    # An edit replaced it: Job A is gone, Job B is to be made with what is left.
    usage = reconcile.advance_usage(usage, None, t1)
    left = reconcile.LearnerUsage.from_status({"learnerUsage": usage})
    assert (left.failed, left.active_seconds) == (2, 600.0)
    job = by_kind(reconcile.render(exp, usage=left))["Job"]["spec"]
    assert (job["backoffLimit"], job["activeDeadlineSeconds"]) == (4, 3000)
    # Job B runs 10 minutes, is suspended (its startTime goes), then resumed: the deadline
    # it is resumed with is what is left after both runs.
    usage = reconcile.advance_usage(usage, _job_obj("b", 0, t1), t1)
    usage = reconcile.advance_usage(usage, _job_obj("b", 0, t1), t2)
    usage = reconcile.advance_usage(usage, _job_obj("b", 0, None), t2)
    left = reconcile.LearnerUsage.from_status({"learnerUsage": usage})
    assert (left.failed, left.active_seconds) == (2, 1200.0)
    assert left.deadline(exp) == 2400
    # Used up: at least a second, so the Job fails at once with DeadlineExceeded.
    assert reconcile.LearnerUsage(active_seconds=99999).deadline(exp) == 1
    assert reconcile.LearnerUsage(failed=9).backoff_limit(exp) == 0
    # Recorded by compute_status, in the CRD's status schema.
    status = reconcile.compute_status(
        exp,
        generation=1,
        previous={"learnerUsage": usage},
        job=None,
        deployment=None,
        learner=None,
        now=t2,
    )
    assert status["learnerUsage"]["earlierFailed"] == 2
    jsonschema.validate(status, to_json_schema(crd.status_schema(), closed=True))
