"""The controllers of the simulated cluster (:mod:`support.sim_cluster`), each a plain
function of the stored objects, run after every change and twice a second.

Each rule cites the behaviour it models (kubernetes.io documentation):

- **scheduler** ("Assigning Pods to Nodes", "Taints and Tolerations"): a pod without a node is
  bound to a Ready, schedulable node that satisfies its nodeSelector and required node
  affinity and whose NoSchedule/NoExecute taints it tolerates, preferring the node with the
  fewest pods of the same owner (the default spreading), then the fewest pods. Scheduling
  gates hold a pod back, and a node must have room for what the pod requests ("Resource
  Management for Pods and Containers": its allocatable CPU, memory and extended resources
  such as google.com/tpu and nvidia.com/gpu, less what its pods request), and a pod whose
  ReadWriteOnce claim is bound goes only to a node in its disk's zone ("Volume
  topology-aware scheduling"; a claim is provisioned in the zone of its first pod's node,
  as WaitForFirstConsumer does). None fits:
  PodScheduled=False, reason Unschedulable, with the scheduler's "0/N nodes are available"
  message.
- **Job controller** ("Jobs": Pod backoff failure policy, Handling Pod and container failures
  with podFailurePolicy, Delayed creation of replacement pods, Suspending a Job, Job
  termination and cleanup, TTL after finished): creates pods from the template (with the
  ``batch.kubernetes.io/job-tracking`` finalizer, removed once a finished pod is counted);
  with ``podReplacementPolicy: Failed`` a replacement is made only once the previous pod is
  terminal; a failed pod is matched against ``podFailurePolicy`` rules in order (Ignore: not
  counted; FailJob: the Job fails at once with reason PodFailurePolicy; Count, or no rule:
  counted); more than ``backoffLimit`` counted failures fail it with BackoffLimitExceeded; a
  counted failure delays the next pod by 10 s doubling up to 6 min; ``activeDeadlineSeconds``
  fails it with DeadlineExceeded (each failure sets FailureTarget first, terminates the
  remaining pods, and sets Failed once none runs, as Kubernetes 1.31+ does); ``suspend``
  deletes the active pods (not counted) and sets
  condition Suspended; a finished Job deletes its remaining pods and is deleted
  ``ttlSecondsAfterFinished`` later.
- **Deployment controller** ("Deployments": pod-template-hash label, Rolling Update
  Deployment, maxSurge and maxUnavailable, Recreate, Scaling a Deployment): one ReplicaSet
  per pod template, named ``<deployment>-<hash>`` with the hash of the template; a scale
  changes only the current ReplicaSet's replicas; a new template scales the new ReplicaSet up
  and the old ones down within maxSurge/maxUnavailable (Recreate: old ones to zero first).
- **ReplicaSet controller** ("ReplicaSet"): keeps ``replicas`` pods that are neither terminal
  nor being deleted, creating ``<rs>-<random>`` pods or deleting the surplus (unscheduled,
  then not ready, then newest first).
- **pod garbage collector** ("Pod Lifecycle: Garbage collection of Pods", "Pod disruption
  conditions"): pods bound to nodes that no longer exist get phase Failed and condition
  DisruptionTarget (reason DeletionByPodGC), then are deleted.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import time
from typing import Any

from seedrl.common.quantity import parse_quantity
from support.sim_apiserver import (
    ApiError,
    ApiServer,
    labels_match,
    now_rfc3339,
    selector_matches,
    set_pod_condition,
)

JOB_TRACKING = "batch.kubernetes.io/job-tracking"
TERMINAL = ("Succeeded", "Failed")
#: The Job controller's pod backoff: 10 s, doubled per counted failure, capped at 6 min.
JOB_BACKOFF_S, JOB_BACKOFF_CAP_S = 10.0, 360.0
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def _parse(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return (
        datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.timezone.utc)
        .timestamp()
    )


def pod_ready(pod: dict) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL


def owned_by(obj: dict, owner: dict) -> bool:
    return any(
        r.get("uid") == owner["metadata"]["uid"] and r.get("controller")
        for r in obj["metadata"].get("ownerReferences") or []
    )


def template_hash(template: dict) -> str:
    """The pod-template-hash of a template (FNV-1a 32 of its JSON, in Kubernetes' safe
    alphabet, as the Deployment controller names ReplicaSets)."""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    out = ""
    while h:
        h, r = divmod(h, len(_SAFE))
        out += _SAFE[r]
    return out[:10] or "0"


def _owner_ref(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class Controllers:
    """The scheduler and the controllers, acting through an :class:`ApiServer`'s methods."""

    def __init__(self, api: ApiServer):
        self.api = api
        self.store = api.store
        self.res = {
            kind: self.store.resource(*gvr)
            for kind, gvr in {
                "Pod": ("", "v1", "pods"),
                "Node": ("", "v1", "nodes"),
                "Job": ("batch", "v1", "jobs"),
                "Deployment": ("apps", "v1", "deployments"),
                "ReplicaSet": ("apps", "v1", "replicasets"),
                "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
            }.items()
        }
        #: Job uid -> pod uids already counted, and when the next pod may be made.
        self._counted: dict[str, set[str]] = {}
        #: Pods the Job controller deleted for a suspend, which it does not count as failed.
        self._suspended: set[str] = set()
        self._next_pod_at: dict[str, float] = {}

    # -- helpers ------------------------------------------------------------------------

    def _all(self, kind: str) -> list[dict]:
        return self.store.list(self.res[kind])

    def _write(self, kind: str, old: dict, new: dict, sub: str | None = None) -> None:
        if new != old:
            current = self.store.get(
                self.res[kind], old["metadata"].get("namespace", ""), old["metadata"]["name"]
            )
            if current is not None and current["metadata"]["uid"] == old["metadata"]["uid"]:
                self.api._commit(self.res[kind], current, new, sub)

    def _status(self, kind: str, obj: dict, status: dict) -> None:
        if obj.get("status") != status:
            new = copy.deepcopy(obj)
            new["status"] = status
            self._write(kind, obj, new, "status")

    def _delete(self, kind: str, obj: dict, grace: int | None = None) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            return
        try:
            self.api.delete(
                self.res[kind],
                obj["metadata"].get("namespace", ""),
                obj["metadata"]["name"],
                {} if grace is None else {"gracePeriodSeconds": grace},
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _create_pod(
        self,
        owner: dict,
        template: dict,
        extra_labels: dict | None = None,
        finalizers: list[str] | None = None,
    ) -> None:
        meta = copy.deepcopy(template.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), **(extra_labels or {})}
        meta["generateName"] = f"{owner['metadata']['name']}-"
        meta["ownerReferences"] = [_owner_ref(owner)]
        if finalizers:
            meta["finalizers"] = finalizers
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        self.api.create(self.res["Pod"], owner["metadata"]["namespace"], pod)

    def sync(self) -> None:
        """One pass of every controller."""
        self.collect_pods()
        self.deployments()
        self.replicasets()
        self.jobs()
        self.schedule()

    # -- the pod garbage collector ------------------------------------------------------

    def collect_pods(self) -> None:
        nodes = {n["metadata"]["name"] for n in self._all("Node")}
        for pod in self._all("Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node not in nodes:
                # Orphaned: force-deleted (its kubelet is gone with its node). A pod not yet
                # terminal is first marked Failed with DisruptionTarget, reason
                # DeletionByPodGC ("Pod disruption conditions"), so a Job does not count it.
                if not terminal(pod):
                    new = copy.deepcopy(pod)
                    new["status"]["phase"] = "Failed"
                    set_pod_condition(
                        new,
                        "DisruptionTarget",
                        "True",
                        "DeletionByPodGC",
                        "PodGC: node no longer exists",
                    )
                    self._write("Pod", pod, new, "status")
                    pod = (
                        self.store.get(
                            self.res["Pod"], pod["metadata"]["namespace"], pod["metadata"]["name"]
                        )
                        or pod
                    )
                self.api.delete(
                    self.res["Pod"],
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    {"gracePeriodSeconds": 0},
                )

    # -- the scheduler ------------------------------------------------------------------

    def schedule(self) -> None:
        nodes = [
            n
            for n in self._all("Node")
            if not (n.get("spec") or {}).get("unschedulable")
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        ]
        pods = self._all("Pod")
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or terminal(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            if spec.get("schedulingGates"):
                continue
            zones = self._claim_zones(pod)
            labelled = [n for n in nodes if _fits(pod, n)]
            placed = [n for n in labelled if _zone(n) in zones] if zones else labelled
            fits = [n for n in placed if not _short_of(pod, n, pods)]
            if not fits:
                short = sorted({r for n in placed for r in _short_of(pod, n, pods)})
                if placed:
                    why = f"{len(placed)} Insufficient {', '.join(short)}"
                elif labelled:
                    why = f"{len(labelled)} node(s) had volume node affinity conflict"
                else:
                    why = "no node matches the pod's node selector, affinity and tolerations"
                new = copy.deepcopy(pod)
                if set_pod_condition(
                    new,
                    "PodScheduled",
                    "False",
                    "Unschedulable",
                    f"0/{len(self._all('Node'))} nodes are available: {why}.",
                ):
                    self._write("Pod", pod, new, "status")
                continue
            owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("uid")

            def load(node: dict) -> tuple[int, int, str]:
                here = [
                    p
                    for p in pods
                    if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
                    and not terminal(p)
                ]
                same = sum(
                    1
                    for p in here
                    if owner
                    and any(
                        r.get("uid") == owner for r in p["metadata"].get("ownerReferences") or []
                    )
                )
                return same, len(here), node["metadata"]["name"]

            node = min(fits, key=load)
            self._bind_claims(pod, node)
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node["metadata"]["name"]
            self.api._commit(self.res["Pod"], pod, new, None)
            bound = self.store.get(
                self.res["Pod"], pod["metadata"]["namespace"], pod["metadata"]["name"]
            )
            status = copy.deepcopy(bound)
            set_pod_condition(status, "PodScheduled", "True")
            self._write("Pod", bound, status, "status")
            pods = self._all("Pod")

    def _claims(self, pod: dict) -> list[dict]:
        namespace = pod["metadata"]["namespace"]
        claims = []
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            claim = name and self.store.get(self.res["PersistentVolumeClaim"], namespace, name)
            if claim:
                claims.append(claim)
        return claims

    def _claim_zones(self, pod: dict) -> set[str]:
        """The zones a pod's bound ReadWriteOnce claims pin it to (a zonal persistent disk
        is reachable only from nodes of its zone: "Volume topology-aware scheduling")."""
        return {
            zone
            for claim in self._claims(pod)
            if (zone := (claim["metadata"].get("annotations") or {}).get(ZONE_ANNOTATION))
        }

    def _bind_claims(self, pod: dict, node: dict) -> None:
        """Provisions a pod's unbound claims in its node's zone, as a StorageClass with
        volumeBindingMode WaitForFirstConsumer does (GKE's default): the PVC gets the
        annotation volume.kubernetes.io/selected-node, and its disk that node's zone."""
        for claim in self._claims(pod):
            annotations = claim["metadata"].get("annotations") or {}
            if ZONE_ANNOTATION in annotations or _zone(node) is None:
                continue
            new = copy.deepcopy(claim)
            new["metadata"].setdefault("annotations", {}).update(
                {SELECTED_NODE: node["metadata"]["name"], ZONE_ANNOTATION: _zone(node)}
            )
            self._write("PersistentVolumeClaim", claim, new)

    # -- the Job controller -------------------------------------------------------------

    def jobs(self) -> None:
        pods = self._all("Pod")
        jobs = {j["metadata"]["uid"] for j in self._all("Job")}
        for pod in pods:
            # An orphan (its Job is gone): the finalizer goes once the pod has finished.
            refs = pod["metadata"].get("ownerReferences") or []
            if (
                JOB_TRACKING in (pod["metadata"].get("finalizers") or [])
                and terminal(pod)
                and not any(r.get("uid") in jobs for r in refs)
            ):
                new = copy.deepcopy(pod)
                new["metadata"]["finalizers"] = [
                    f for f in new["metadata"]["finalizers"] if f != JOB_TRACKING
                ]
                self._write("Pod", pod, new)
        for job in self._all("Job"):
            owned = [p for p in pods if owned_by(p, job)]
            if job["metadata"].get("deletionTimestamp"):
                # A Job on its way out makes no pods, but still lets its finished pods go.
                for pod in owned:
                    if terminal(pod) and JOB_TRACKING in (pod["metadata"].get("finalizers") or []):
                        new = copy.deepcopy(pod)
                        new["metadata"]["finalizers"] = [
                            f for f in new["metadata"]["finalizers"] if f != JOB_TRACKING
                        ]
                        self._write("Pod", pod, new)
                continue
            self._job(job, owned)

    def _job(self, job: dict, pods: list[dict]) -> None:
        spec = job["spec"]
        status = copy.deepcopy(job.get("status") or {})
        uid = job["metadata"]["uid"]
        counted = self._counted.setdefault(uid, set())
        conditions = status.setdefault("conditions", [])
        finished = any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions
        )
        now = time.time()

        def condition(type_: str, value: str, reason: str = "", message: str = "") -> None:
            for c in conditions:
                if c["type"] == type_:
                    if c["status"] != value:
                        c["lastTransitionTime"] = now_rfc3339()
                    c.update(
                        status=value, reason=reason, message=message, lastProbeTime=now_rfc3339()
                    )
                    return
            conditions.append(
                {
                    "type": type_,
                    "status": value,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now_rfc3339(),
                    "lastProbeTime": now_rfc3339(),
                }
            )

        fail_reason = None
        # Count finished pods once, then release their tracking finalizer.
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
            puid = pod["metadata"]["uid"]
            if not terminal(pod) or puid in counted:
                continue
            counted.add(puid)
            if pod["status"]["phase"] == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
            elif puid in self._suspended:
                pass  # deleted for a suspend: no failure of the Job's ("Suspending a Job")
            else:
                action, index, code = _failure_action(spec.get("podFailurePolicy"), pod)
                if action == "FailJob" and not finished:
                    fail_reason = (
                        "PodFailurePolicy",
                        f"Container {_container_of(pod)} for pod "
                        f"{pod['metadata']['namespace']}/{pod['metadata']['name']} "
                        f"failed with exit code {code} matching FailJob rule at "
                        f"index {index}",
                    )
                if action != "Ignore":
                    status["failed"] = status.get("failed", 0) + 1
                    self._next_pod_at[uid] = now + min(
                        JOB_BACKOFF_CAP_S, JOB_BACKOFF_S * 2 ** (status["failed"] - 1)
                    )
            if JOB_TRACKING in (pod["metadata"].get("finalizers") or []):
                new = copy.deepcopy(pod)
                new["metadata"]["finalizers"] = [
                    f for f in new["metadata"]["finalizers"] if f != JOB_TRACKING
                ]
                self._write("Pod", pod, new)
        active = [p for p in pods if not terminal(p) and not p["metadata"].get("deletionTimestamp")]
        terminating = [
            p for p in pods if not terminal(p) and p["metadata"].get("deletionTimestamp")
        ]
        if not finished:
            start = _parse(status.get("startTime"))
            if fail_reason is None and status.get("failed", 0) > spec.get("backoffLimit", 6):
                fail_reason = (
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            deadline = spec.get("activeDeadlineSeconds")
            if (
                fail_reason is None
                and deadline
                and start
                and now - start > deadline
                and not spec.get("suspend")
            ):
                fail_reason = ("DeadlineExceeded", "Job was active longer than specified deadline")
            target = next(
                (c for c in conditions if c["type"] == "FailureTarget" and c["status"] == "True"),
                None,
            )
            if fail_reason and target is None:
                # Kubernetes 1.31+ ("Jobs: Termination of Job pods"): FailureTarget first, the
                # remaining pods terminated, and Failed only once none is left running.
                condition("FailureTarget", "True", *fail_reason)
                target = conditions[-1]
            if target is not None:
                for pod in active:
                    self._delete("Pod", pod)
                if not active and not terminating:
                    condition("Failed", "True", target["reason"], target["message"])
                    status["completionTime"] = now_rfc3339()
                    finished = True
            elif status.get("succeeded", 0) >= spec.get("completions", 1):
                condition(
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
                status["completionTime"] = now_rfc3339()
                finished = True
        if finished or spec.get("suspend"):
            for pod in active:
                if spec.get("suspend") and not finished:
                    self._suspended.add(pod["metadata"]["uid"])
                self._delete("Pod", pod)
            if spec.get("suspend") and not finished:
                condition("Suspended", "True", "JobSuspended", "Job suspended")
                status.pop("startTime", None)
        else:
            if any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions):
                condition("Suspended", "False", "JobResumed", "Job resumed")
            status.setdefault("startTime", now_rfc3339())
            # podReplacementPolicy Failed (the default with a podFailurePolicy): a new pod
            # only once the old one is terminal.
            blocking = (
                terminating
                if spec.get("podReplacementPolicy", "Failed") == "Failed"
                or spec.get("podFailurePolicy")
                else []
            )
            want = min(
                spec.get("parallelism", 1), spec.get("completions", 1) - status.get("succeeded", 0)
            )
            failing = any(
                c["type"] == "FailureTarget" and c["status"] == "True" for c in conditions
            )
            if (
                not failing
                and len(active) + len(blocking) < want
                and now >= self._next_pod_at.get(uid, 0)
            ):
                self._create_pod(
                    job,
                    spec["template"],
                    {
                        "batch.kubernetes.io/controller-uid": uid,
                        "batch.kubernetes.io/job-name": job["metadata"]["name"],
                        "controller-uid": uid,
                        "job-name": job["metadata"]["name"],
                    },
                    [JOB_TRACKING],
                )
                active = active + [None]  # counted below
        status["active"] = len([p for p in active if p is not None]) if not finished else 0
        status["ready"] = sum(1 for p in active if p is not None and pod_ready(p))
        status["terminating"] = len(terminating)
        if not conditions:
            status.pop("conditions")
        self._status("Job", job, status)
        ttl = spec.get("ttlSecondsAfterFinished")
        done_at = _parse(status.get("completionTime"))
        if finished and ttl is not None and done_at is not None and now - done_at >= ttl:
            self.api.delete(
                self.res["Job"],
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                {"propagationPolicy": "Background"},
            )

    # -- the Deployment and ReplicaSet controllers ---------------------------------------

    def deployments(self) -> None:
        replicasets = self._all("ReplicaSet")
        pods = self._all("Pod")
        for dep in self._all("Deployment"):
            if dep["metadata"].get("deletionTimestamp"):
                continue
            owned = [rs for rs in replicasets if owned_by(rs, dep)]
            self._deployment(dep, owned, pods)

    def _deployment(self, dep: dict, owned: list[dict], pods: list[dict]) -> None:
        spec = dep["spec"]
        desired = spec.get("replicas", 1)
        template = spec["template"]
        hash_ = template_hash(template)
        new_rs = next(
            (
                rs
                for rs in owned
                if (rs["metadata"].get("labels") or {}).get("pod-template-hash") == hash_
            ),
            None,
        )
        if new_rs is None:
            revision = 1 + max(
                [
                    int(
                        (rs["metadata"].get("annotations") or {}).get(
                            "deployment.kubernetes.io/revision", 0
                        )
                    )
                    for rs in owned
                ]
                or [0]
            )
            labels = {**(template["metadata"].get("labels") or {}), "pod-template-hash": hash_}
            rs = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{dep['metadata']['name']}-{hash_}",
                    "labels": labels,
                    "annotations": {"deployment.kubernetes.io/revision": str(revision)},
                    "ownerReferences": [_owner_ref(dep)],
                },
                "spec": {
                    "replicas": 0,
                    "selector": {
                        "matchLabels": {
                            **spec["selector"].get("matchLabels", {}),
                            "pod-template-hash": hash_,
                        }
                    },
                    "template": {
                        "metadata": {**copy.deepcopy(template["metadata"]), "labels": labels},
                        "spec": copy.deepcopy(template["spec"]),
                    },
                },
            }
            new_rs = self.api.create(self.res["ReplicaSet"], dep["metadata"]["namespace"], rs)
        old = [rs for rs in owned if rs["metadata"]["uid"] != new_rs["metadata"]["uid"]]
        strategy = spec.get("strategy") or {"type": "RollingUpdate"}

        def replicas(rs: dict) -> int:
            return rs["spec"].get("replicas", 0)

        def available(rs: dict) -> int:
            return sum(
                1
                for p in pods
                if owned_by(p, rs)
                and pod_ready(p)
                and not terminal(p)
                and not p["metadata"].get("deletionTimestamp")
            )

        def scale(rs: dict, n: int) -> None:
            if replicas(rs) != n:
                new = copy.deepcopy(rs)
                new["spec"]["replicas"] = n
                self._write("ReplicaSet", rs, new)

        if strategy.get("type") == "Recreate":
            for rs in old:
                scale(rs, 0)
            if not any(owned_by(p, rs) and not terminal(p) for rs in old for p in pods):
                scale(new_rs, desired)
        elif not old:
            scale(new_rs, desired)  # a scale, or a first rollout: no rolling needed
        else:
            rolling = strategy.get("rollingUpdate") or {}
            surge = _int_or_percent(rolling.get("maxSurge", "25%"), desired, math.ceil)
            unavailable = _int_or_percent(rolling.get("maxUnavailable", "25%"), desired, math.floor)
            if surge == 0 and unavailable == 0:
                unavailable = 1
            total = replicas(new_rs) + sum(replicas(rs) for rs in old)
            up = min(desired, replicas(new_rs) + max(0, desired + surge - total))
            scale(new_rs, up)
            min_available = desired - unavailable
            can_remove = available(new_rs) + sum(available(rs) for rs in old) - min_available
            for rs in sorted(old, key=lambda r: r["metadata"].get("creationTimestamp") or ""):
                # Unavailable old pods may always go; available ones within the budget.
                down = replicas(rs) - available(rs) + max(0, can_remove)
                take = min(replicas(rs), max(0, down))
                can_remove -= max(0, take - (replicas(rs) - available(rs)))
                scale(rs, replicas(rs) - take)
        owned_pods = [
            p for p in pods if any(owned_by(p, rs) for rs in [new_rs, *old]) and not terminal(p)
        ]
        status = {
            "observedGeneration": dep["metadata"].get("generation"),
            "replicas": len(owned_pods),
            "updatedReplicas": sum(1 for p in owned_pods if owned_by(p, new_rs)),
            "readyReplicas": sum(1 for p in owned_pods if pod_ready(p)),
            "availableReplicas": sum(1 for p in owned_pods if pod_ready(p)),
        }
        status["unavailableReplicas"] = max(0, desired - status["availableReplicas"])
        status["conditions"] = [
            {
                "type": "Available",
                "status": "True"
                if status["availableReplicas"]
                >= desired
                - _int_or_percent(
                    ((strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")),
                    desired,
                    math.floor,
                )
                else "False",
                "reason": "MinimumReplicasAvailable",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if not old else "ReplicaSetUpdated",
            },
        ]
        old_status = copy.deepcopy(dep.get("status") or {})
        if {k: v for k, v in old_status.items() if k != "conditions"} != {
            k: v for k, v in status.items() if k != "conditions"
        } or [(c["type"], c["status"]) for c in old_status.get("conditions") or []] != [
            (c["type"], c["status"]) for c in status["conditions"]
        ]:
            for c in status["conditions"]:
                c["lastTransitionTime"] = c["lastUpdateTime"] = now_rfc3339()
            self._status("Deployment", dep, status)

    def replicasets(self) -> None:
        pods = self._all("Pod")
        for rs in self._all("ReplicaSet"):
            if rs["metadata"].get("deletionTimestamp"):
                continue
            owned = [
                p
                for p in pods
                if owned_by(p, rs)
                and labels_match(
                    ",".join(
                        f"{k}={v}" for k, v in rs["spec"]["selector"].get("matchLabels", {}).items()
                    ),
                    p["metadata"].get("labels") or {},
                )
            ]
            live = [
                p for p in owned if not terminal(p) and not p["metadata"].get("deletionTimestamp")
            ]
            diff = rs["spec"].get("replicas", 0) - len(live)
            for _ in range(max(0, diff)):
                self._create_pod(rs, rs["spec"]["template"])
            if diff < 0:

                def rank(p: dict) -> tuple:
                    return (
                        bool((p.get("spec") or {}).get("nodeName")),
                        pod_ready(p),
                        # newest first
                        -(_parse(p["metadata"].get("creationTimestamp")) or 0),
                    )

                for pod in sorted(live, key=rank)[:-diff]:
                    self._delete("Pod", pod)
            status = {
                "replicas": len(live),
                "fullyLabeledReplicas": len(live),
                "readyReplicas": sum(1 for p in live if pod_ready(p)),
                "availableReplicas": sum(1 for p in live if pod_ready(p)),
                "observedGeneration": rs["metadata"].get("generation"),
            }
            if {k: v for k, v in (rs.get("status") or {}).items()} != status:
                self._status("ReplicaSet", rs, status)


def _int_or_percent(value: Any, total: int, rounding) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return int(rounding(total * float(value[:-1]) / 100))
    return int(value)


def _statuses(pod: dict) -> list[dict]:
    """A pod's init and app container statuses: podFailurePolicy's onExitCodes matches
    either kind by name (Kubernetes, "Pod failure policy")."""
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _container_of(pod: dict) -> str:
    for s in _statuses(pod):
        term = (s.get("state") or {}).get("terminated")
        if term and term.get("exitCode"):
            return s["name"]
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        if (s.get("state") or {}).get("terminated"):
            return s["name"]
    return pod["spec"]["containers"][0]["name"]


def _failure_action(policy: dict | None, pod: dict) -> tuple[str | None, int | None, Any]:
    """The first podFailurePolicy rule matching a failed pod: (action, rule index, exit code);
    (None, None, code) when none matches."""
    statuses = _statuses(pod)
    conditions = {
        (c.get("type"), c.get("status")) for c in (pod.get("status") or {}).get("conditions") or []
    }
    code = None
    for s in statuses:
        term = (s.get("state") or {}).get("terminated")
        if term and term.get("exitCode"):
            code = term["exitCode"]
    for index, rule in enumerate((policy or {}).get("rules") or []):
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for s in statuses:
                if on_codes.get("containerName") not in (None, s.get("name")):
                    continue
                term = (s.get("state") or {}).get("terminated") or {}
                exit_code = term.get("exitCode")
                if exit_code in (None, 0):
                    continue
                inside = exit_code in on_codes.get("values") or []
                if inside == (on_codes.get("operator") == "In"):
                    return rule["action"], index, exit_code
        for pattern in rule.get("onPodConditions") or []:
            if (pattern["type"], pattern.get("status", "True")) in conditions:
                return rule["action"], index, code
    return None, None, code


#: The zone label of nodes ("Well-Known Labels": topology.kubernetes.io/zone).
ZONE_LABEL = "topology.kubernetes.io/zone"
#: What the volume binder writes on a claim it provisions for a pod's node.
SELECTED_NODE = "volume.kubernetes.io/selected-node"
#: Where the simulated cluster keeps the zone of a claim's disk (a real one keeps it in the
#: PersistentVolume's nodeAffinity).
ZONE_ANNOTATION = "sim.seedrl.dev/zone"


def _zone(node: dict) -> str | None:
    return (node["metadata"].get("labels") or {}).get(ZONE_LABEL)


def pod_requests(pod: dict) -> dict[str, float]:
    """What a pod asks of its node ("Resource Management for Pods and Containers"; init
    containers, "Resource sharing within containers"): per resource, the larger of its
    containers' sum and its largest init container."""
    spec = pod.get("spec") or {}

    def of(container: dict) -> dict[str, float]:
        requests = ((container.get("resources") or {}).get("requests")) or {}
        return {k: parse_quantity(v) for k, v in requests.items()}

    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def _short_of(pod: dict, node: dict, pods: list[dict]) -> list[str]:
    """The resources ``node`` has too little of left for ``pod`` (its allocatable less what
    the pods bound to it request; an extended resource it does not offer counts as 0)."""
    allocatable = {
        k: parse_quantity(v)
        for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    used: dict[str, float] = {}
    for other in pods:
        if (other.get("spec") or {}).get("nodeName") == node["metadata"]["name"] and not terminal(
            other
        ):
            for k, v in pod_requests(other).items():
                used[k] = used.get(k, 0.0) + v
    return [
        name
        for name, wanted in pod_requests(pod).items()
        if wanted > 0 and used.get(name, 0.0) + wanted > allocatable.get(name, 0.0) + 1e-9
    ]


def _fits(pod: dict, node: dict) -> bool:
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if required and not any(
        selector_matches({"matchExpressions": t.get("matchExpressions")}, labels)
        or not t.get("matchExpressions")
        for t in required
    ):
        return False
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", taint.get("key"))
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


__all__ = ["Controllers", "template_hash", "pod_ready", "terminal", "JOB_TRACKING"]
