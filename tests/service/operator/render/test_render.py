"""Every child of an Experiment together: what render() returns passes Kubernetes validation, both
roles run their entry points, and edits touch only the children they concern."""

from __future__ import annotations


import kubernetes_validate

from seedrl.common.config import parse_experiment, to_document
from seedrl.service.operator.reconcile import validate
from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import ANNOTATION_LEARNER_HASH, CONFIG_FILE
from seedrl.service.operator.render.tls import TLS_DIR


def _job_hash(objs):
    return objs["Job"]["metadata"]["annotations"][ANNOTATION_LEARNER_HASH]


def test_rendered_manifests_pass_kubernetes_validate_strict(example, owner, load, k8s_versions):
    exp = validate(load(example))
    variants = [
        render(exp, owner, "team-a"),
        render(
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
            owner,
            "team-a",
            finished=True,
        ),
    ]
    for objects in variants:
        for obj in objects:
            for version in k8s_versions:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    raise AssertionError(f"{obj['kind']} for {version}: {exc}") from None


def test_pods_run_the_entry_points_with_the_config(exp_of, by_kind):
    objs = by_kind(render(exp_of(learner={"port": 7000})))
    learner = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert learner["command"][:5] == [
        "python",
        "-m",
        "seedrl.learner",
        "--config",
        CONFIG_FILE,
    ]
    assert "[::]:7000" in learner["command"]
    actor = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert actor["command"] == [
        "python",
        "-m",
        "seedrl.actors",
        "--config",
        CONFIG_FILE,
        "--learner",
        "exp-learner:7000",
        "--index",
        "auto",
        "--tls-ca",
        f"{TLS_DIR}/ca.crt",
    ]
    for container in (learner, actor):
        assert {"name": "config", "mountPath": "/etc/seedrl", "readOnly": True} in container[
            "volumeMounts"
        ]


def test_a_label_or_annotation_edit_neither_replaces_the_learner_nor_rolls_the_actors(by_kind):
    def rendered(labels, annotations):
        return by_kind(
            render(
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


def test_the_cpu_example_renders_what_day_two_on_gke_needs(by_kind, owner, repo_root, load):
    """The example of k8s/examples as a platform engineer renders it (issue 26's checks)."""
    document = load(repo_root / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml")
    document["spec"]["serviceAccountName"] = "learner-wi"
    document["spec"]["learner"]["spot"] = True
    objs = by_kind(render(parse_experiment(document), owner, "team-a"))
    assert "ownerReferences" not in objs["PersistentVolumeClaim"]["metadata"]
    assert objs["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert "serviceAccountName" not in objs["Deployment"]["spec"]["template"]["spec"]
    assert objs["Job"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] <= 15
    labelled = dict(document, metadata={**document["metadata"], "labels": {"team": "x"}})
    labelled["metadata"]["annotations"] = {"argocd.argoproj.io/sync-wave": "1"}
    assert _job_hash(by_kind(render(parse_experiment(labelled)))) == _job_hash(objs)


def test_both_roles_take_their_default_images_from_one_registry_and_release(
    exp_of, by_kind, images_of
):
    from seedrl.common.config import ImageDefaults

    # The CRD stores no actor image: the operator resolves both roles' defaults alike.
    assert exp_of().spec.actors.image == ""
    assert images_of(by_kind(render(exp_of()))) == (
        "ghcr.io/seedrl/learner:0.1.0",
        "ghcr.io/seedrl/actors:0.1.0",
    )
    mirror = ImageDefaults(registry="europe-docker.pkg.dev/p/seedrl", release="0.2.0")
    gpu = exp_of(learner={"accelerator": {"kind": "gpu"}})
    assert images_of(by_kind(render(gpu, images=mirror))) == (
        "europe-docker.pkg.dev/p/seedrl/learner:0.2.0-gpu",
        "europe-docker.pkg.dev/p/seedrl/actors:0.2.0",
    )
    # An image the spec names wins, for either role.
    named = exp_of(actors={"image": "example.com/a:1"}, learner={"image": "example.com/l:1"})
    assert images_of(by_kind(render(named, images=mirror))) == (
        "example.com/l:1",
        "example.com/a:1",
    )
