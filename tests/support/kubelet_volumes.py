"""The volumes and the environment of a pod run by the tests' kubelet (:mod:`support.kubelet`),
read from the real API server with the node's own credentials: the Node authorizer lets a node
read only the Secrets, ConfigMaps, claims and service-account tokens of pods bound to it
("Using Node Authorization"), so a pod that names one it may not read fails as on a real node.

What the kubelet's volume plugins do, on a machine without mount namespaces: each volume is a
host directory, and the container's paths under a ``mountPath`` are mapped onto it
(:func:`map_path`). Sources ("Volumes", "Projected Volumes", "Configure a Pod to Use a
ConfigMap", "Secrets", "Downward API"):

- ``configMap``, ``secret``: the keys (``items`` only when listed, at their paths and modes); a
  missing object or key keeps the pod in ContainerCreating (FailedMount) unless ``optional``;
- ``projected``: its ``serviceAccountToken`` (a TokenRequest bound to the pod, for its audience
  and expiry: "Bound service account tokens"), ``configMap``, ``secret`` and ``downwardAPI``
  sources into one directory (the ServiceAccount admission plugin adds one, ``kube-api-access-*``,
  with the token, ``ca.crt`` of ``kube-root-ca.crt`` and the namespace);
- ``downwardAPI``: the pod's name, namespace, uid, labels and annotations;
- ``emptyDir``: a fresh directory, removed with the pod;
- ``persistentVolumeClaim``: the bound PersistentVolume's ``hostPath`` (what
  :mod:`support.pv_provisioner` provisions); unbound, the pod waits. A ReadWriteOnce volume is
  attached to one node at a time: another node's pod waits with "Multi-Attach error", as a
  zonal persistent disk does ("Persistent Volumes: Access Modes");
- ``hostPath``: a directory of the node (under the kubelet's root).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.kube_http import ApiError, KubeHttp

#: Where the ServiceAccount admission plugin mounts the API credentials.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class MountPending(Exception):
    """A volume's source cannot be read (yet): the pod waits in ContainerCreating."""


@dataclass
class Attachments:
    """Which node each ReadWriteOnce volume is attached to (the attach/detach controller's
    view), shared by the kubelets of every node."""

    nodes: dict[str, str] = field(default_factory=dict)
    users: dict[str, set[str]] = field(default_factory=dict)

    def attach(self, volume: str, node: str, pod_uid: str) -> None:
        """Attaches ``volume`` to ``node`` for a pod; raises MountPending when another node
        has it."""
        holder = self.nodes.get(volume)
        if holder is not None and holder != node and self.users.get(volume):
            raise MountPending(
                f"Multi-Attach error for volume {volume!r}: Volume is already exclusively "
                f"attached to one node ({holder}) and can't be attached to another"
            )
        self.nodes[volume] = node
        self.users.setdefault(volume, set()).add(pod_uid)

    def release(self, pod_uid: str) -> None:
        """A pod's containers are gone: its volumes detach once no pod uses them."""
        for volume, users in list(self.users.items()):
            users.discard(pod_uid)
            if not users:
                del self.users[volume]
                self.nodes.pop(volume, None)


async def _read(api: KubeHttp, path: str, what: str, optional: bool = False) -> dict | None:
    try:
        return await api.get(path)
    except ApiError as exc:
        if exc.status in (403, 404):
            # 403: the Node authorizer's graph does not (yet) link the object to this node.
            if optional and exc.status == 404:
                return None
            raise MountPending(f"{what} not found") from None
        raise


def _write_keys(
    path: Path,
    data: dict[str, bytes],
    items: list[dict] | None,
    default_mode: int,
    what: str,
) -> None:
    """Writes keys as files (only ``items`` when listed, at their paths and modes)."""
    chosen = items or [{"key": key, "path": key} for key in data]
    for item in chosen:
        if item["key"] not in data:
            raise MountPending(f"couldn't find key {item['key']} in {what}")
    path.mkdir(parents=True, exist_ok=True)
    for item in chosen:
        target = path / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(0o600)
        target.write_bytes(data[item["key"]])
        target.chmod(item.get("mode", default_mode))


def _configmap_data(cm: dict) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def _secret_data(secret: dict) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def field_value(pod: dict, path: str, pod_ip: str, host_ip: str) -> str:
    """A ``fieldRef``'s value ("Expose Pod Information to Containers Through Environment
    Variables")."""
    meta = pod["metadata"]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    return {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }.get(path, "")


