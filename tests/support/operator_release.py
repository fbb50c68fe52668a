"""An earlier release of the operator, run beside HEAD's on one cluster, for upgrade tests.

A release is a commit of this repository: :func:`release_tree` unpacks its ``common/`` and
``service/`` as an importable ``seedrl`` package (what its operator image holds), with its
chart's CRDs and examples beside them. :class:`ReleaseOperator` runs that operator as its own
process (``python -m support.operator_replica``, :class:`~support.operator_faults.
OperatorReplica`) with the release's tree first on ``PYTHONPATH``, logged in with the chart's
ServiceAccount token; HEAD's operator is the same process without it. :func:`release_parse`
reads a document with the release's own parser, as its learner and actor images read their
ConfigMap (``seedrl.common.config``: a field they do not know is refused).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from support.operator_faults import OperatorReplica
from support.operator_harness import ROOT

#: The release before the R2D2 sequence rename (``sequenceLength`` became ``trainLength``,
#: ``burnIn`` and ``sequencePeriod``) and before ``env.backend``, ``learner.maxStreams`` and
#: the other fields added since, and before
#: :data:`~seedrl.service.operator.render.learner_job.LEARNER_UNREAD`: the last commit of the
#: operator that issue 37 item 2 upgraded from (proposed tag v0.1.0, CHANGELOG.md).
PREVIOUS_RELEASE = "9c6761e"


def release_tree(commit: str, dest: Path) -> Path:
    """Unpacks ``commit``'s ``common/``, ``service/``, operator chart CRDs and examples under
    ``dest/seedrl`` (``dest`` goes on ``PYTHONPATH``); returns ``dest``."""
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            "--format=tar",
            commit,
            "common",
            "service",
            "examples",
            "k8s/examples",
            "helm/seedrl-operator/crds",
        ],
        capture_output=True,
        check=True,
    ).stdout
    package = dest / "seedrl"
    package.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(package, filter="data")
    (package / "__init__.py").write_text("")
    return dest


def release_chart(commit: str, dest: Path) -> Path:
    """``commit``'s operator chart unpacked under ``dest``; returns the chart's folder."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "helm/seedrl-operator"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "helm" / "seedrl-operator"


def release_crds(tree: Path) -> Path:
    """The release's chart ``crds/`` folder."""
    return tree / "seedrl" / "helm" / "seedrl-operator" / "crds"


def release_example(tree: Path, relative: str) -> str:
    """An example Experiment file of the release (``examples/cartpole-r2d2.yaml``)."""
    return (tree / "seedrl" / relative).read_text()


def release_parse(tree: Path, text: str) -> tuple[int, str]:
    """Reads ``text`` (an Experiment's YAML, as a ConfigMap's ``config.yaml``) with the
    release's ``seedrl.common.config`` in a process of its own, as its pods do: (exit
    status, what it printed); 0 when it reads it."""
    program = (
        "import sys\n"
        "from seedrl.common.config import ConfigError, load_yaml, parse_experiment\n"
        "try:\n"
        "    parse_experiment(load_yaml(sys.stdin.read(), 'config.yaml'))\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(2)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        input=text,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
        timeout=120,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


class ReleaseOperator(OperatorReplica):
    """:class:`OperatorReplica` of an earlier release (its tree from :func:`release_tree`
    first on ``PYTHONPATH``), standalone; ``tree`` None runs HEAD's."""

    def __init__(self, *args, tree: Path | None = None, **kwargs):
        kwargs.setdefault("peering", "")
        kwargs.setdefault("priority", 0)
        super().__init__(*args, **kwargs)
        if tree is not None:
            self.python_path = (tree,)
