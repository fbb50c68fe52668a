"""The kubelet of the simulated cluster (:mod:`support.sim_cluster`): it runs each pod's container
command as a real local process, as the real kubelet runs it in a container.

What it models (kubernetes.io: "Pod Lifecycle", "Container probes", "Termination of Pods",
"Configure Liveness, Readiness and Startup Probes", "Resource Management for Pods and
Containers", "Node Shutdowns", "Determine the Reason for Pod Failure"):

- volumes: a ConfigMap's keys become files, a Secret's decoded keys too (its ``items`` only,
  when listed, with their modes), an emptyDir an empty directory, a PersistentVolumeClaim a
  directory that outlives the pod (one per claim); a missing ConfigMap, Secret, Secret key or
  claim keeps the pod in ContainerCreating until it appears; the container sees
  them at their ``mountPath``s, so every argument and environment value that starts with a
  mount path is mapped onto the host directory (the process has no mount namespace);
- environment: the container's ``env`` (values, and ``fieldRef`` to the pod's name,
  namespace, IP and node), and, when ``automountServiceAccountToken`` is not false, a
  kubeconfig for the API server in place of the service-account token mount
  (``KUBECONFIG``; the in-cluster host variables are set too);
- networking: each pod gets its own loopback address (127.0.x.y) as its pod IP. The processes
  share this machine's network namespace, so a small ``sitecustomize`` makes Python's wildcard
  binds (``0.0.0.0``, ``::``) bind the pod IP and resolves cluster DNS names
  (``svc``, ``svc.ns``, ``svc.ns.svc[.cluster.local]``) to the pod IP of a ready endpoint of
  the Service. gRPC's C core binds and resolves on its own: a ``svc:port`` argument is mapped
  to ``127.0.0.1:port`` (a wildcard gRPC bind is reachable there), so gRPC ports of pods must
  not collide. The name is then gone from the address, which a TLS client verifies the
  server's certificate against: a container that is one (its command has ``--tls-ca``) gets
  ``--tls-server-name svc`` after the mapped argument, so it still verifies the name it asked
  for (as seedrl's actors take it; no other TLS clients run in pods here);
- init containers: each runs to completion, in order, before the app container starts (the
  pod is Pending, its Initialized condition False, its app container waiting in
  PodInitializing); a failed one is restarted with the crash-loop backoff under
  ``restartPolicy`` Always or OnFailure, and under Never fails the pod, its terminated state
  (exit code, reason, message) in ``initContainerStatuses``;
- probes: startup, then liveness and readiness (``httpGet`` to the pod IP, ``tcpSocket``) at
  their periods and thresholds; the Ready and ContainersReady conditions follow readiness; a
  failed liveness probe stops the container (SIGTERM, SIGKILL after the probe's
  ``terminationGracePeriodSeconds``, else the pod's) and restarts it as its policy says;
- exit: ``restartPolicy`` Always and OnFailure restart the container with the crash-loop
  backoff (10 s doubling to 5 min) and ``restartCount``; Never leaves the pod Succeeded (all
  exited 0) or Failed. The terminated state carries the exit code (128 + signal when killed),
  the reason (Completed, Error, OOMKilled) and the message: what the container wrote to its
  ``terminationMessagePath`` (a file the kubelet mounts there, at most 4096 bytes), else, with
  ``terminationMessagePolicy: FallbackToLogsOnError`` and a failure, the end of the log (80
  lines or 2048 bytes);
- memory limits: the process group's resident memory is read twice a second; over
  ``limits.memory`` it is killed with SIGKILL and the reason is OOMKilled, as the kernel's
  cgroup OOM killer does;
- deletion: SIGTERM to the process group, SIGKILL after the grace period, the pod then moves
  to a terminal phase and the kubelet removes it from the API;
- node shutdown (a Spot preemption): every pod gets condition DisruptionTarget (reason
  TerminationByKubelet), SIGTERM, SIGKILL after min(its grace period, 15 s), and ends Failed
  with reason Terminated.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from support.container_processes import (
    CRASH_BACKOFF_CAP_S,
    CRASH_BACKOFF_S,
    SHUTDOWN_GRACE_S,
    SITECUSTOMIZE,
    die_with_parent as _die_with_parent,
    group_rss as _group_rss,
    memory_limit as _limit,
    signal_group as _signal_group,
    termination_message as _message,
    terminated_state as _terminated,
)
from support.sim_rbac import service_account_token
from support.sim_apiserver import ApiServer, now_rfc3339, set_pod_condition
from support.sim_controllers import pod_ready

#: Pod addresses, shared by every simulated cluster of the process (see allocate_ip).
_POD_IPS = iter(f"127.0.{i // 250 + 1}.{i % 250 + 2}" for i in range(60000))


class MountPending(Exception):
    """A volume's source does not exist (yet): the pod waits, as ContainerCreating."""