class PodVolumes:
    """Sets up one pod's volumes under ``directory`` with the node's credentials.

    Attributes:
      paths: volume name -> its host directory.
      tokens: the projected service-account token files (refreshed by :meth:`refresh`).
    """

    def __init__(
        self,
        api: KubeHttp,
        pod: dict,
        directory: Path,
        node_dir: Path,
        attachments: Attachments,
    ):
        self.api = api
        self.pod = pod
        self.namespace = pod["metadata"]["namespace"]
        self.directory = directory
        self.node_dir = node_dir
        self.attachments = attachments
        self.paths: dict[str, Path] = {}
        self.tokens: list[tuple[Path, dict]] = []

    async def mount(self, pod_ip: str, host_ip: str) -> None:
        """Sets up every volume (again where one failed); raises MountPending while one
        cannot be."""
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if name in self.paths:
                continue
            self.paths[name] = await self._one(volume, pod_ip, host_ip)

    async def _one(self, volume: dict, pod_ip: str, host_ip: str) -> Path:
        path = self.directory / "volumes" / volume["name"]
        ns = self.namespace
        if "configMap" in volume:
            source = volume["configMap"]
            await self._configmap(source, path)
        elif "secret" in volume:
            await self._secret(volume["secret"], path)
        elif "projected" in volume:
            path.mkdir(parents=True, exist_ok=True)
            mode = volume["projected"].get("defaultMode", 0o644)
            for source in volume["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    target = path / source["serviceAccountToken"]["path"]
                    await self._token(source["serviceAccountToken"], target)
                    self.tokens.append((target, source["serviceAccountToken"]))
                elif "configMap" in source:
                    await self._configmap({"defaultMode": mode, **source["configMap"]}, path)
                elif "secret" in source:
                    secret = {"secretName": source["secret"]["name"], **source["secret"]}
                    await self._secret({"defaultMode": mode, **secret}, path)
                elif "downwardAPI" in source:
                    self._downward(source["downwardAPI"], path, pod_ip, host_ip)
        elif "downwardAPI" in volume:
            self._downward(volume["downwardAPI"], path, pod_ip, host_ip)
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = await _read(
                self.api,
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}",
                f'persistentvolumeclaim "{claim}"',
            )
            assert pvc is not None
            pv_name = (pvc.get("spec") or {}).get("volumeName")
            if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
                raise MountPending(f'persistentvolumeclaim "{claim}" is not bound')
            pv = await _read(
                self.api, f"/api/v1/persistentvolumes/{pv_name}", f'persistentvolume "{pv_name}"'
            )
            assert pv is not None
            spec = pv["spec"]
            host = (spec.get("hostPath") or spec.get("local") or {}).get("path")
            if not host:
                raise MountPending(f"volume {pv_name} has no path this kubelet can mount")
            if "ReadWriteOnce" in (spec.get("accessModes") or []):
                self.attachments.attach(
                    pv_name, self.pod["spec"]["nodeName"], self.pod["metadata"]["uid"]
                )
            path = Path(host)
            path.mkdir(parents=True, exist_ok=True)
        elif "hostPath" in volume:
            path = self.node_dir / "host" / volume["hostPath"]["path"].lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
        else:  # emptyDir, and any other kind: a fresh directory of this pod
            path.mkdir(parents=True, exist_ok=True)
        return path

    async def _configmap(self, source: dict, path: Path) -> None:
        name = source["name"]
        optional = bool(source.get("optional"))
        cm = await _read(
            self.api,
            f"/api/v1/namespaces/{self.namespace}/configmaps/{name}",
            f'configmap "{name}"',
            optional,
        )
        data = _configmap_data(cm) if cm else {}
        _write_keys(
            path,
            data,
            None if cm is None else source.get("items"),
            source.get("defaultMode", 0o644),
            f"ConfigMap {self.namespace}/{name}",
        )

    async def _secret(self, source: dict, path: Path) -> None:
        name = source["secretName"]
        optional = bool(source.get("optional"))
        secret = await _read(
            self.api,
            f"/api/v1/namespaces/{self.namespace}/secrets/{name}",
            f'secret "{name}"',
            optional,
        )
        data = _secret_data(secret) if secret else {}
        _write_keys(
            path,
            data,
            None if secret is None else source.get("items"),
            source.get("defaultMode", 0o644),
            f"Secret {self.namespace}/{name}",
        )

    def _downward(self, source: dict, path: Path, pod_ip: str, host_ip: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for item in source.get("items") or []:
            if "fieldRef" not in item:
                continue
            target = path / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(field_value(self.pod, item["fieldRef"]["fieldPath"], pod_ip, host_ip))

    async def _token(self, source: dict, target: Path) -> None:
        """Asks the API server for a token of the pod's service account, bound to the pod
        (the kubelet's token manager: POST serviceaccounts/NAME/token)."""
        account = self.pod["spec"].get("serviceAccountName") or "default"
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source["audience"]] if source.get("audience") else [],
                "expirationSeconds": source.get("expirationSeconds", 3600),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod["metadata"]["name"],
                    "uid": self.pod["metadata"]["uid"],
                },
            },
        }
        try:
            answer = await self.api.request(
                "POST",
                f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token",
                request,
            )
        except ApiError as exc:
            if exc.status in (403, 404):
                raise MountPending(f"failed to fetch token: {exc}") from None
            raise
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(answer["status"]["token"])
        tmp.replace(target)

    async def refresh(self) -> None:
        """Requests every projected token again (the kubelet does at 80% of its lifetime)."""
        for target, source in self.tokens:
            await self._token(source, target)

    def token_ttl(self) -> float | None:
        """The shortest lifetime of the pod's projected tokens, in seconds, if any."""
        ttls = [float(s.get("expirationSeconds", 3600)) for _, s in self.tokens]
        return min(ttls) if ttls else None

    def release(self) -> None:
        """The pod's containers are gone: its volumes detach."""
        self.attachments.release(self.pod["metadata"]["uid"])


