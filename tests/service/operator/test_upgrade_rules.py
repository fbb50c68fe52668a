"""The rules that keep a running Experiment through an operator upgrade, on documents shaped as
an earlier release wrote them (its ConfigMap lacks the fields added since and says
``sequenceLength``): the scenario on the real control plane is test_upgrade.py."""

from __future__ import annotations

import copy

import yaml

from seedrl.common.config import dump_experiment, to_document
from seedrl.service.operator import reconcile
from seedrl.service.operator.reconciler import _job_patch
from seedrl.service.operator.render import render
from seedrl.service.operator.render.common import ANNOTATION_ADOPTED_HASH, ANNOTATION_LEARNER_HASH
from seedrl.service.operator.render.config_map import config_text_like
from seedrl.service.operator.render.learner_job import (
    earlier_learner_hash,
    learner_hash,
    legacy_learner_hash,
)

#: Fields added after the previous release (tests/support/operator_release.py), by path.
ADDED = (
    ("spec", "env", "backend"),
    ("spec", "learner", "maxStreams"),
    ("spec", "learner", "maxTotalEnvs"),
)


#: A vtrace agent whose (unused) r2d2 section the previous release could write: its sequences
#: every trainLength steps.
AGENT = {"name": "vtrace", "r2d2": {"trainLength": 40, "burnIn": 40, "sequencePeriod": 40}}


def _as_earlier_release(exp) -> dict:
    """``exp``'s resolved document as the previous release wrote it."""
    document = to_document(exp)
    for path in ADDED:
        node = document
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1])
    r2d2 = document["spec"]["agent"]["r2d2"]
    r2d2["sequenceLength"] = r2d2.pop("trainLength") + r2d2["burnIn"]
    r2d2.pop("sequencePeriod")
    return document


def _job(document: dict) -> dict:
    return {
        "metadata": {"annotations": {ANNOTATION_LEARNER_HASH: earlier_learner_hash(document)}},
        "status": {},
    }


def test_a_job_of_an_earlier_release_running_the_same_spec_is_kept(exp_of):
    exp = exp_of(agent=AGENT, env={"id": "CartPole-v1"})
    earlier = _as_earlier_release(exp)
    job = _job(earlier)
    assert reconcile.job_hash(job) != learner_hash(exp)
    assert reconcile.job_runs_config(exp, job, yaml.safe_dump(earlier))


def test_a_job_of_an_earlier_release_is_replaced_when_the_learner_reads_an_edit(exp_of):
    exp = exp_of(agent=AGENT, env={"id": "CartPole-v1"})
    earlier = _as_earlier_release(exp)
    edited = exp_of(agent=AGENT, env={"id": "CartPole-v1"}, learner={"batchSize": 7})
    assert not reconcile.job_runs_config(edited, _job(earlier), yaml.safe_dump(earlier))


def test_a_config_map_that_no_longer_matches_its_job_proves_nothing(exp_of):
    exp = exp_of(agent=AGENT, env={"id": "CartPole-v1"})
    earlier = _as_earlier_release(exp)
    other = copy.deepcopy(earlier)
    other["spec"]["learner"]["batchSize"] = 7
    assert not reconcile.job_runs_config(exp, _job(other), yaml.safe_dump(earlier))


def test_the_config_map_keeps_the_shape_its_image_reads(exp_of):
    exp = exp_of(agent=AGENT, env={"id": "CartPole-v1"})
    earlier = yaml.safe_dump(_as_earlier_release(exp), sort_keys=False)
    # The same spec: the ConfigMap is left as it is.
    assert config_text_like(exp, earlier) == earlier
    # A scale: only the count changes, no field the earlier image does not know appears.
    scaled = exp_of(agent=AGENT, env={"id": "CartPole-v1"}, actors={"replicas": 9})
    written = yaml.safe_load(config_text_like(scaled, earlier))
    assert written["spec"]["actors"]["replicas"] == 9
    assert "backend" not in written["spec"]["env"]
    assert "sequenceLength" in written["spec"]["agent"]["r2d2"]
    # A new field set away from what the old document means is written (the old image
    # refuses it rather than silently running without it).
    asked = exp_of(agent=AGENT, env={"id": "CartPole-v1", "backend": "gymnasium"})
    assert yaml.safe_load(config_text_like(asked, earlier))["spec"]["env"]["backend"] == (
        "gymnasium"
    )


def test_a_new_config_map_holds_the_whole_resolved_experiment(exp_of):
    exp = exp_of(agent=AGENT, env={"id": "CartPole-v1"})
    assert config_text_like(exp, None) == dump_experiment(exp)


def test_a_legacy_hash_stays_for_a_rollback_and_this_releases_goes_beside_it(exp_of, by_kind):
    exp = exp_of()
    job = by_kind(render(exp))["Job"]
    job["metadata"]["annotations"][ANNOTATION_LEARNER_HASH] = legacy_learner_hash(exp)
    patch = _job_patch(exp, job) or {}
    assert patch["metadata"] == {"annotations": {ANNOTATION_ADOPTED_HASH: learner_hash(exp)}}
    job["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    # An edit the learner never reads changes the legacy digest, not the adopted hash.
    edited = exp_of(actors={"metricsPort": 9555})
    assert not reconcile.job_outdated(edited, job)
    assert "metadata" not in (_job_patch(edited, job) or {})
