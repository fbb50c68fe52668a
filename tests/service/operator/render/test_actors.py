"""The actor Deployment: Spot, service account, Kueue, scaling and what rolls it
(render/actors.py)."""

from __future__ import annotations

from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import ANNOTATION_CONFIG_HASH


def test_spot_actors_get_at_most_the_15_seconds_gke_gives(exp_of, by_kind):
    pod = by_kind(render(exp_of(actors={"spot": True})))["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] <= 15


def test_spot_actors_service_account_and_kueue(exp_of, by_kind):
    objs = by_kind(
        render(exp_of(actors={"spot": True}, serviceAccountName="wi-sa", queueName="team-a-queue"))
    )
    actor_pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert actor_pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert actor_pod["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
    # The learner's account (Workload Identity: the checkpoint bucket) is not the actors'.
    assert "serviceAccountName" not in actor_pod
    assert objs["Job"]["spec"]["template"]["spec"]["serviceAccountName"] == "wi-sa"
    own = by_kind(render(exp_of(actors={"serviceAccountName": "envs"})))
    assert own["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "envs"
    assert "serviceAccountName" not in own["Job"]["spec"]["template"]["spec"]
    # Kueue admits a queued Job by unsuspending it.
    assert objs["Job"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert objs["Job"]["spec"]["suspend"] is True


def test_suspend_and_finish_scale_actors_to_zero(exp_of, by_kind):
    assert by_kind(render(exp_of(suspend=True)))["Deployment"]["spec"]["replicas"] == 0
    assert by_kind(render(exp_of(suspend=True)))["Job"]["spec"]["suspend"] is True
    assert by_kind(render(exp_of(), finished=True))["Deployment"]["spec"]["replicas"] == 0
    assert by_kind(render(exp_of(actors={"replicas": 5})))["Deployment"]["spec"]["replicas"] == 5


def _template_hash(objs):
    return objs["Deployment"]["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]


def test_only_what_actors_read_rolls_them(exp_of, by_kind):
    base = by_kind(render(exp_of()))
    for change in ({"env": {"id": "Acrobot-v1"}}, {"seed": 7}, {"actors": {"envsPerActor": 3}}):
        assert _template_hash(by_kind(render(exp_of(**change)))) != _template_hash(base), change
    # Scaling, and any learner-only edit, leave the actors' template as it is.
    for change in (
        {"actors": {"replicas": 17}},
        {"budget": {"maxEnvSteps": 5}},
        {"learner": {"batchSize": 4}},
        {"suspend": True},
    ):
        objs = by_kind(render(exp_of(**change)))
        assert objs["Deployment"]["spec"]["template"] == base["Deployment"]["spec"]["template"], (
            change
        )
