"""What the operator's pure tests share: Experiments made from a spec, rendered children by
kind, an owner reference, and the learner Job and actor Deployment as the API server returns
them."""

from __future__ import annotations

import functools
from pathlib import Path

import kubernetes_validate
import kubernetes_validate.utils
import pytest

from seedrl.common.config import load_yaml, parse_experiment
from seedrl.service.operator.render.common import owner_reference


ROOT = Path(__file__).parents[3]
#: The Experiments the repository ships: a test that takes ``example`` runs once for each.
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "k8s" / "examples").glob("*.yaml")
)
#: The Kubernetes versions manifests are validated against: a test that takes ``k8s_version``
#: runs once for each; ``k8s_versions`` gives them all.
K8S_VERSIONS = ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0")


def pytest_generate_tests(metafunc):
    if "example" in metafunc.fixturenames:
        metafunc.parametrize("example", EXAMPLES, ids=lambda p: p.name)
    if "k8s_version" in metafunc.fixturenames:
        metafunc.parametrize("k8s_version", K8S_VERSIONS)


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


def _exp_of(**spec):
    return parse_experiment({"metadata": {"name": "exp", "namespace": "team-a"}, "spec": spec})


def _by_kind(objects):
    return {o["kind"]: o for o in objects}


def _load(path: Path) -> dict:
    return load_yaml(path.read_text(), str(path))


def _images(objs):
    learner = objs["Job"]["spec"]["template"]["spec"]
    return (
        learner["containers"][0]["image"],
        objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"],
    )


def _job(ready=0, active=0, conditions=(), start="2026-01-01T00:00:00Z"):
    return {
        "status": {
            "ready": ready,
            "active": active,
            "startTime": start,
            "conditions": [dict(c) for c in conditions],
        }
    }


def _deployment(ready):
    return {"status": {"readyReplicas": ready}}


@pytest.fixture
def exp_of():
    """``exp_of(**spec)``: the Experiment ``team-a/exp`` with that spec, parsed."""
    return _exp_of


@pytest.fixture
def by_kind():
    """``by_kind(objects)``: rendered objects by their kind."""
    return _by_kind


@pytest.fixture
def owner():
    """The owner reference of ``exp`` (a fixed uid)."""
    return owner_reference("exp", "4f1c7e8a-0000-4000-8000-000000000001")


@pytest.fixture
def job():
    """``job(ready, active, conditions, start)``: a learner Job's status as read."""
    return _job


@pytest.fixture
def deployment():
    """``deployment(ready)``: the actor Deployment's status as read."""
    return _deployment


@pytest.fixture
def repo_root():
    """The repository's root folder."""
    return ROOT


@pytest.fixture
def k8s_versions():
    """Every Kubernetes version manifests are validated against."""
    return K8S_VERSIONS


@pytest.fixture
def load():
    """``load(path)``: a YAML file of the repository, parsed."""
    return _load


@pytest.fixture
def images_of():
    """``images_of(objs)``: the learner's and the actors' images, of rendered objects by
    kind."""
    return _images


@pytest.fixture(scope="session")
def live():
    """The real operator (its chart's RBAC) with the real Job controller, for the scenario
    tests of the operator's behaviour over time (one control plane for all of them): a
    :class:`support.operator_live.LiveClient` in namespace ``live``. Tests name their
    Experiments apart."""
    from support.operator_harness import OperatorHarness
    from support.operator_live import LIVE_NS, LiveClient

    with OperatorHarness(
        LIVE_NS,
        controllers=("job-controller",),
        # A pod stranded on a lost node is released 2 s past its grace, not a minute.
        settings={"stranded_seconds": 2.0},
    ) as harness:
        yield LiveClient(harness)
        # The chart's RBAC is enough for everything these tests make the operator do.
        assert harness.cluster.operator_refusals() == []
