"""An operator upgrade changes no running Experiment (issue 37 item 2).

The previous release's operator (:data:`support.operator_release.PREVIOUS_RELEASE`, before the
R2D2 sequence rename and the fields added since) runs Experiments of each agent, its chart's
CRD installed, on the real control plane with the real Job controller; one is suspended, one
queued in Kueue (its Workloads served, nothing admitting it). Then it is stopped and HEAD's
takes over on the same cluster with HEAD's CRD applied as the chart's upgrade applies it
(server-side, ``--force-conflicts``): both API versions, ``v1alpha1`` still stored, so that
every ``kubectl`` read and write after the upgrade goes through ``v1beta1`` and the webhook
HEAD's operator serves with its own certificate. Nothing the user wrote changed, so: no
Experiment is refused (SpecApplied stays True), no learner Job is replaced (same uid), every
ConfigMap still reads with the previous release's parser (the images pinned in
``status.images`` are that release's), and a ``kubectl scale``, a suspend and a resume issued
after the upgrade take effect. Then back to the previous release (its operator and CRD): again
nothing is refused or replaced, and a scale and a resume take effect.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from seedrl.common.config import GROUP

from support.operator_harness import (
    CHART,
    WEBHOOK_SECRET,
    LearnerStatusServer,
    OperatorCluster,
    wait_for,
)
from support.operator_release import (
    PREVIOUS_RELEASE,
    ReleaseOperator,
    release_crds,
    release_example,
    release_parse,
    release_tree,
)
from support.control_plane import free_port, wait_until_served
from support.foreign_crds import open_crd

NS = "upgrade"
#: A step on a loaded 2-core machine (each operator answers within seconds when idle).
STEP_S = 120
#: The Experiments of each agent, from the previous release's own examples.
EXAMPLES = {
    "vt": "k8s/examples/cartpole-vtrace-cpu.yaml",
    "r2": "examples/cartpole-r2d2.yaml",
    "pp": "examples/cartpole-ppo.yaml",
    # Queued in Kueue (whose Workloads are served; nothing admits it here).
    "qd": "k8s/examples/cartpole-vtrace-cpu.yaml",
}
ANNOTATION_HASH = "seedrl.dev/learner-hash"
ANNOTATION_ADOPTED = "seedrl.dev/learner-hash-adopted"


class ReleaseCluster(OperatorCluster):
    """:class:`OperatorCluster` whose CRDs are a release's (``crds``) until :meth:`upgrade`."""

    def __init__(self, *namespaces: str, crds: Path, **kwargs):
        super().__init__(*namespaces, **kwargs)
        self._crds = crds

    def install_operator_crds(self) -> None:
        """Applies the release's CRDs server-side, as its ``helm install`` did."""
        self._apply_crds(self._crds)

    def upgrade(self, webhook_url: str) -> None:
        """Applies HEAD's CRDs as the chart's upgrade does: server-side, taking the fields
        the release's apply owned (``--force-conflicts``); the Experiment's is the chart's
        template (both API versions), converting through ``webhook_url``."""
        crd = self.chart_crd(webhook_url)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                     input=json.dumps(crd))  # fmt: skip
        wait_until_served(self.plane, crd["metadata"]["name"])
        self._apply_crds(CHART / "crds", "--force-conflicts")
        # kubectl caches discovery (which still prefers v1alpha1 here); a user's refreshes
        # within hours, this one now, so that what follows reads and writes v1beta1.
        self.kubectl("api-resources", f"--api-group={GROUP}", "--cached=false")

    def rollback(self) -> None:
        """Puts the release's CRDs back as the upgrade guide says: its Experiment CRD by
        ``kubectl replace`` (an apply would keep the conversion HEAD's chart set), the rest
        applied."""
        for path in sorted(self._crds.glob("*.yaml")):
            if path.name == "experiments.seedrl.dev.yaml":
                self.kubectl("replace", "-f", str(path))
            else:
                self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    wait_until_served(self.plane, document["metadata"]["name"])
        self.kubectl("api-resources", f"--api-group={GROUP}", "--cached=false")

    def _apply_crds(self, folder: Path, *flags: str) -> None:
        self.kubectl("apply", "--server-side", *flags, "-f", str(folder))
        for path in sorted(folder.glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    wait_until_served(self.plane, document["metadata"]["name"])


def _experiment(cluster: OperatorCluster, name: str) -> dict:
    return json.loads(cluster.kubectl("get", "experiments", name, "-n", NS, "-o", "json"))


def _read(cluster: OperatorCluster, kind: str, name: str) -> dict | None:
    out = cluster.kubectl("get", kind, name, "-n", NS, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _condition(body: dict, type_: str) -> dict:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def _conditions(cluster: OperatorCluster, name: str) -> str:
    """The Experiment's conditions, one a line, for a failure's message."""
    body = _experiment(cluster, name)
    return "\n".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
        for c in (body.get("status") or {}).get("conditions") or []
    )


def _merge(cluster: OperatorCluster, name: str, spec: dict) -> None:
    cluster.kubectl(
        "patch", "experiment", name, "-n", NS, "--type=merge", "-p", json.dumps({"spec": spec})
    )


def test_upgrade_from_previous_release_changes_no_running_experiment(tmp_path):
    tree = release_tree(PREVIOUS_RELEASE, tmp_path / "release")
    learners = LearnerStatusServer()
    learners.serve()
    with ReleaseCluster(NS, crds=release_crds(tree), controllers=("job-controller",)) as cluster:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                open_crd("kueue.x-k8s.io", "Workload", "workloads", "v1beta2", "v1beta1")
            ),
        )
        wait_until_served(cluster.plane, "workloads.kueue.x-k8s.io")
        old = ReleaseOperator(
            cluster, learners, tmp_path, "previous", tree=tree, poll_seconds=0.5
        ).start()
        head: ReleaseOperator | None = None
        try:
            for name, example in EXAMPLES.items():
                body = yaml.safe_load(release_example(tree, example))
                body["metadata"] = {"name": name, "namespace": NS}
                body["spec"]["suspend"] = name == "pp"
                if name == "qd":
                    body["spec"]["queueName"] = "team-queue"
                cluster.create(body)
            before, images = {}, {}
            for name in EXAMPLES:
                wait_for(
                    lambda name=name: (
                        _read(cluster, "job", f"{name}-learner")
                        and (_experiment(cluster, name).get("status") or {}).get("appliedImmutable")
                    ),
                    STEP_S,
                    f"the previous release's learner Job of {name}: {old.tail()}",
                )
                job = _read(cluster, "job", f"{name}-learner")
                assert job is not None
                before[name] = job
                images[name] = _experiment(cluster, name)["status"].get("images")
            for name in ("pp", "qd"):
                wait_for(
                    lambda name=name: (_read(cluster, "job", f"{name}-learner") or {})["spec"].get(
                        "suspend"
                    ),
                    STEP_S,
                    f"{name}'s learner suspended",
                )
            old.stop()

            # HEAD's operator as its chart runs it: serving the conversion webhook with the
            # certificate it makes and puts in the CRD's caBundle (kubectl reads v1beta1).
            port = free_port()
            cluster.upgrade(f"https://localhost:{port}/convert")
            head = ReleaseOperator(cluster, learners, tmp_path, "head", poll_seconds=0.5)
            head.extra_args = (
                f"--conversion-webhook-port={port}",
                f"--conversion-webhook-secret={WEBHOOK_SECRET}",
                "--conversion-webhook-dns-name=localhost",
            )
            head.start()
            wait_for(
                lambda: "seedrl.dev/v1beta1" in cluster.plane.kubectl(
                    "get", "experiments", "-n", NS, "-o", "json", check=False
                ).stdout,
                STEP_S,
                f"the Experiments served as v1beta1 through HEAD's webhook: {head.tail()}",
            )  # fmt: skip

            def looked_at(name: str) -> bool:
                """HEAD's operator has acted on ``name``: it kept its Job (recorded its
                own hash beside the previous release's) or rewrote its hash, or replaced the
                Job, or refused the Experiment."""
                job = _read(cluster, "job", f"{name}-learner")
                if job is None or job["metadata"]["uid"] != before[name]["metadata"]["uid"]:
                    return True
                annotations = job["metadata"].get("annotations", {})
                refused = _condition(_experiment(cluster, name), "SpecApplied")
                return (
                    ANNOTATION_ADOPTED in annotations
                    or annotations.get(ANNOTATION_HASH)
                    != before[name]["metadata"]["annotations"][ANNOTATION_HASH]
                    or refused.get("status") == "False"
                )

            for name in EXAMPLES:
                wait_for(lambda name=name: looked_at(name), STEP_S, f"HEAD reconciling {name}")

            # Scale, suspend and resume after the upgrade.
            cluster.kubectl("scale", "experiment", "vt", "-n", NS, "--replicas=2")
            _merge(cluster, "r2", {"suspend": True})
            _merge(cluster, "pp", {"suspend": False})
            wait_for(
                lambda: (_read(cluster, "deployment", "vt-actors") or {})["spec"]["replicas"] == 2,
                STEP_S,
                f"vt's actors scaled to 2: {_conditions(cluster, 'vt')}",
            )
            wait_for(
                lambda: (_read(cluster, "job", "r2-learner") or {})["spec"].get("suspend"),
                STEP_S,
                f"r2's learner suspended: {_conditions(cluster, 'r2')}",
            )
            wait_for(
                lambda: not (_read(cluster, "job", "pp-learner") or {})["spec"].get("suspend"),
                STEP_S,
                f"pp's learner resumed: {_conditions(cluster, 'pp')}",
            )

            # Nothing admitted the queued learner: it still waits, suspended.
            assert (_read(cluster, "job", "qd-learner") or {})["spec"].get("suspend")
            for name in EXAMPLES:
                body = _experiment(cluster, name)
                applied = _condition(body, "SpecApplied")
                assert applied.get("status") == "True", (name, _conditions(cluster, name))
                job = _read(cluster, "job", f"{name}-learner")
                assert job is not None
                assert job["metadata"]["uid"] == before[name]["metadata"]["uid"], (
                    f"{name}'s learner Job was replaced"
                )
                config = _read(cluster, "configmap", f"{name}-config")
                assert config is not None
                code, said = release_parse(tree, config["data"]["config.yaml"])
                assert code == 0, f"{name}: the pinned release's image refuses its config: {said}"
                assert body["status"].get("images") == images[name], name
            # r2's spec still says sequenceLength (the previous release's field): a Warning says
            # how it was read.
            wait_for(
                lambda: json.loads(
                    cluster.kubectl(
                        "get",
                        "events",
                        "-n",
                        NS,
                        "--field-selector",
                        "involvedObject.name=r2,reason=DeprecatedField",
                        "-o",
                        "json",
                    )
                )["items"],
                STEP_S,
                "a DeprecatedField Warning about r2",
            )
            assert cluster.operator_refusals() == []

            # And back: the previous release's operator and CRD again (a rollback of a chart
            # that upgrades its CRD), which scales too and replaces nothing.
            head.stop()
            cluster.rollback()
            old = ReleaseOperator(
                cluster, learners, tmp_path, "rollback", tree=tree, poll_seconds=0.5
            ).start()
            cluster.kubectl("scale", "experiment", "vt", "-n", NS, "--replicas=3")
            wait_for(
                lambda: (_read(cluster, "deployment", "vt-actors") or {})["spec"]["replicas"] == 3,
                STEP_S,
                f"vt's actors scaled to 3 after the rollback: {_conditions(cluster, 'vt')}",
            )
            _merge(cluster, "r2", {"suspend": False})
            wait_for(
                lambda: not (_read(cluster, "job", "r2-learner") or {})["spec"].get("suspend"),
                STEP_S,
                f"r2's learner resumed after the rollback: {_conditions(cluster, 'r2')}",
            )
            for name in EXAMPLES:
                body = _experiment(cluster, name)
                assert _condition(body, "SpecApplied").get("status") == "True", (
                    name,
                    _conditions(cluster, name),
                )
                job = _read(cluster, "job", f"{name}-learner")
                assert job is not None
                assert job["metadata"]["uid"] == before[name]["metadata"]["uid"], (
                    f"{name}'s learner Job was replaced by the rollback"
                )
        finally:
            old.stop()
            if head is not None:
                head.stop()
    learners.close()
