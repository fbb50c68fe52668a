"""Zonal persistent disks for the tests' cluster: a small external provisioner in the role of
GKE's Compute Engine persistent disk CSI driver (``pd.csi.storage.gke.io``).

It installs GKE's StorageClasses (``standard-rwo``, the default, and ``premium-rwo``: "Using the
Compute Engine persistent disk CSI Driver"), both ``volumeBindingMode: WaitForFirstConsumer``, so
the real scheduler picks the pod's node first and writes it on the claim
(``volume.kubernetes.io/selected-node``). The provisioner then creates a PersistentVolume for the
claim, pre-bound to it (``claimRef``), whose ``hostPath`` is a directory of its own and whose node
affinity is the node's zone (``topology.kubernetes.io/zone``): a zonal disk, usable only from
that zone. The real PersistentVolume controller binds the two; the scheduler then keeps every
later pod of the claim in that zone. A released volume of reclaim policy Delete is deleted with
its directory. ReadWriteOnce (one node at a time) is the kubelets' to enforce
(:class:`support.kubelet_volumes.Attachments`).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import aiohttp

from support.kube_http import ApiError, KubeHttp, transient

DRIVER = "pd.csi.storage.gke.io"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
ZONE_LABEL = "topology.kubernetes.io/zone"


def storage_classes() -> list[dict]:
    """GKE's StorageClasses of the persistent disk CSI driver."""
    classes = []
    for name, disk, default in (
        ("standard-rwo", "pd-balanced", True),
        ("premium-rwo", "pd-ssd", False),
    ):
        classes.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": name,
                    "annotations": {
                        "storageclass.kubernetes.io/is-default-class": str(default).lower()
                    },
                },
                "provisioner": DRIVER,
                "parameters": {"type": disk},
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": True,
            }
        )
    return classes


class DiskProvisioner:
    """Provisions and deletes the zonal volumes (with an administrator's identity, as the CSI
    driver's controller runs with a role of its own)."""

    def __init__(self, api: KubeHttp, root: Path, errors: list[str]):
        self.api = api
        self.root = root
        self.errors = errors
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Installs the StorageClasses and starts watching claims and volumes."""
        for sc in storage_classes():
            try:
                await self.api.request("POST", "/apis/storage.k8s.io/v1/storageclasses", sc)
            except ApiError as exc:
                if exc.status != 409:
                    raise
        self.tasks = [
            asyncio.ensure_future(self._watch("/api/v1/persistentvolumeclaims", self._claim)),
            asyncio.ensure_future(self._watch("/api/v1/persistentvolumes", self._volume)),
        ]

    async def stop(self) -> None:
        """Stops watching."""
        for task in self.tasks:
            task.cancel()

    async def _watch(self, path: str, handle) -> None:
        while True:
            try:
                async for kind, obj in self.api.watch(path):
                    items = obj["items"] if kind == "SYNC" else [obj] if kind != "DELETED" else []
                    for item in items:
                        try:
                            await handle(item)
                        except (ApiError, aiohttp.ClientError) as exc:
                            # The API server away: the item comes again with the next list.
                            if not transient(exc, 1):
                                self.errors.append(f"provisioner: {exc}")
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError):
                await asyncio.sleep(1.0)

    async def _claim(self, pvc: dict) -> None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        node_name = (meta.get("annotations") or {}).get(SELECTED_NODE)
        if spec.get("volumeName") or not node_name or meta.get("deletionTimestamp"):
            return
        sc = await self.api.get_or_none(
            f"/apis/storage.k8s.io/v1/storageclasses/{spec.get('storageClassName', '')}"
        )
        if sc is None or sc.get("provisioner") != DRIVER:
            return
        node = await self.api.get_or_none(f"/api/v1/nodes/{node_name}")
        if node is None:
            return
        zone = node["metadata"]["labels"].get(ZONE_LABEL, "")
        name = f"pvc-{meta['uid']}"
        directory = self.root / "disks" / name
        directory.mkdir(parents=True, exist_ok=True)
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER}},
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": ZONE_LABEL, "operator": "In", "values": [zone]}
                                ]
                            }
                        ]
                    }
                },
            },
        }
        try:
            await self.api.request("POST", "/api/v1/persistentvolumes", volume)
        except ApiError as exc:
            if exc.status != 409:
                raise

    async def _volume(self, pv: dict) -> None:
        meta, spec = pv["metadata"], pv.get("spec") or {}
        if (meta.get("annotations") or {}).get("pv.kubernetes.io/provisioned-by") != DRIVER:
            return
        if (pv.get("status") or {}).get("phase") != "Released":
            return
        if spec.get("persistentVolumeReclaimPolicy") != "Delete" or meta.get("deletionTimestamp"):
            return
        shutil.rmtree(self.root / "disks" / meta["name"], ignore_errors=True)
        try:
            await self.api.request("DELETE", f"/api/v1/persistentvolumes/{meta['name']}")
        except ApiError as exc:
            if exc.status != 404:
                raise


__all__ = ["DRIVER", "DiskProvisioner", "storage_classes"]
