"""One pod on the tests' kubelet (:mod:`support.kubelet`): its containers run as local
processes, its status goes to the real API server through ``pods/status``.

What each rule models (kubernetes.io: "Pod Lifecycle", "Init Containers", "Container probes",
"Configure Liveness, Readiness and Startup Probes", "Termination of Pods", "Images",
"Determine the Reason for Pod Failure", "Pod conditions"):

- start: volumes first (a pod whose volume cannot be set up waits in ContainerCreating); then the
  sandbox: a pod IP (a loopback address of its own, :data:`POD_IPS`), condition
  PodReadyToStartContainers; then the init containers one at a time to completion, then the app
  containers together. Each container's image is pulled when it starts
  (:mod:`support.kubelet_images`): a failed pull leaves it waiting with ErrImagePull, then
  ImagePullBackOff while the pull backs off (10 s doubling to 300 s), and the pod Pending;
- exit: ``restartPolicy`` Always (and OnFailure after a failure) restarts the container: the
  first restart at once, then CrashLoopBackOff 10 s doubling to 5 min; ``restartCount`` and
  ``lastState`` as the kubelet keeps them. The terminated state has the exit code (128 + signal
  when killed), the reason (Completed, Error, OOMKilled) and the termination message;
- phase: Pending until every container has run, Running while one runs or restarts; once no
  container will run again, Succeeded if all exited 0, else Failed (also a pod stopped for its
  deletion: the kubelet makes it terminal before it goes, since Kubernetes 1.27);
- conditions: PodReadyToStartContainers, Initialized, ContainersReady, Ready (with readiness
  gates); others' conditions (PodScheduled, DisruptionTarget) are kept;
- probes: startup, then liveness and readiness (``httpGet``, ``tcpSocket``, ``exec``) at their
  periods and thresholds; a failed liveness probe kills the container with the probe's
  ``terminationGracePeriodSeconds``, else the pod's, and restarts it as its policy says;
- stop: SIGTERM to each container's process group, SIGKILL when the grace period runs out (the
  pod's deletion grace period, or what node shutdown allows); then the final status, then
  ``DELETE`` with grace 0 if the pod is being deleted (the kubelet's last word on a pod);
- memory: over ``limits.memory`` the process group is killed with SIGKILL and the reason is
  OOMKilled, as the cgroup OOM killer does;
- events about the pod, as the kubelet records them: FailedMount, Pulled, Failed and BackOff
  (pulls), Started, Killing, Unhealthy, BackOff (restarts).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import fcntl
import os
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import aiohttp

from support.container_processes import (
    CRASH_BACKOFF_CAP_S,
    CRASH_BACKOFF_S,
    die_with_parent,
    group_rss,
    memory_limit,
    signal_group,
    terminated_state,
    termination_message,
)
from support.kube_http import ApiError, transient
from support.kubelet_images import PullError, normalize
from support.kubelet_volumes import (
    SERVICE_ACCOUNT_DIR,
    MountPending,
    PodVolumes,
    environment,
    expand,
    map_path,
    service_account_kubeconfig,
)

if TYPE_CHECKING:
    from support.kubelet import NodeAgent


def _pod_ip_block() -> int:
    """The second octet of this process's pod addresses (127.B.x.y): the first of 1-99 that
    no other test process on the machine holds, held through an exclusive lock on a file in
    the temporary directory for as long as this process lives. Two suites run at once (two
    worktrees, a slow suite beside CI) otherwise hand out the same addresses, and two pods'
    servers then fight over one address and port. (127.100.x.x are the nodes'.)"""
    folder = Path(tempfile.gettempdir()) / "seedrl-pod-ips"
    folder.mkdir(exist_ok=True)
    for block in range(1, 100):
        handle = open(folder / f"{block}.lock", "w")  # noqa: SIM115 - held till exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _HELD.append(handle)
        return block
    raise RuntimeError(f"every pod address block of {folder} is held by another process")


_HELD: list[Any] = []
#: This process's block of pod addresses (127.POD_IP_BLOCK.x.y).
POD_IP_BLOCK = _pod_ip_block()
#: Pod addresses: loopback addresses no other cluster of the tests hands out, in this
#: process or another (:func:`_pod_ip_block`).
POD_IPS = iter(f"127.{POD_IP_BLOCK}.{i // 250}.{i % 250 + 2}" for i in range(60000))
#: The image pull back-off: 10 s doubling to 300 s (the kubelet's image backoff).
PULL_BACKOFF_S, PULL_BACKOFF_CAP_S = 10.0, 300.0
#: How long ErrImagePull shows before the kubelet's next sync reports ImagePullBackOff.
ERR_IMAGE_PULL_S = 1.0
#: The kubelet's own conditions; others' (PodScheduled, DisruptionTarget...) are kept.
OWN_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


#: How often the status manager compares each pod's status in the API with its own (the
#: kubelet's ``syncBatch`` period).
STATUS_SYNC_S = 10.0


def now_rfc3339() -> str:
    """Now, as the API's timestamps."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Container:
    """What the kubelet knows of one container."""

    def __init__(self, spec: dict, directory: Path, init: bool):
        self.spec = spec
        self.name: str = spec["name"]
        self.init = init
        self.log = directory / f"{self.name}.log"
        self.message_file = directory / f"{self.name}.termination-log"
        self.restarts = 0
        self.state: dict = {
            "waiting": {"reason": "PodInitializing" if init else "ContainerCreating"}
        }
        self.last: dict = {}
        self.ready = False
        self.started = False
        self.image_id = ""
        self.container_id = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.killed_reason: str | None = None

    def status(self) -> dict:
        """Its entry in containerStatuses."""
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": self.image_id,
            "ready": self.ready,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last,
        }
        if not self.init:
            out["started"] = self.started
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    def succeeded(self) -> bool:
        """Whether it has terminated with exit code 0."""
        return (self.state.get("terminated") or {}).get("exitCode") == 0


def _condition(
    old: list[dict], kind: str, status: str, reason: str = "", message: str = ""
) -> dict:
    previous = next((c for c in old if c.get("type") == kind), None)
    changed = previous is None or previous.get("status") != status
    cond = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339() if changed else previous.get("lastTransitionTime"),
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


class PodWorker:
    """Runs one pod bound to a node until no container of it will run again."""

    def __init__(self, node: NodeAgent, pod: dict):
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"
        self.dir = node.kubelet.root / "pods" / self.uid
        self.dir.mkdir(parents=True, exist_ok=True)
        spec = pod["spec"]
        self.policy: str = spec.get("restartPolicy", "Always")
        self.init = [Container(c, self.dir, True) for c in spec.get("initContainers") or []]
        self.apps = [Container(c, self.dir, False) for c in spec["containers"]]
        if self.init:
            for app in self.apps:
                app.state = {"waiting": {"reason": "PodInitializing"}}
        self.ip = ""
        self.start_time = now_rfc3339()
        self.initialized = not self.init
        self.init_failed = False
        self.final = False
        self.shutdown_message = ""
        self.stopping = asyncio.Event()
        self.deadline: float | None = None
        # Set (and replaced by a fresh one) whenever the deadline moves, so that every
        # container being stopped wakes up to it.
        self.deadline_moved = asyncio.Event()
        self.dirty = asyncio.Event()
        self.done = asyncio.Event()
        self.volumes = PodVolumes(node.http, pod, self.dir, node.dir, node.kubelet.attachments)
        self.task: asyncio.Task | None = None

    # -- what the node tells it -----------------------------------------------------------

    def start(self) -> None:
        """Starts running the pod."""
        self.task = asyncio.ensure_future(self.run())

    def stop(self, grace: float, shutdown_message: str = "") -> None:
        """Stops the pod's containers: SIGTERM now, SIGKILL after ``grace`` seconds (a shorter
        grace given later wins, as a second deletion with a smaller grace period does)."""
        if shutdown_message:
            self.shutdown_message = shutdown_message
        deadline = time.monotonic() + max(0.0, grace)
        if self.deadline is None or deadline < self.deadline:
            self.deadline = deadline
            moved, self.deadline_moved = self.deadline_moved, asyncio.Event()
            moved.set()
        self.stopping.set()
        self.dirty.set()

    def log(self, container: str | None = None) -> str:
        """The log of a container (the first app container by default)."""
        chosen = next((c for c in [*self.init, *self.apps] if c.name == container), self.apps[0])
        try:
            return chosen.log.read_text(errors="replace")
        except OSError:
            return ""

    def event(self, c: Container | None, kind: str, reason: str, message: str) -> None:
        """Records an Event about the pod (or one of its containers), as the kubelet's event
        recorder does; best effort, as there (a refused Event is dropped)."""
        now = now_rfc3339()
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }
        if c is not None:
            field = "initContainers" if c.init else "containers"
            involved["fieldPath"] = f"spec.{field}{{{c.name}}}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.name}.", "namespace": self.namespace},
            "involvedObject": involved,
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": self.node.name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node.name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

        async def post() -> None:
            try:
                await self.node.http.request(
                    "POST", f"/api/v1/namespaces/{self.namespace}/events", event
                )
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if transient(exc, 1):  # the API server away or starting: dropped as well
                    self.node.kubelet.unavailable += 1
                else:
                    self.node.kubelet.dropped_events += 1

        asyncio.ensure_future(post())

    # -- the pod's life --------------------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.ensure_future(self._status_writer())
        self.dirty.set()
        try:
            await self._run()
        except Exception as exc:  # noqa: BLE001 - one broken pod must not stop the node
            self.node.kubelet.errors.append(f"{self.namespace}/{self.name}: {exc!r}")
        finally:
            for c in [*self.init, *self.apps]:
                if c.proc is not None and c.proc.returncode is None:
                    signal_group(c.proc.pid, signal.SIGKILL)
                    await c.proc.wait()
            self.volumes.release()
            self.final = True
            self.dirty.set()
            try:
                await asyncio.wait_for(writer, 30)
            except asyncio.TimeoutError:
                writer.cancel()
            if self.pod["metadata"].get("deletionTimestamp"):
                await self.node.finish_deletion(self.pod)
            self.done.set()

    async def _run(self) -> None:
        failed_mount = False
        while True:  # volumes: FailedMount until they can be set up
            try:
                await self.volumes.mount(self.ip or "", self.node.spec_ip)
                break
            except MountPending as exc:
                if not failed_mount:
                    self.event(None, "Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}")
                failed_mount = True
                for c in self.apps:
                    if not self.init:
                        c.state = {
                            "waiting": {
                                "reason": "ContainerCreating",
                                "message": f"MountVolume.SetUp failed: {exc}",
                            }
                        }
                self.dirty.set()
                if await self._wait_stop(1.0):
                    return
        self.ip = next(POD_IPS)
        self.dirty.set()
        refresher = asyncio.ensure_future(self._refresh_tokens())
        reconciler = asyncio.ensure_future(self._reconcile_status())
        try:
            for c in self.init:
                if not await self._init_container(c):
                    return
            self.initialized = True
            self.dirty.set()
            await asyncio.gather(*(self._app_container(c) for c in self.apps))
        finally:
            refresher.cancel()
            reconciler.cancel()

    async def _reconcile_status(self) -> None:
        """The status manager's periodic sync (``syncBatch``, every 10 s): the pod's status as
        the API server has it is compared with the kubelet's and written again where someone
        else changed it, e.g. the node lifecycle controller marking the pods of a node it took
        for lost Ready=False (``MarkPodsNotReady``) while the node was in fact fine."""
        while True:
            await asyncio.sleep(STATUS_SYNC_S)
            self.dirty.set()

    async def _wait_stop(self, seconds: float) -> bool:
        """Waits ``seconds`` or until the pod is stopped; True when stopped."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    async def _refresh_tokens(self) -> None:
        ttl = self.volumes.token_ttl()
        if ttl is None:
            return
        failures = 0
        while True:
            # The kubelet renews at 80% of a token's life; one it could not renew, again soon.
            await asyncio.sleep(min(1.0 * failures, 0.1 * ttl) if failures else 0.8 * ttl)
            try:
                await self.volumes.refresh()
                failures = 0
            except (ApiError, MountPending, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                failures += 1
                if not transient(exc, failures):
                    self.node.kubelet.errors.append(f"{self.namespace}/{self.name}: token: {exc}")

    async def _init_container(self, c: Container) -> bool:
        backoff: float | None = None
        while True:
            if not await self._pull(c):
                return False
            ran = await self._once(c)
            if ran is None:
                return False
            code, term = ran
            if code == 0 and not self.stopping.is_set():
                c.state, c.ready = {"terminated": term}, True
                self.dirty.set()
                return True
            if code == 0 or self.policy == "Never" or self.stopping.is_set():
                c.state = {"terminated": term}
                self.init_failed = code != 0
                self.dirty.set()
                return False
            backoff = await self._back_off(c, term, backoff)
            if backoff is None:
                return False

    async def _app_container(self, c: Container) -> None:
        backoff: float | None = None
        while not self.stopping.is_set():
            if not await self._pull(c):
                return
            ran = await self._once(c)
            if ran is None:
                return
            code, term = ran
            again = not self.stopping.is_set() and (
                self.policy == "Always" or (self.policy == "OnFailure" and code != 0)
            )
            if not again:
                c.state = {"terminated": term}
                self.dirty.set()
                return
            backoff = await self._back_off(c, term, backoff)
            if backoff is None:
                return

    async def _back_off(self, c: Container, term: dict, backoff: float | None) -> float | None:
        """After an exit that restarts: the first restart at once, then CrashLoopBackOff for
        10 s doubling to 5 min. Returns the next back-off, None when the pod stopped meanwhile
        (the container then stays terminated)."""
        c.restarts += 1
        c.last = {"terminated": term}
        c.ready = c.started = False
        if backoff is None:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
            self.dirty.set()
            return CRASH_BACKOFF_S
        self.event(c, "Warning", "BackOff", "Back-off restarting failed container")
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {backoff:.0f}s restarting failed container={c.name} "
                f"pod={self.name}_{self.namespace}({self.uid})",
            }
        }
        self.dirty.set()
        if await self._wait_stop(backoff):
            c.state, c.last = {"terminated": term}, {}
            c.restarts -= 1
            return None
        return min(CRASH_BACKOFF_CAP_S, backoff * 2)

    async def _pull(self, c: Container) -> bool:
        """Pulls the container's image as its policy says; False when the pod stopped while
        the pull backed off."""
        image = c.spec.get("image", "")
        policy = c.spec.get("imagePullPolicy") or (
            "Always" if normalize(image).endswith(":latest") else "IfNotPresent"
        )
        node = self.node
        backoff = PULL_BACKOFF_S
        while not self.stopping.is_set():
            if policy != "Always" and normalize(image) in node.images:
                break
            try:
                if policy == "Never":
                    raise PullError(
                        f'Container image "{image}" is not present with pull policy of Never'
                    )
                node.kubelet.registries.pull(image, await self._pull_secrets())
            except PullError as exc:
                reason = "ErrImageNeverPull" if policy == "Never" else "ErrImagePull"
                message = (
                    str(exc) if policy == "Never" else f'Failed to pull image "{image}": {exc}'
                )
                c.state = {"waiting": {"reason": reason, "message": message}}
                self.event(c, "Warning", "Failed", message)
                self.dirty.set()
                if await self._wait_stop(ERR_IMAGE_PULL_S):
                    return False
                if policy == "Never":
                    continue
                c.state = {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{image}": ErrImagePull: {exc}',
                    }
                }
                self.event(c, "Normal", "BackOff", f'Back-off pulling image "{image}"')
                self.dirty.set()
                if await self._wait_stop(backoff):
                    return False
                backoff = min(PULL_BACKOFF_CAP_S, backoff * 2)
                continue
            node.images.add(normalize(image))
            self.event(c, "Normal", "Pulled", f'Successfully pulled image "{image}"')
            break
        c.image_id = normalize(image)
        return not self.stopping.is_set()

    async def _pull_secrets(self) -> list[dict]:
        found = []
        for ref in self.pod["spec"].get("imagePullSecrets") or []:
            try:
                secret = await self.node.http.get_or_none(
                    f"/api/v1/namespaces/{self.namespace}/secrets/{ref['name']}"
                )
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # Unreadable (refused, or the API server away): the kubelet warns "Unable to
                # retrieve some image pull secrets" and pulls without it.
                if getattr(exc, "status", 0) != 403 and not transient(exc, 1):
                    raise
                secret = None
            if secret is not None:  # a missing one: the kubelet warns and pulls without it
                found.append(secret)
        return found

    # -- one run of a container process ----------------------------------------------------

    async def _process(self, c: Container) -> tuple[list[str], dict[str, str], str]:
        """The container's argv, environment and working directory on this machine."""
        kubelet = self.node.kubelet
        mounts = sorted(
            [
                (
                    m["mountPath"],
                    self.volumes.paths[m["name"]] / m.get("subPath", ""),
                )
                for m in c.spec.get("volumeMounts") or []
                if m["name"] in self.volumes.paths
            ]
            + [(c.spec.get("terminationMessagePath", "/dev/termination-log"), c.message_file)],
            key=lambda m: -len(m[0]),
        )
        declared = await environment(self.node.http, self.pod, c.spec, self.ip, self.node.spec_ip)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOSTNAME": self.name,
            "PYTHONPATH": str(kubelet.site_dir),
            "SIM_POD_IP": self.ip,
            "SIM_POD_NAMESPACE": self.namespace,
            "SIM_DNS_FILE": str(kubelet.dns_file),
            # The `kubernetes` Service's address as the kubelet publishes it, here the loopback
            # relay that plays kube-proxy for it: in-cluster clients read these two.
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(kubelet.service_port),
            **kubelet.node_env,
        }
        for mount, host in mounts:
            if mount.rstrip("/") == SERVICE_ACCOUNT_DIR:
                env["KUBECONFIG"] = str(
                    service_account_kubeconfig(
                        self.dir / f"{c.name}.kubeconfig",
                        host,
                        kubelet.service_server,
                        self.namespace,
                    )
                )
        env.update({k: map_path(v, mounts) for k, v in declared.items()})
        command = [*(c.spec.get("command") or kubelet.registries.entrypoint(c.spec["image"]))]
        command += c.spec.get("args") or []
        argv: list[str] = []
        for arg in command:
            mapped, service = self._services(map_path(expand(arg, declared), mounts))
            argv.append(mapped)
            if service and "--tls-ca" in command and "--tls-server-name" not in command:
                argv += ["--tls-server-name", service]
        if argv and argv[0] in ("python", "python3"):
            argv[0] = kubelet.python
        workdir = map_path(c.spec.get("workingDir") or "", mounts)
        if not workdir or not Path(workdir).is_dir():
            workdir = str(self.dir)
        return argv, env, workdir

    def _services(self, value: str) -> tuple[str, str | None]:
        """``value`` with a ``svc[.ns[.svc[.cluster.local]]]:port`` mapped to
        ``127.0.0.1:targetPort`` (gRPC's C core resolves and binds on its own, past the
        sitecustomize), and the name it had (None when none was mapped)."""
        found = None
        for svc in self.node.kubelet.dns.services(self.namespace):
            name = svc["metadata"]["name"]
            pattern = (
                rf"\b({re.escape(name)}(\.{re.escape(self.namespace)}"
                rf"(\.svc(\.cluster\.local)?)?)?):(\d+)\b"
            )
            match = re.search(pattern, value)
            if match:
                found = match.group(1)
                value = re.sub(pattern, _target_address(svc), value)
        return value, found

    async def _once(self, c: Container) -> tuple[int, dict] | None:
        """Runs the container's process once; returns its exit code and terminated state
        (None when the pod stopped before it could start). A variable whose ConfigMap or
        Secret cannot be read keeps it waiting in CreateContainerConfigError."""
        while True:
            try:
                argv, env, workdir = await self._process(c)
                break
            except MountPending as exc:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self.dirty.set()
                if await self._wait_stop(1.0):
                    return None
        started = now_rfc3339()
        c.killed_reason = None
        with open(c.log, "ab") as log:
            c.proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                cwd=workdir,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        c.container_id = f"containerd://{self.uid[:8]}-{c.name}-{c.proc.pid}"
        c.state = {"running": {"startedAt": started}}
        c.ready = c.started = False
        self.event(c, "Normal", "Started", f"Started container {c.name}")
        self.dirty.set()
        tasks = [asyncio.ensure_future(self._stop_when_asked(c))]
        if not c.init:
            tasks.append(asyncio.ensure_future(self._probe(c)))
        limit = memory_limit(c.spec)
        if limit:
            tasks.append(asyncio.ensure_future(self._watch_memory(c, limit)))
        try:
            code = await c.proc.wait()
        finally:
            for task in tasks:
                task.cancel()
        signal_group(c.proc.pid, signal.SIGKILL)  # what it left behind
        if code < 0:
            code = 128 - code
        c.ready = c.started = False
        reason = c.killed_reason or ("Completed" if code == 0 else "Error")
        message = termination_message(c.spec, code, c.message_file, c.log)
        return code, terminated_state(code, reason, started, now_rfc3339(), message)

    async def _stop_when_asked(self, c: Container) -> None:
        await self.stopping.wait()
        await self._terminate(c, lambda: self.deadline)

    async def _terminate(self, c: Container, deadline) -> None:
        """SIGTERM, then SIGKILL at ``deadline()`` (re-read when the pod's deadline moves)."""
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        self.event(c, "Normal", "Killing", f"Stopping container {c.name}")
        signal_group(proc.pid, signal.SIGTERM)
        waiting = asyncio.ensure_future(proc.wait())
        try:
            while not waiting.done():
                remaining = (deadline() or 0) - time.monotonic()
                if remaining <= 0:
                    signal_group(proc.pid, signal.SIGKILL)
                    await waiting
                    break
                moved = asyncio.ensure_future(self.deadline_moved.wait())
                await asyncio.wait(
                    {waiting, moved}, timeout=remaining, return_when="FIRST_COMPLETED"
                )
                moved.cancel()
        finally:
            if not waiting.done():
                waiting.cancel()

    async def _watch_memory(self, c: Container, limit: float) -> None:
        while c.proc is not None and c.proc.returncode is None:
            if group_rss(c.proc.pid) > limit:
                c.killed_reason = "OOMKilled"
                signal_group(c.proc.pid, signal.SIGKILL)
                return
            await asyncio.sleep(0.5)

    async def _check(self, c: Container, probe: dict) -> bool:
        """One probe: an HTTP GET answered 200-399, a TCP connect, or a command exiting 0."""
        ports = {p.get("name"): p["containerPort"] for p in c.spec.get("ports") or []}
        timeout = probe.get("timeoutSeconds", 1)
        try:
            if "httpGet" in probe:
                port = probe["httpGet"]["port"]
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.ip, int(ports.get(port, port))), timeout
                )
                writer.write(
                    f"GET {probe['httpGet'].get('path', '/')} HTTP/1.0\r\n"
                    f"Host: {self.ip}\r\n\r\n".encode()
                )
                line = await asyncio.wait_for(reader.readline(), timeout)
                writer.close()
                return 200 <= int(line.split()[1]) < 400
            if "tcpSocket" in probe:
                port = probe["tcpSocket"]["port"]
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.ip, int(ports.get(port, port))), timeout
                )
                writer.close()
                return True
            if "exec" in probe:
                _, env, workdir = await self._process(c)
                command = list(probe["exec"]["command"])
                if command and command[0] in ("python", "python3"):
                    command[0] = self.node.kubelet.python
                proc = await asyncio.create_subprocess_exec(
                    *command,
                    env=env,
                    cwd=workdir,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                )
                try:
                    return await asyncio.wait_for(proc.wait(), timeout) == 0
                except asyncio.TimeoutError:
                    signal_group(proc.pid, signal.SIGKILL)
                    await proc.wait()
                    return False
        except (OSError, asyncio.TimeoutError, ValueError, IndexError):
            return False
        return True

    async def _probe(self, c: Container) -> None:
        def set_ready(ready: bool) -> None:
            if c.ready != ready or not c.started:
                c.ready, c.started = ready, True
                self.dirty.set()

        startup = c.spec.get("startupProbe")
        if startup:
            failures = 0
            await asyncio.sleep(startup.get("initialDelaySeconds", 0))
            while not await self._check(c, startup):
                failures += 1
                if failures >= startup.get("failureThreshold", 3):
                    await self._kill_unhealthy(c, startup)
                    return
                await asyncio.sleep(startup.get("periodSeconds", 10))
        liveness, readiness = c.spec.get("livenessProbe"), c.spec.get("readinessProbe")
        c.started = True
        set_ready(readiness is None)
        begun = time.monotonic()
        next_live = begun + (liveness or {}).get("initialDelaySeconds", 0)
        next_ready = begun + (readiness or {}).get("initialDelaySeconds", 0)
        live_failures = ready_failures = ready_successes = 0
        while True:
            now = time.monotonic()
            if readiness is not None and now >= next_ready:
                next_ready = now + readiness.get("periodSeconds", 10)
                if await self._check(c, readiness):
                    ready_failures, ready_successes = 0, ready_successes + 1
                    if ready_successes >= readiness.get("successThreshold", 1):
                        set_ready(True)
                else:
                    ready_failures, ready_successes = ready_failures + 1, 0
                    if ready_failures >= readiness.get("failureThreshold", 3) or not c.ready:
                        set_ready(False)
            if liveness is not None and now >= next_live:
                next_live = now + liveness.get("periodSeconds", 10)
                if await self._check(c, liveness):
                    live_failures = 0
                else:
                    live_failures += 1
                    if live_failures >= liveness.get("failureThreshold", 3):
                        await self._kill_unhealthy(c, liveness)
                        return
            wake = min(
                next_ready if readiness is not None else float("inf"),
                next_live if liveness is not None else float("inf"),
            )
            await asyncio.sleep(max(0.05, min(wake - time.monotonic(), 1.0)))

    async def _kill_unhealthy(self, c: Container, probe: dict) -> None:
        """A failed liveness or startup probe: the container is killed with the probe's
        ``terminationGracePeriodSeconds``, else the pod's."""
        kind = "Liveness" if probe is c.spec.get("livenessProbe") else "Startup"
        self.event(c, "Warning", "Unhealthy", f"{kind} probe failed")
        grace = probe.get(
            "terminationGracePeriodSeconds",
            self.pod["spec"].get("terminationGracePeriodSeconds", 30),
        )
        until = time.monotonic() + float(grace)
        await self._terminate(c, lambda: min(until, self.deadline or until))

    # -- status ----------------------------------------------------------------------------

    def phase(self) -> str:
        """The pod's phase from its containers ("Pod Lifecycle: Pod phase")."""
        if self.shutdown_message and self.final:
            return "Failed"
        if self.init_failed:
            return "Failed"
        if self.final:
            return (
                "Succeeded"
                if self.initialized and all(c.succeeded() for c in self.apps)
                else "Failed"
            )
        if not self.initialized:
            return "Pending"
        if any("waiting" in c.state and not c.last for c in self.apps):
            return "Pending"
        return "Running"

    def status(self, old: dict) -> dict:
        """The pod's status as the kubelet reports it, on top of the stored one."""
        status = copy.deepcopy(old)
        conditions = status.get("conditions") or []
        phase = self.phase()
        status["phase"] = phase
        status["startTime"] = status.get("startTime") or self.start_time
        status["hostIP"] = self.node.spec_ip
        status["hostIPs"] = [{"ip": self.node.spec_ip}]
        if self.ip:
            status["podIP"], status["podIPs"] = self.ip, [{"ip": self.ip}]
        if self.init:
            status["initContainerStatuses"] = [c.status() for c in self.init]
        status["containerStatuses"] = [c.status() for c in self.apps]
        terminal = phase in ("Succeeded", "Failed")
        incomplete = [c.name for c in self.init if not c.succeeded()]
        unready = [c.name for c in self.apps if not c.ready]
        own = [
            _condition(
                conditions,
                "PodReadyToStartContainers",
                "True" if self.ip and not terminal else "False",
            ),
            _condition(conditions, "Initialized", "True")
            if self.initialized or not incomplete
            else _condition(
                conditions,
                "Initialized",
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(incomplete)}]",
            ),
        ]
        gates = [g["conditionType"] for g in self.pod["spec"].get("readinessGates") or []]
        gates_ok = all(
            any(c.get("type") == g and c.get("status") == "True" for c in conditions) for g in gates
        )
        for kind in ("ContainersReady", "Ready"):
            if terminal:
                reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
                own.append(_condition(conditions, kind, "False", reason))
            elif unready:
                own.append(
                    _condition(
                        conditions,
                        kind,
                        "False",
                        "ContainersNotReady",
                        f"containers with unready status: [{' '.join(unready)}]",
                    )
                )
            elif kind == "Ready" and not gates_ok:
                own.append(_condition(conditions, kind, "False", "ReadinessGatesNotReady"))
            else:
                own.append(_condition(conditions, kind, "True"))
        kept = [c for c in conditions if c.get("type") not in OWN_CONDITIONS]
        if self.shutdown_message:
            kept = [c for c in kept if c.get("type") != "DisruptionTarget"]
            kept.append(
                _condition(
                    conditions,
                    "DisruptionTarget",
                    "True",
                    "TerminationByKubelet",
                    self.shutdown_message,
                )
            )
            if terminal:
                status["reason"], status["message"] = "Terminated", self.shutdown_message
        status["conditions"] = kept + own
        return status

    async def _status_writer(self) -> None:
        """The status manager: writes the latest status whenever it changed, last the final
        one; stops when the pod is gone."""
        failures = 0
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            final = self.final
            try:
                if not await self._write_status():
                    return
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # 403: the Node authorizer's graph, fed by the API server's own watch, may not
                # link a just-bound pod to this node yet; the API server may be away. The
                # kubelet's status manager retries.
                failures += 1
                if getattr(exc, "status", 0) == 403 and self.uid not in self.node.workers:
                    # Gone from the API (the node's watch said so): the Node authorizer no
                    # longer links it to this node, and the status manager forgets it.
                    return
                if not transient(exc, failures):
                    self.node.kubelet.errors.append(f"{self.namespace}/{self.name}: status: {exc}")
                else:
                    self.node.kubelet.unavailable += 1
                await asyncio.sleep(min(0.5 * failures, 5.0))
                self.dirty.set()
                continue
            failures = 0
            if final:
                return

    async def _write_status(self) -> bool:
        """PUT pods/status on a fresh read (again on a conflict); False when the pod is gone."""
        for _ in range(20):
            pod = await self.node.http.get_or_none(self.path)
            if pod is None or pod["metadata"]["uid"] != self.uid:
                return False
            self.pod = pod
            old = pod.get("status") or {}
            if old.get("phase") in ("Succeeded", "Failed") and self.phase() != old["phase"]:
                return True  # terminal already: a phase never goes back
            new = self.status(old)
            if _same(new, old):
                return True
            pod["status"] = new
            try:
                await self.node.http.request("PUT", self.path + "/status", pod)
                return True
            except ApiError as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
        return True


def _same(new: dict, old: dict) -> bool:
    def strip(status: dict) -> dict:
        out = copy.deepcopy(status)
        for cond in out.get("conditions") or []:
            cond.pop("lastTransitionTime", None)
            cond.pop("lastProbeTime", None)
        return out

    return strip(new) == strip(old)


def _target_address(svc: dict) -> Callable[[re.Match], str]:
    return lambda m: f"127.0.0.1:{_target(svc, m.group(5))}"


def _target(svc: dict, port: str) -> str:
    for entry in (svc.get("spec") or {}).get("ports") or []:
        if str(entry.get("port")) == port:
            target = entry.get("targetPort", entry["port"])
            return str(target if isinstance(target, int) else entry["port"])
    return port


__all__ = ["POD_IPS", "POD_IP_BLOCK", "Container", "PodWorker", "now_rfc3339"]
