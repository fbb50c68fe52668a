"""The env-spec Job and the ConfigMap it fills: the env spec the learner serves, derived from the
Experiment outside the learner's pod.

Making the env runs the user's code (``spec.env.imports``, their gymnasium registration), which
belongs with the actors: their image, their ServiceAccount (so their Workload Identity, never
the learner's, whose credentials reach the checkpoints), their registry credentials and their
nodes. So before the learner Job exists the operator runs this Job of one pod, which makes the
env once (``python -m seedrl.actors --env-spec-message``) and leaves its spec in its
termination message. The operator copies the spec into the ConfigMap
:attr:`~.common.Names.env_spec`, which the learner pod mounts at :data:`~.common.SHARED_DIR`.
An env that cannot be made fails this Job at once (exit BAD_CONFIG), and with it the
Experiment, before a learner (and its accelerator) is asked for.
"""

from __future__ import annotations

from typing import Any

from seedrl.common.config import RELEASE_IMAGES, Experiment, ImageDefaults, actor_image
from seedrl.common.exit_codes import ExitCode
from seedrl.service.operator.render.common import (
    CONFIG_DIR,
    ENV_SPEC_CONTAINER,
    ENV_SPEC_KEY,
    ENV_SPEC_ROLE,
    LABEL_SPOT,
    TERMINATION_LOG,
    names,
    object_meta,
    pod_labels,
)
from seedrl.service.operator.render.pod import (
    SPOT_TOLERATION,
    actors_command,
    apply_placement,
    base_pod_spec,
    container_env,
    container_resources,
    container_security_context,
)

#: Seconds the env-spec Job may take, image pull included, before it fails (DeadlineExceeded).
ENV_SPEC_DEADLINE_SECONDS = 900

#: Failed pods of the env-spec Job retried before it fails: a crash or a lost node, never a
#: bad env (that fails it at once).
ENV_SPEC_BACKOFF_LIMIT = 2

#: The exit code of a process that SIGTERM stopped (128 + 15, what the kubelet reports): the
#: pod deleted by a drain, which Kubernetes does not always mark DisruptionTarget.
SIGTERM_EXIT = 143


def render_env_spec_job(
    exp: Experiment, owner=None, namespace=None, images: ImageDefaults = RELEASE_IMAGES
) -> dict[str, Any]:
    """The env-spec Job: one pod of the actor image, as the actors run (their ServiceAccount,
    placement, Spot, registry credentials and resources), that writes the env spec into its
    termination message and exits."""
    actors = exp.spec.actors
    container = {
        "name": ENV_SPEC_CONTAINER,
        "image": actor_image(actors, images),
        "imagePullPolicy": "IfNotPresent",
        "command": actors_command("--env-spec-message", TERMINATION_LOG),
        "env": container_env(exp),
        "resources": container_resources(actors.resources),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": container_security_context(),
        "terminationMessagePath": TERMINATION_LOG,
        # A failure's reason is the end of its log ("cannot make environments: ...").
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = base_pod_spec(exp, container, "Never", 30)
    pod_spec["volumes"] = [v for v in pod_spec["volumes"] if v["name"] in ("config", "tmp")]
    apply_placement(
        actors.placement,
        pod_spec,
        {LABEL_SPOT: "true"} if actors.spot else {},
        [SPOT_TOLERATION] if actors.spot else [],
        [],
    )
    n = names(exp.metadata.name)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(exp, n.env_spec, ENV_SPEC_ROLE, owner, namespace),
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": ENV_SPEC_BACKOFF_LIMIT,
            "activeDeadlineSeconds": ENV_SPEC_DEADLINE_SECONDS,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    # Evicted, drained, preempted: not the env's fault.
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    {
                        "action": "Ignore",
                        "onExitCodes": {
                            "containerName": ENV_SPEC_CONTAINER,
                            "operator": "In",
                            "values": [SIGTERM_EXIT],
                        },
                    },
                    # The env cannot be made from the Experiment: every new pod would find
                    # the same.
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": ENV_SPEC_CONTAINER,
                            "operator": "In",
                            "values": [int(ExitCode.BAD_CONFIG)],
                        },
                    },
                ]
            },
            "template": {
                "metadata": {"labels": pod_labels(exp, ENV_SPEC_ROLE)},
                "spec": pod_spec,
            },
        },
    }


def render_env_spec_config_map(
    exp: Experiment, spec_json: str, owner=None, namespace=None
) -> dict[str, Any]:
    """The ConfigMap holding the env spec (``spec_json``, as the env-spec Job's pod reported
    it: :meth:`~seedrl.common.wire.EnvSpec.to_message`), which the learner pod mounts."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            exp, names(exp.metadata.name).env_spec, ENV_SPEC_ROLE, owner, namespace
        ),
        "data": {ENV_SPEC_KEY: spec_json},
    }
