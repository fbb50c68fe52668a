"""The env-spec Job and its ConfigMap (render/env_spec.py): the actors' code, image, identity
and registry credentials derive the env spec, never the learner's pod."""

from __future__ import annotations

import kubernetes_validate

from seedrl.common.exit_codes import ExitCode
from seedrl.service.operator.reconcile import MAX_NAME_LENGTH
from seedrl.service.operator.render.common import (
    CONFIG_FILE,
    ENV_SPEC_KEY,
    TERMINATION_LOG,
    names,
)
from seedrl.service.operator.render.env_spec import (
    SIGTERM_EXIT,
    render_env_spec_config_map,
    render_env_spec_job,
)


def _rule(policy, exit_code=None, conditions=()):
    """The action of the first podFailurePolicy rule that matches (None: counted)."""
    for rule in policy["rules"]:
        codes = rule.get("onExitCodes")
        if codes and exit_code is not None and (exit_code in codes["values"]):
            return rule["action"]
        for pattern in rule.get("onPodConditions") or []:
            if (pattern["type"], pattern["status"]) in conditions:
                return rule["action"]
    return None


def test_the_env_spec_job_runs_as_an_actor_does(exp_of, owner):
    exp = exp_of(
        serviceAccountName="learner-sa",
        learner={"placement": {"imagePullSecrets": ["learner-cred"]}},
        actors={
            "image": "registry.example/seedrl/actors:custom",
            "serviceAccountName": "actors-sa",
            "resources": {"cpu": "500m", "memory": "1Gi"},
            "placement": {"imagePullSecrets": ["actors-cred"], "nodeSelector": {"pool": "cpu"}},
        },
    )
    job = render_env_spec_job(exp, owner, "team-a")
    assert job["metadata"]["name"] == "exp-envspec"
    assert job["metadata"]["ownerReferences"] == [owner]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "initContainers" not in pod
    assert container["image"] == "registry.example/seedrl/actors:custom"
    assert container["command"] == [
        "python",
        "-m",
        "seedrl.actors",
        "--config",
        CONFIG_FILE,
        "--env-spec-message",
        TERMINATION_LOG,
    ]
    assert container["terminationMessagePath"] == TERMINATION_LOG
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # The actors' identity, credentials, nodes and size; nothing of the learner's.
    assert pod["serviceAccountName"] == "actors-sa"
    assert pod["automountServiceAccountToken"] is False
    assert pod["imagePullSecrets"] == [{"name": "actors-cred"}]
    assert pod["nodeSelector"]["pool"] == "cpu"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    # Only the Experiment's config and a scratch /tmp: no run directory, no TLS key.
    assert {v["name"] for v in pod["volumes"]} == {"config", "tmp"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["restartPolicy"] == "Never"
    kubernetes_validate.validate(job, "1.33.0", strict=True)


def test_a_bad_env_fails_the_job_at_once_and_a_drain_does_not_count(exp_of):
    policy = render_env_spec_job(exp_of())["spec"]["podFailurePolicy"]
    assert _rule(policy, exit_code=ExitCode.BAD_CONFIG) == "FailJob"
    assert _rule(policy, exit_code=SIGTERM_EXIT) == "Ignore"
    assert _rule(policy, exit_code=137, conditions=[("DisruptionTarget", "True")]) == "Ignore"
    assert _rule(policy, exit_code=ExitCode.FAILED) is None
    assert _rule(policy, exit_code=137) is None


def test_the_config_map_holds_the_spec_for_the_learner(exp_of, owner):
    config_map = render_env_spec_config_map(exp_of(), '{"env_id": "x"}\n', owner, "team-a")
    assert config_map["metadata"]["name"] == "exp-envspec"
    assert config_map["data"] == {ENV_SPEC_KEY: '{"env_id": "x"}\n'}
    kubernetes_validate.validate(config_map, "1.33.0", strict=True)


def test_its_name_fits_a_job_for_the_longest_experiment_name():
    """A Job's name is at most 63 characters (its pods' job-name label)."""
    assert len(names("a" * MAX_NAME_LENGTH).env_spec) == 63


def test_it_takes_the_actors_default_image_as_they_do(exp_of):
    from seedrl.common.config import ImageDefaults

    mirror = ImageDefaults(registry="europe-docker.pkg.dev/p/seedrl", release="0.2.0")
    (container,) = render_env_spec_job(exp_of(), images=mirror)["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["image"] == "europe-docker.pkg.dev/p/seedrl/actors:0.2.0"