class PodRun:
    """One pod's containers as processes (the pods here have one container each)."""

    def __init__(self, kubelet: "Kubelet", pod: dict):
        self.kubelet = kubelet
        self.uid = pod["metadata"]["uid"]
        self.namespace = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.ip = kubelet.allocate_ip()
        self.dir = kubelet.root / "pods" / self.uid
        self.proc: asyncio.subprocess.Process | None = None
        self.stop_grace: float | None = None
        self.stopping = asyncio.Event()
        self.killed_reason: str | None = None
        self.disrupted = False
        self.task: asyncio.Task | None = None
        self.restarts = 0

    # -- pod status ---------------------------------------------------------------------

    def current(self) -> dict | None:
        pod = self.kubelet.api.store.get(self.kubelet.pods_res, self.namespace, self.name)
        if pod is None or pod["metadata"]["uid"] != self.uid:
            return None
        return pod

    def update(self, change) -> dict | None:
        pod = self.current()
        if pod is None:
            return None
        new = copy.deepcopy(pod)
        change(new)
        if new != pod:
            self.kubelet.api._commit(self.kubelet.pods_res, pod, new, "status")
        return self.current()

    # -- setup --------------------------------------------------------------------------

    def _volumes(self, pod: dict) -> dict[str, Path]:
        out: dict[str, Path] = {}
        store, api = self.kubelet.api.store, self.kubelet.api
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "configMap" in volume:
                path = self.dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
                cm = store.get(
                    store.resource("", "v1", "configmaps"),
                    self.namespace,
                    volume["configMap"]["name"],
                )
                if cm is None:
                    raise MountPending(f'configmap "{volume["configMap"]["name"]}" not found')
                for key, text in (cm.get("data") or {}).items():
                    (path / key).write_text(text)
            elif "secret" in volume:
                path = self.dir / "volumes" / name
                self._secret_volume(volume["secret"], path)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                pvc = store.get(
                    store.resource("", "v1", "persistentvolumeclaims"), self.namespace, claim
                )
                if pvc is None:
                    raise MountPending(f'persistentvolumeclaim "{claim}" not found')
                path = self.kubelet.root / "volumes" / pvc["metadata"]["uid"]
                path.mkdir(parents=True, exist_ok=True)
            else:  # emptyDir and anything else: a fresh directory for this pod
                path = self.dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
            out[name] = path
        del api
        return out

    def _secret_volume(self, source: dict, path: Path) -> None:
        """Writes a Secret's keys (decoded; only ``items`` when listed, at their paths and
        modes) into ``path``, as the kubelet's secret volume plugin does."""
        store = self.kubelet.api.store
        name = source["secretName"]
        secret = store.get(store.resource("", "v1", "secrets"), self.namespace, name)
        if secret is None:
            if source.get("optional"):
                path.mkdir(parents=True, exist_ok=True)
                return
            raise MountPending(f'secret "{name}" not found')
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            if item["key"] not in data:
                raise MountPending(
                    f"couldn't find key {item['key']} in Secret {self.namespace}/{name}"
                )
        path.mkdir(parents=True, exist_ok=True)
        for item in items:
            target = path / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.chmod(0o600)
            target.write_bytes(data[item["key"]])
            target.chmod(item.get("mode", source.get("defaultMode", 0o644)))

    def _map(self, value: str, mounts: list[tuple[str, Path]]) -> str:
        for mount, host in mounts:
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return str(host) + value[len(mount.rstrip("/")) :]
            # Inside flags such as --config=/etc/seedrl/config.yaml.
            value = re.sub(rf"(?<=[=:]){re.escape(mount.rstrip('/'))}(?=/|$)", str(host), value)
        return value

    def _services(self, value: str) -> tuple[str, str | None]:
        """``value`` with any ``svc[.ns[.svc[.cluster.local]]]:port`` mapped to
        ``127.0.0.1:targetPort``, and the name it had (None when none was mapped)."""
        store = self.kubelet.api.store
        found = None
        for svc in store.list(store.resource("", "v1", "services"), self.namespace):
            name = svc["metadata"]["name"]
            pattern = (
                rf"\b({re.escape(name)}(\.{re.escape(self.namespace)}"
                rf"(\.svc(\.cluster\.local)?)?)?):(\d+)\b"
            )
            match = re.search(pattern, value)
            if match:
                found = match.group(1)
                value = re.sub(
                    pattern, lambda m: f"127.0.0.1:{self._target(svc, m.group(5))}", value
                )
        return value, found

    def _command(self, container: dict, mounts) -> list[str]:
        """The container's command and args, with mount paths and Service addresses mapped;
        a TLS client (``--tls-ca``) is told the Service name it would have verified."""
        argv: list[str] = []
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        for arg in command:
            mapped, service = self._services(self._map(arg, mounts))
            argv.append(mapped)
            if service and "--tls-ca" in command and "--tls-server-name" not in command:
                argv += ["--tls-server-name", service]
        return argv

    @staticmethod
    def _target(svc: dict, port: str) -> str:
        for entry in (svc.get("spec") or {}).get("ports") or []:
            if str(entry.get("port")) == port:
                target = entry.get("targetPort", entry["port"])
                return str(target if isinstance(target, int) else entry["port"])
        return port

    def _env(self, pod: dict, container: dict, mounts) -> dict[str, str]:
        kubelet = self.kubelet
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOSTNAME": self.name,
            "PYTHONPATH": str(kubelet.site_dir),
            "SIM_POD_IP": self.ip,
            "SIM_POD_NAMESPACE": self.namespace,
            "SIM_DNS_FILE": str(kubelet.dns_file),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(kubelet.api_port),
        }
        if pod["spec"].get("automountServiceAccountToken", True) is not False:
            env["KUBECONFIG"] = str(
                kubelet.kubeconfig_for(self.namespace, pod["spec"].get("serviceAccountName"))
            )
        for extra in kubelet.node_env:
            env[extra] = kubelet.node_env[extra]
        fields = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "status.podIP": self.ip,
            "spec.nodeName": pod["spec"].get("nodeName", ""),
            "metadata.uid": self.uid,
        }
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = self._map(str(item["value"]), mounts)
            elif "fieldRef" in (item.get("valueFrom") or {}):
                env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
        return env

    # -- running ------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # noqa: BLE001 - a broken pod must not stop the kubelet
            self.kubelet.errors.append(f"{self.namespace}/{self.name}: {exc!r}")
            message = str(exc)
            self.update(
                lambda p: p["status"].update(phase="Failed", reason="KubeletError", message=message)
            )

    async def _run(self) -> None:
        pod = self.current()
        if pod is None:
            return
        container = pod["spec"]["containers"][0]
        self.dir.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                volumes = self._volumes(pod)
                break
            except MountPending as exc:
                # FailedMount: the kubelet keeps trying while the pod waits in
                # ContainerCreating; a pod deleted meanwhile just goes.
                def waiting(p: dict, why: str = str(exc)) -> None:
                    p["status"]["containerStatuses"] = [
                        {
                            "name": container["name"],
                            "ready": False,
                            "restartCount": 0,
                            "image": container.get("image", ""),
                            "imageID": "",
                            "state": {
                                "waiting": {
                                    "reason": "ContainerCreating",
                                    "message": f"MountVolume.SetUp failed: {why}",
                                }
                            },
                        }
                    ]

                self.update(waiting)
                try:
                    await asyncio.wait_for(self.stopping.wait(), 1.0)
                except asyncio.TimeoutError:
                    continue
                self.update(lambda p: p["status"].update(phase="Failed"))
                current = self.current()
                if current is not None:
                    self.kubelet.api.finish_pod(current)
                return
        for init in pod["spec"].get("initContainers") or []:
            if not await self._init_container(pod, init, volumes):
                return
        message_file = self.dir / "termination-log"
        argv, env, mounts = self._process(pod, container, volumes, message_file)
        log_path = self.dir / f"{container['name']}.log"
        limit = _limit(container)
        started_pod = now_rfc3339()

        def running(p: dict) -> None:
            status = p.setdefault("status", {})
            status.update(
                phase="Running", podIP=self.ip, podIPs=[{"ip": self.ip}], hostIP="127.0.0.1"
            )
            status.setdefault("startTime", started_pod)
            p["metadata"].setdefault("annotations", {})["sim.seedrl.dev/log"] = str(log_path)
            set_pod_condition(p, "Initialized", "True")

        self.update(running)
        self._annotate_log(log_path)
        backoff = CRASH_BACKOFF_S
        while True:
            code, reason, started, finished = await self._once(
                argv, env, log_path, limit, container
            )
            terminated = _terminated(
                code, reason, started, finished, _message(container, code, message_file, log_path)
            )
            policy = pod["spec"].get("restartPolicy", "Always")
            again = not self.stopping.is_set() and (
                policy == "Always" or (policy == "OnFailure" and code != 0)
            )
            if again:
                self.restarts += 1
                delay = backoff
                backoff = min(CRASH_BACKOFF_CAP_S, backoff * 2)

                def crashed(p: dict) -> None:
                    p["status"]["containerStatuses"] = [
                        {
                            "name": container["name"],
                            "ready": False,
                            "started": False,
                            "restartCount": self.restarts,
                            "image": container.get("image", ""),
                            "imageID": "",
                            "lastState": {"terminated": terminated},
                            "state": {
                                "waiting": {
                                    "reason": "CrashLoopBackOff",
                                    "message": f"back-off {delay:.0f}s restarting failed container",
                                }
                            },
                        }
                    ]
                    set_pod_condition(p, "Ready", "False", "ContainersNotReady")
                    set_pod_condition(p, "ContainersReady", "False", "ContainersNotReady")

                self.update(crashed)
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except asyncio.TimeoutError:
                    continue

            # Terminal: the container will not run again.
            def ended(p: dict) -> None:
                status = p["status"]
                status["containerStatuses"] = [
                    {
                        "name": container["name"],
                        "ready": False,
                        "started": False,
                        "restartCount": self.restarts,
                        "image": container.get("image", ""),
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ]
                status["phase"] = "Succeeded" if code == 0 else "Failed"
                if self.disrupted:
                    status.update(
                        reason="Terminated",
                        message="Pod was terminated in response to imminent node shutdown.",
                    )
                set_pod_condition(p, "Ready", "False", "PodCompleted" if code == 0 else "PodFailed")
                set_pod_condition(
                    p, "ContainersReady", "False", "PodCompleted" if code == 0 else "PodFailed"
                )

            self.update(ended)
            pod = self.current()
            if pod is not None and pod["metadata"].get("deletionTimestamp"):
                self.kubelet.api.finish_pod(pod)
            return

    def _annotate_log(self, log_path: Path) -> None:
        """Points the pod's log annotation (what :meth:`SimulatedCluster.pod_log` reads) at
        the log of the container running now. Metadata: written through the main resource."""
        pod = self.current()
        if pod is not None and (pod["metadata"].get("annotations") or {}).get(
            "sim.seedrl.dev/log"
        ) != str(log_path):
            new = copy.deepcopy(pod)
            new["metadata"].setdefault("annotations", {})["sim.seedrl.dev/log"] = str(log_path)
            self.kubelet.api._commit(self.kubelet.pods_res, pod, new, None)

    def _process(
        self, pod: dict, container: dict, volumes: dict[str, Path], message_file: Path
    ) -> tuple[list[str], dict[str, str], list]:
        """A container's argv, environment and mounts (longest mount path first). The kubelet
        mounts a file at terminationMessagePath (``message_file``) and reads it after the
        exit."""
        message_path = container.get("terminationMessagePath", "/dev/termination-log")
        mounts = sorted(
            [
                (m["mountPath"], volumes[m["name"]])
                for m in container.get("volumeMounts") or []
                if m["name"] in volumes
            ]
            + [(message_path, message_file)],
            key=lambda m: -len(m[0]),
        )
        argv = self._command(container, mounts)
        if argv and argv[0] in ("python", "python3"):
            argv[0] = self.kubelet.python
        return argv, self._env(pod, container, mounts), mounts

    async def _init_container(self, pod: dict, container: dict, volumes: dict[str, Path]) -> bool:
        """Runs one init container until it succeeds; returns False when the pod ends
        instead (it failed under restartPolicy Never, or the pod was stopped meanwhile)."""
        name = container["name"]
        message_file = self.dir / f"termination-log-{name}"
        argv, env, _ = self._process(pod, container, volumes, message_file)
        log_path = self.dir / f"{name}.log"
        app = pod["spec"]["containers"][0]
        restarts = 0
        backoff = CRASH_BACKOFF_S
        self._annotate_log(log_path)

        def initializing(p: dict, state: dict) -> None:
            status = p.setdefault("status", {})
            others = [s for s in status.get("initContainerStatuses") or [] if s["name"] != name]
            status["initContainerStatuses"] = [
                *others,
                {
                    "name": name,
                    "ready": False,
                    "restartCount": restarts,
                    "image": container.get("image", ""),
                    "imageID": "",
                    "state": state,
                },
            ]
            status["containerStatuses"] = [
                {
                    "name": app["name"],
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "image": app.get("image", ""),
                    "imageID": "",
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ]
            status.update(podIP=self.ip, podIPs=[{"ip": self.ip}], hostIP="127.0.0.1")
            set_pod_condition(
                p,
                "Initialized",
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{name}]",
            )

        while True:
            code, reason, started, finished = await self._once(
                argv, env, log_path, _limit(container), container, init=True
            )
            terminated = _terminated(
                code, reason, started, finished, _message(container, code, message_file, log_path)
            )
            if code == 0 and not self.stopping.is_set():
                self.update(lambda p: initializing(p, {"terminated": terminated}))
                return True
            policy = pod["spec"].get("restartPolicy", "Always")
            if code == 0 or policy == "Never" or self.stopping.is_set():

                def failed(p: dict) -> None:
                    initializing(p, {"terminated": terminated})
                    p["status"]["phase"] = "Failed"
                    set_pod_condition(p, "Ready", "False", "PodFailed")
                    set_pod_condition(p, "ContainersReady", "False", "PodFailed")

                self.update(failed)
                current = self.current()
                if current is not None and current["metadata"].get("deletionTimestamp"):
                    self.kubelet.api.finish_pod(current)
                return False
            restarts += 1
            delay, backoff = backoff, min(CRASH_BACKOFF_CAP_S, backoff * 2)
            self.update(
                lambda p: initializing(
                    p,
                    {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off {delay:.0f}s restarting failed container",
                        }
                    },
                )
            )
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
            except asyncio.TimeoutError:
                continue
            current = self.current()
            self.update(lambda p: p["status"].update(phase="Failed"))
            if current is not None and current["metadata"].get("deletionTimestamp"):
                self.kubelet.api.finish_pod(current)
            return False

    async def _once(
        self, argv, env, log_path: Path, limit: float | None, container: dict, init: bool = False
    ) -> tuple[int, str, str, str]:
        """Runs the container process once; returns (exit code, reason, started, finished).
        An init container (``init``) has no probes and its own status list."""
        started = now_rfc3339()
        self.killed_reason = None
        with open(log_path, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                cwd=str(self.dir),
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        ready = {"ready": False}

        def started_state(p: dict) -> None:
            running = {
                "name": container["name"],
                "ready": False,
                "started": False,
                "restartCount": self.restarts,
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": f"sim://{self.proc.pid}",
                "state": {"running": {"startedAt": started}},
            }
            if init:
                statuses = p["status"].get("initContainerStatuses") or []
                running["restartCount"] = next(
                    (s.get("restartCount", 0) for s in statuses if s["name"] == container["name"]),
                    0,
                )
                others = [s for s in statuses if s["name"] != container["name"]]
                p["status"]["initContainerStatuses"] = [*others, running]
            else:
                p["status"]["containerStatuses"] = [running]

        self.update(started_state)
        probes = None if init else asyncio.ensure_future(self._probe(container, ready))
        watchdog = asyncio.ensure_future(self._watch_memory(limit)) if limit else None
        stopper = asyncio.ensure_future(self._stop_when_asked())
        try:
            code = await self.proc.wait()
        finally:
            for task in (probes, watchdog, stopper):
                if task is not None:
                    task.cancel()
        if code < 0:
            code = 128 - code
        reason = self.killed_reason or ("Completed" if code == 0 else "Error")
        return code, reason, started, now_rfc3339()

    async def _stop_when_asked(self) -> None:
        await self.stopping.wait()
        await self._terminate(self.stop_grace if self.stop_grace is not None else 30)

    async def _terminate(self, grace: float) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), max(0.0, grace))
        except asyncio.TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
        else:
            _signal_group(proc.pid, signal.SIGKILL)  # what it left behind

    async def _watch_memory(self, limit: float) -> None:
        while self.proc is not None and self.proc.returncode is None:
            if _group_rss(self.proc.pid) > limit:
                self.killed_reason = "OOMKilled"
                _signal_group(self.proc.pid, signal.SIGKILL)
                return
            await asyncio.sleep(0.5)

    async def _probe(self, container: dict, ready: dict) -> None:
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}

        async def check(probe: dict) -> bool:
            timeout = probe.get("timeoutSeconds", 1)
            try:
                if "httpGet" in probe:
                    port = probe["httpGet"]["port"]
                    port = ports.get(port, port)
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.ip, int(port)), timeout
                    )
                    writer.write(
                        f"GET {probe['httpGet'].get('path', '/')} HTTP/1.0\r\n"
                        f"Host: {self.ip}\r\n\r\n".encode()
                    )
                    line = await asyncio.wait_for(reader.readline(), timeout)
                    writer.close()
                    code = int(line.split()[1])
                    return 200 <= code < 400
                if "tcpSocket" in probe:
                    port = probe["tcpSocket"]["port"]
                    port = ports.get(port, port)
                    _, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.ip, int(port)), timeout
                    )
                    writer.close()
                    return True
            except (OSError, asyncio.TimeoutError, ValueError, IndexError):
                return False
            return True

        def set_ready(value: bool, started: bool = True) -> None:
            if ready.get("ready") == value and ready.get("started") == started:
                return
            ready.update(ready=value, started=started)

            def change(p: dict) -> None:
                for s in p["status"].get("containerStatuses") or []:
                    s["ready"], s["started"] = value, started
                text = "True" if value else "False"
                set_pod_condition(p, "ContainersReady", text, "" if value else "ContainersNotReady")
                set_pod_condition(p, "Ready", text, "" if value else "ContainersNotReady")

            self.update(change)

        startup = container.get("startupProbe")
        if startup:
            failures = 0
            await asyncio.sleep(startup.get("initialDelaySeconds", 0))
            while not await check(startup):
                failures += 1
                if failures >= startup.get("failureThreshold", 3):
                    await self._terminate(30)
                    return
                await asyncio.sleep(startup.get("periodSeconds", 10))
        set_ready(False, True)
        liveness = container.get("livenessProbe")
        readiness = container.get("readinessProbe")
        if readiness is None:
            set_ready(True)
        next_live = next_ready = time.monotonic()
        live_failures = ready_failures = 0
        while True:
            now = time.monotonic()
            if readiness is not None and now >= next_ready:
                next_ready = now + readiness.get("periodSeconds", 10)
                if await check(readiness):
                    ready_failures = 0
                    set_ready(True)
                else:
                    ready_failures += 1
                    if ready_failures >= readiness.get("failureThreshold", 3) or not ready.get(
                        "ready"
                    ):
                        set_ready(False)
            if liveness is not None and now >= next_live:
                next_live = now + liveness.get("periodSeconds", 10)
                if await check(liveness):
                    live_failures = 0
                else:
                    live_failures += 1
                    if live_failures >= liveness.get("failureThreshold", 3):
                        # The probe's own terminationGracePeriodSeconds, else the pod's
                        # ("Configure Liveness, Readiness and Startup Probes").
                        spec = (self.current() or {}).get("spec") or {}
                        grace = liveness.get(
                            "terminationGracePeriodSeconds",
                            spec.get("terminationGracePeriodSeconds", 30),
                        )
                        await self._terminate(float(grace))
                        return
            await asyncio.sleep(0.2)

    def stop(self, grace: float, disrupted: bool = False) -> None:
        """Stops the pod's containers: SIGTERM now, SIGKILL after ``grace`` seconds."""
        self.disrupted = self.disrupted or disrupted
        if self.stopping.is_set():
            if self.stop_grace is not None and grace < self.stop_grace:
                self.stop_grace = grace
                asyncio.ensure_future(self._terminate(grace))
            return
        self.stop_grace = grace
        self.stopping.set()