async def environment(
    api: KubeHttp, pod: dict, container: dict, pod_ip: str, host_ip: str
) -> dict[str, str]:
    """The variables the container declares (``envFrom`` then ``env``, later ones winning;
    ``$(VAR)`` expanded from those before it, as the kubelet expands them: "Define Dependent
    Environment Variables")."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}

    async def source(kind: str, name: str, optional: bool) -> dict[str, str] | None:
        path = f"/api/v1/namespaces/{ns}/{kind}s/{name}"
        obj = await _read(api, path, f'{kind} "{name}"', optional)
        if obj is None:
            return None
        if kind == "secret":
            return {k: v.decode(errors="replace") for k, v in _secret_data(obj).items()}
        return {k: v.decode(errors="replace") for k, v in _configmap_data(obj).items()}

    for item in container.get("envFrom") or []:
        for kind in ("configMap", "secret"):
            ref = item.get(f"{kind}Ref")
            if ref:
                values = await source(kind.lower(), ref["name"], bool(ref.get("optional")))
                for key, value in (values or {}).items():
                    env[item.get("prefix", "") + key] = value
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        ref = item.get("valueFrom") or {}
        if "fieldRef" in ref:
            env[name] = field_value(pod, ref["fieldRef"]["fieldPath"], pod_ip, host_ip)
        for kind in ("configMap", "secret"):
            key_ref = ref.get(f"{kind}KeyRef")
            if key_ref:
                optional = bool(key_ref.get("optional"))
                values = await source(kind.lower(), key_ref["name"], optional) or {}
                if key_ref["key"] in values:
                    env[name] = values[key_ref["key"]]
                elif not optional:
                    raise MountPending(
                        f"couldn't find key {key_ref['key']} in {kind} {ns}/{key_ref['name']}"
                    )
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` replaced by VAR's value when defined (left as is otherwise); ``$$`` is a
    literal ``$`` (Kubernetes' expansion of env values, command and args)."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, value)


def map_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """``value`` with a container path under a mount (longest first) mapped to the host
    directory: the whole value, or after ``=`` or ``:`` inside a flag."""
    for mount, host in mounts:
        root = mount.rstrip("/")
        if value == mount or value.startswith(root + "/"):
            return str(host) + value[len(root) :]
        value = re.sub(rf"(?<=[=:]){re.escape(root)}(?=/|$)", str(host), value)
    return value


def service_account_kubeconfig(path: Path, token_dir: Path, server: str, namespace: str) -> Path:
    """A kubeconfig that reads the pod's projected token and CA: what in-cluster config is to a
    container, for a process that cannot see the mount path (``tokenFile`` is re-read as the
    kubelet refreshes it)."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "in-cluster",
                "cluster": {
                    "server": server,
                    "certificate-authority": str(token_dir / "ca.crt"),
                },
            }
        ],
        "users": [{"name": "pod", "user": {"tokenFile": str(token_dir / "token")}}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {"cluster": "in-cluster", "user": "pod", "namespace": namespace},
            }
        ],
        "current-context": "in-cluster",
    }
    path.write_text(json.dumps(config))
    return path


__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "Attachments",
    "MountPending",
    "PodVolumes",
    "environment",
    "expand",
    "field_value",
    "map_path",
    "service_account_kubeconfig",
]
