"""The tests' side of :class:`~support.operator_harness.OperatorHarness` run with the real Job
controller (the ``live`` fixture of tests/service/operator/conftest.py): Experiments, their
learner Job and status as the cluster's admin sees them, read as the API server wrote them."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from seedrl.common.config import GROUP, PLURAL, VERSION
from support.operator_harness import OperatorHarness

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = yaml.safe_load((ROOT / "k8s" / "examples" / "cartpole-vtrace-cpu.yaml").read_text())
MERGE = "application/merge-patch+json"
#: The namespace of the live tests' Experiments.
LIVE_NS = "live"
#: A step of a scenario on a loaded 2-core machine (the Job controller, kopf and the poller
#: each answer within a second when idle).
STEP_S = 60


class LiveClient:
    """The cluster's admin, with the official ``kubernetes`` client."""

    def __init__(self, harness: OperatorHarness, namespace: str = LIVE_NS):
        self.harness = harness
        self.ns = namespace
        self.api = harness.api
        self.custom = kubernetes.client.CustomObjectsApi(harness.api)
        self.batch = kubernetes.client.BatchV1Api(harness.api)
        self.apps = kubernetes.client.AppsV1Api(harness.api)
        self.core = kubernetes.client.CoreV1Api(harness.api)

    def create(self, name: str, **spec: Any) -> dict:
        """Creates the CartPole example as ``name``, with ``spec`` over its spec's keys."""
        body = copy.deepcopy(CARTPOLE)
        body["metadata"]["name"] = name
        body["spec"].update(spec)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def get(self, name: str) -> dict:
        """The Experiment."""
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def patch_spec(self, name: str, spec: dict) -> dict:
        """Merge-patches the Experiment's spec (as ``kubectl patch --type merge``)."""
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name, {"spec": spec}, _content_type=MERGE
        )

    def status(self, name: str) -> dict:
        """The Experiment's status."""
        return self.get(name).get("status") or {}

    def usage(self, name: str) -> dict:
        """``status.learnerUsage``."""
        return self.status(name).get("learnerUsage") or {}

    def read(self, kind: str, name: str) -> dict | None:
        """A child as the API server wrote it (the client's models rewrite timestamps), or
        None when there is none."""
        read = {
            "Job": lambda: self.batch.read_namespaced_job(name, self.ns, _preload_content=False),
            "Deployment": lambda: self.apps.read_namespaced_deployment(
                name, self.ns, _preload_content=False
            ),
            "Secret": lambda: self.core.read_namespaced_secret(
                name, self.ns, _preload_content=False
            ),
        }[kind]
        try:
            return json.loads(read().data)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def job(self, name: str) -> dict | None:
        """The Experiment's learner Job."""
        return self.read("Job", f"{name}-learner")

    def patch_job(self, name: str, spec: dict) -> None:
        """Patches the learner Job's spec (as Kueue does)."""
        self.batch.patch_namespaced_job(f"{name}-learner", self.ns, {"spec": spec})

    def events(self, name: str) -> list[Any]:
        """The Events about the Experiment."""
        return self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name},involvedObject.kind=Experiment"
        ).items


def parse_time(text: str) -> datetime.datetime:
    """A Kubernetes timestamp."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> datetime.datetime:
    """The time now, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc)