class Kubelet:
    """The kubelets of every node: runs the pods bound to nodes, in one event loop.

    Args:
      api: the API server (pods are read and their status written through it).
      root: where pod directories, volumes and logs go.
      api_port: the API server's port (for the pods' kubeconfig).
      kubeconfig: the kubeconfig given to pods that mount a service-account token.
      node_env: variables every container gets from its node (e.g. the GCS emulator's
        address for pods that use gs:// checkpoints).
    """

    def __init__(
        self,
        api: ApiServer,
        root: Path,
        api_port: int,
        kubeconfig: Path,
        node_env: dict[str, str] | None = None,
    ):
        self.api = api
        self.root = Path(root)
        self.api_port = api_port
        self.kubeconfig = kubeconfig
        self.node_env = dict(node_env or {})
        self.python = sys.executable
        self.pods_res = api.store.resource("", "v1", "pods")
        self.runs: dict[str, PodRun] = {}
        self.errors: list[str] = []
        self.site_dir = self.root / "site"
        self.site_dir.mkdir(parents=True, exist_ok=True)
        (self.site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.dns_file = self.root / "dns.json"
        self.dns_file.write_text("{}")
        api.pod_has_kubelet = self.runs_pod

    def allocate_ip(self) -> str:
        """A loopback address no pod of any simulated cluster in this process has had: two
        clusters alive at once (a module's and a test's own) must not hand out the same
        addresses, or their pods' fixed ports (metrics 9090) collide."""
        return next(_POD_IPS)

    def kubeconfig_for(self, namespace: str, account: str | None) -> Path:
        """A kubeconfig whose token is a service account's, in place of the mounted token
        ("Configure Service Accounts for Pods": a pod authenticates as
        system:serviceaccount:NAMESPACE:NAME, ``default`` unless it names one); the API
        server authorizes its calls against RBAC (:mod:`support.sim_rbac`)."""
        account = account or "default"
        path = self.root / "tokens" / f"{namespace}.{account}.kubeconfig"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            text = self.kubeconfig.read_text().replace(
                "token: simulated", f"token: '{service_account_token(namespace, account)}'"
            )
            path.write_text(text)
        return path

    def runs_pod(self, pod: dict) -> bool:
        """Whether a kubelet has this pod (its deletion then waits for the containers)."""
        phase = (pod.get("status") or {}).get("phase")
        return pod["metadata"].get("uid") in self.runs and phase not in ("Succeeded", "Failed")

    def sync(self) -> None:
        """Starts pods newly bound to a node, stops pods being deleted, writes the DNS."""
        nodes = {
            n["metadata"]["name"]: n
            for n in self.api.store.list(self.api.store.resource("", "v1", "nodes"))
        }
        for pod in self.api.store.list(self.pods_res):
            uid = pod["metadata"]["uid"]
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or node not in nodes:
                continue
            run = self.runs.get(uid)
            if run is None:
                if pod["status"].get("phase") in ("Succeeded", "Failed") or pod["metadata"].get(
                    "deletionTimestamp"
                ):
                    if pod["metadata"].get("deletionTimestamp"):
                        self.api.finish_pod(pod)
                    continue
                run = self.runs[uid] = PodRun(self, pod)
                run.task = asyncio.ensure_future(run.run())
            if pod["metadata"].get("deletionTimestamp"):
                if run.task is not None and run.task.done():
                    self.api.finish_pod(pod)
                else:
                    run.stop(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        for uid in [
            u for u, r in self.runs.items() if r.task and r.task.done() and r.current() is None
        ]:
            shutil.rmtree(self.runs[uid].dir / "volumes", ignore_errors=True)
            del self.runs[uid]
        self.write_dns()

    def write_dns(self) -> None:
        """Cluster DNS: each Service's names -> the pod IP of a ready endpoint."""
        store = self.api.store
        names: dict[str, str] = {}
        pods = [
            p
            for p in store.list(self.pods_res)
            if pod_ready(p)
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("podIP")
        ]
        for svc in store.list(store.resource("", "v1", "services")):
            selector = (svc.get("spec") or {}).get("selector") or {}
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            for pod in pods:
                labels = pod["metadata"].get("labels") or {}
                if (
                    pod["metadata"]["namespace"] == ns
                    and selector
                    and all(labels.get(k) == v for k, v in selector.items())
                ):
                    for alias in (
                        f"{name}.{ns}",
                        f"{name}.{ns}.svc",
                        f"{name}.{ns}.svc.cluster.local",
                    ):
                        names[alias] = pod["status"]["podIP"]
                    break
        text = json.dumps(names, sort_keys=True)
        if self.dns_file.read_text() != text:
            tmp = self.dns_file.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.dns_file)

    def shut_down_node(self, node: str) -> None:
        """Graceful node shutdown (a Spot VM's preemption notice): the node turns NotReady,
        reason "node is shutting down", so that nothing new is scheduled onto it ("Graceful
        node shutdown"), and every pod on it gets DisruptionTarget and is stopped within
        min(its grace period, 15 s)."""
        nodes = self.api.store.resource("", "v1", "nodes")
        info = self.api.store.get(nodes, "", node)
        if info is not None:
            new = copy.deepcopy(info)
            for cond in (new.setdefault("status", {})).setdefault("conditions", []):
                if cond.get("type") == "Ready":
                    cond.update(
                        status="False",
                        reason="KubeletNotReady",
                        message="node is shutting down",
                        lastTransitionTime=now_rfc3339(),
                    )
            self.api._commit(nodes, info, new, "status")
        for pod in self.api.store.list(self.pods_res):
            if (pod.get("spec") or {}).get("nodeName") != node:
                continue
            run = self.runs.get(pod["metadata"]["uid"])
            if run is None:
                continue
            run.update(
                lambda p: set_pod_condition(
                    p,
                    "DisruptionTarget",
                    "True",
                    "TerminationByKubelet",
                    "Pod was terminated in response to imminent node shutdown.",
                )
            )
            grace = min(SHUTDOWN_GRACE_S, pod["spec"].get("terminationGracePeriodSeconds", 30))
            run.stop(grace, disrupted=True)

    async def stop_all(self) -> None:
        """Stops every process (the cluster is going away)."""
        for run in self.runs.values():
            run.stop(2)
        tasks = [r.task for r in self.runs.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        for run in self.runs.values():
            if run.proc is not None and run.proc.returncode is None:
                _signal_group(run.proc.pid, signal.SIGKILL)
