"""Reading and writing an Experiment's children through the kubernetes client: the kinds the
operator renders, their Events, and the Kueue Workloads of a queued learner Job.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from typing import Any, Mapping

import kubernetes


log = logging.getLogger(__name__)


FIELD_MANAGER = "seedrl-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


#: (API class, method suffix) for each kind the operator renders.
_KINDS = {
    "ConfigMap": (kubernetes.client.CoreV1Api, "config_map"),
    "Service": (kubernetes.client.CoreV1Api, "service"),
    "NetworkPolicy": (kubernetes.client.NetworkingV1Api, "network_policy"),
    "Job": (kubernetes.client.BatchV1Api, "job"),
    "Deployment": (kubernetes.client.AppsV1Api, "deployment"),
    "PersistentVolumeClaim": (kubernetes.client.CoreV1Api, "persistent_volume_claim"),
    "PodDisruptionBudget": (kubernetes.client.PolicyV1Api, "pod_disruption_budget"),
    "Secret": (kubernetes.client.CoreV1Api, "secret"),
}


#: Kueue's Workload, which owns a queued Job's admission. v1beta2: served since Kueue 0.15 and
#: stored since 0.16; Kueue 0.17 refuses a patch of an admitted Workload through the
#: deprecated v1beta1 (its conversion drops spec.priorityClassSource, which a CEL rule then
#: finds missing), so a suspend through v1beta1 never reaches Kueue.
KUEUE = ("kueue.x-k8s.io", "v1beta2", "workloads")
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"


class Children:
    """Reads and writes an Experiment's children through the kubernetes client."""

    def __init__(self, api_client: kubernetes.client.ApiClient):
        self.api_client = api_client

    def _api(self, kind: str):
        cls, suffix = _KINDS[kind]
        return cls(self.api_client), suffix

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        """The object as plain JSON, or None if it does not exist."""
        api, suffix = self._api(kind)
        try:
            response = getattr(api, f"read_namespaced_{suffix}")(
                name, namespace, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        """The pods matching a label selector, as plain JSON."""
        response = kubernetes.client.CoreV1Api(self.api_client).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        return list(json.loads(response.data).get("items") or [])

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side applies one rendered object (creates it or brings it to this state)."""
        api, suffix = self._api(obj["kind"])
        meta = obj["metadata"]
        getattr(api, f"patch_namespaced_{suffix}")(
            meta["name"],
            meta["namespace"],
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
            _preload_content=False,
        )

    def create(self, obj: Mapping[str, Any]) -> None:
        """Creates one object; an existing one is left alone."""
        api, suffix = self._api(obj["kind"])
        try:
            getattr(api, f"create_namespaced_{suffix}")(
                obj["metadata"]["namespace"], dict(obj), _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise

    def merge(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON-merge-patches one object."""
        api, suffix = self._api(kind)
        getattr(api, f"patch_namespaced_{suffix}")(
            name, namespace, dict(patch), _content_type=MERGE, _preload_content=False
        )

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Posts a Kubernetes Event about ``obj`` (best effort: a failure is only logged)."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.timezone.utc)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            kubernetes.client.CoreV1Api(self.api_client).create_namespaced_event(
                meta["namespace"], body, _preload_content=False
            )
        except (kubernetes.client.ApiException, OSError) as exc:
            log.warning(
                "cannot post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc
            )

    def workloads(self, namespace: str, job_uid: str) -> list[dict]:
        """The Kueue Workloads of a Job (Kueue labels them with the Job's uid)."""
        group, version, plural = KUEUE
        api = kubernetes.client.CustomObjectsApi(self.api_client)
        response = api.list_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            label_selector=f"{LABEL_KUEUE_JOB_UID}={job_uid}",
            _preload_content=False,
        )
        return list(json.loads(response.data).get("items") or [])

    def set_workload_active(self, namespace: str, name: str, active: bool) -> None:
        """Activates or deactivates a Kueue Workload (``spec.active``)."""
        group, version, plural = KUEUE
        kubernetes.client.CustomObjectsApi(self.api_client).patch_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            name,
            {"spec": {"active": active}},
            _content_type=MERGE,
            _preload_content=False,
        )

    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool:
        """Deletes one object (its dependents in the background, or first with
        ``Foreground``); False if it was already gone."""
        api, suffix = self._api(kind)
        try:
            getattr(api, f"delete_namespaced_{suffix}")(
                name, namespace, propagation_policy=propagation, _preload_content=False
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def fail_pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> bool:
        """Does for a pod whose kubelet is gone what the pod garbage collector does for one on
        a node out of service: marks it Failed with condition DisruptionTarget (so that a
        Job's podFailurePolicy does not count it) and deletes it at once (``uid``: never a
        newer pod of that name). False if it was already gone."""
        api = kubernetes.client.CoreV1Api(self.api_client)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        try:
            api.patch_namespaced_pod_status(
                name,
                namespace,
                # Strategic merge: the pod's conditions merge by type.
                {"status": {"phase": "Failed", "conditions": [condition]}},
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
            )
            api.delete_namespaced_pod(
                name,
                namespace,
                body=kubernetes.client.V1DeleteOptions(
                    grace_period_seconds=0,
                    preconditions=kubernetes.client.V1Preconditions(uid=uid),
                ),
                _preload_content=False,
            )
        except kubernetes.client.ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True
