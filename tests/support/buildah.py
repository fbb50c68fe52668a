"""The container images built and run for real, with buildah, where no Docker engine runs.

``make test-images`` builds the Dockerfiles at the repository root with Debian's buildah and runs
commands inside the built images as the pods would (UID 1000, the pod's mounts, a read-only
root filesystem). What this module holds, measured on the CI machines (see ../shared/NOTES.md):

- **A local base image.** No container registry is reachable, so the pinned upstream
  ``PYTHON_IMAGE`` cannot be pulled; the builds take a Debian bookworm root filesystem with
  python3 made by ``mmdebstrap`` instead (the production default stays the pinned upstream
  image). The tarball is cached under :data:`CACHE` and named by a hash of what makes it.
- **One store, cached.** buildah's image store lives under :data:`CACHE` too (``--root``), so
  layers built once (the TensorFlow-sized ones above all) are reused by the next run
  (``--layers``), and pip's cache mount (``RUN --mount=type=cache``) keeps downloads between
  builds (buildah keeps cache mounts under ``$TMPDIR``, set to :data:`CACHE`). The store uses
  the overlay driver where the kernel allows it and falls back to vfs (every layer a full
  copy) where it does not.
- **The traps.** ``--isolation chroot`` (no nested user namespaces or cgroups here);
  ``--network host``; the machine's CA bundle mounted into every build step so that pip can
  verify the package index through this network's TLS; ``buildah run`` works where ``podman
  run`` does not.

Every command runs under ``nice -n 10``: builds are CPU- and disk-heavy on shared machines.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where the base image's tarball, buildah's store and pip's cache mount are kept between
#: runs (outside the repository; ``make clean`` leaves it alone).
CACHE = Path(os.environ.get("SEEDRL_IMAGE_CACHE") or Path.home() / ".cache" / "seedrl" / "images")
#: The machine's CA bundle, mounted read-only into every build step (see the module doc).
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: What the local base image is made of: the Debian suite and the packages on top of minbase,
#: as close to the upstream python image as Debian gets: python-is-python3 (the Dockerfiles run
#: ``python``) and libpython3.11 (upstream Python is built shared; Google Research Football's
#: engine links libpython3.11.so.1.0).
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "libpython3.11", "ca-certificates")
#: Host paths never bound read-only over the container's root: the kernel's and the runtime's
#: own, and /tmp, an emptyDir in the pods.
_NOT_READ_ONLY = {"proc", "sys", "dev", "run", "tmp", "var"}

#: Where a container's termination message folder is mounted (:meth:`Pod._runtime`).
TERMINATION_DIR = "/termination"


class BuildahError(RuntimeError):
    """A buildah (or mmdebstrap) command failed; the message ends with its output's tail."""


def _nice(argv: Sequence[str]) -> list[str]:
    return ["nice", "-n", "10", *argv]


class Store:
    """buildah with its image store under ``root``: the driver is chosen once and recorded.

    Args:
      root: the store's folder (``--root``; the run state goes beside it).
      log_dir: where each build's full output is written.
    """

    def __init__(self, root: Path = CACHE / "store", log_dir: Path | None = None):
        self.root = Path(root)
        self.log_dir = Path(log_dir) if log_dir else self.root.parent / "logs"
        self.tmp = self.root.parent / "tmp"
        self.driver = self._driver()

    # -- plumbing ------------------------------------------------------------------------------

    def _global(self, driver: str | None = None) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "run"),
            "--storage-driver",
            driver or self.driver,
        ]

    def env(self) -> dict[str, str]:
        """The environment buildah runs with: its cache mounts and temporary files under the
        cache, so that pip's cache survives between runs."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "TMPDIR": str(self.tmp), "BUILDAH_ISOLATION": "chroot"}

    def buildah(
        self, *args: str, timeout: float = 600, driver: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Runs one buildah command on this store and returns it (output captured)."""
        proc = subprocess.run(
            _nice([*self._global(driver), *args]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and proc.returncode != 0:
            raise BuildahError(
                f"buildah {' '.join(args)} exited {proc.returncode}:\n"
                f"{(proc.stdout + proc.stderr)[-4000:]}"
            )
        return proc

    def _driver(self) -> str:
        """overlay where a container of it can be mounted here, else vfs; recorded in the store
        (a store cannot change driver)."""
        record = self.root / "driver"
        if record.exists():
            return record.read_text().strip()
        self.root.mkdir(parents=True, exist_ok=True)
        chosen = "vfs"
        probe = self.buildah("from", "scratch", driver="overlay", check=False, timeout=120)
        if probe.returncode == 0:
            name = probe.stdout.strip().splitlines()[-1]
            mounted = self.buildah("mount", name, driver="overlay", check=False, timeout=120)
            self.buildah("rm", name, driver="overlay", check=False, timeout=120)
            if mounted.returncode == 0:
                chosen = "overlay"
        if chosen == "vfs":
            shutil.rmtree(self.root / "storage", ignore_errors=True)
            shutil.rmtree(self.root / "run", ignore_errors=True)
        record.write_text(chosen + "\n")
        return chosen

    # -- images --------------------------------------------------------------------------------

    def image_exists(self, image: str) -> bool:
        """Whether the store holds ``image``."""
        return self.buildah("inspect", "--type", "image", image, check=False).returncode == 0

    def ensure_base(self) -> str:
        """The local base image (made, and its tarball cached, on first use); returns its name.

        The tarball is the expensive part (mmdebstrap downloads and unpacks ~100 packages);
        the image is made from it with ``buildah add``, which unpacks a local tar archive.
        """
        recipe = f"{BASE_SUITE} minbase {' '.join(BASE_PACKAGES)}"
        digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
        image = f"localhost/seedrl-test-base:{BASE_SUITE}-{digest}"
        if self.image_exists(image):
            return image
        tarball = self.root.parent / f"base-{BASE_SUITE}-{digest}.tar"
        if not tarball.exists():
            tarball.parent.mkdir(parents=True, exist_ok=True)
            partial = tarball.with_suffix(".partial.tar")
            proc = subprocess.run(
                _nice(
                    [
                        "mmdebstrap",
                        "--variant=minbase",
                        "--include=" + ",".join(BASE_PACKAGES),
                        BASE_SUITE,
                        str(partial),
                    ]
                ),
                capture_output=True,
                text=True,
                timeout=1200,
            )
            if proc.returncode != 0:
                raise BuildahError(
                    f"mmdebstrap exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}"
                )
            partial.rename(tarball)
        name = self.buildah("from", "scratch").stdout.strip().splitlines()[-1]
        try:
            self.buildah("add", name, str(tarball), "/", timeout=900)
            self.buildah("config", "--cmd", "python3", "--env", "LANG=C.UTF-8", name)
            self.buildah("commit", "--rm", name, image, timeout=900)
        except BaseException:
            self.buildah("rm", name, check=False)
            raise
        return image

    def build(
        self,
        dockerfile: str,
        tag: str,
        build_args: Mapping[str, str] | None = None,
        contexts: Mapping[str, str] | None = None,
        timeout: float = 3600,
    ) -> float:
        """Builds ``dockerfile`` (at the repository root, with the root as context) as ``tag``
        from the local base image; returns the seconds it took.

        Raises:
          BuildahError: with the tail of the build's output (the whole of it is in
            ``log_dir``).
        """
        base = self.ensure_base()
        args = {"PYTHON_IMAGE": base, **(build_args or {})}
        argv = [
            "bud",
            "--layers",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "-v",
            f"{CA_BUNDLE}:{CA_BUNDLE}:ro",
            "-f",
            str(ROOT / dockerfile),
            "-t",
            tag,
        ]
        for key, value in args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in (contexts or {}).items():
            argv += ["--build-context", f"{key}={value}"]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / (tag.rsplit("/", 1)[-1].replace(":", "-") + ".log")
        start = time.monotonic()
        with open(log_path, "w") as log:
            proc = subprocess.run(
                _nice([*self._global(), *argv, str(ROOT)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                env=self.env(),
            )
        if proc.returncode != 0:
            raise BuildahError(
                f"building {dockerfile} as {tag} exited {proc.returncode} "
                f"(log: {log_path}):\n{log_path.read_text()[-6000:]}"
            )
        return time.monotonic() - start

    def config(self, image: str) -> dict:
        """The image's OCI config (user, entrypoint, env, working directory)."""
        import json

        out = self.buildah("inspect", "--type", "image", image).stdout
        return json.loads(out)["OCIv1"]["config"]

    @contextlib.contextmanager
    def container(
        self, image: str, hosts: Mapping[str, str] | None = None
    ) -> Iterator["Container"]:
        """A working container of ``image`` (removed on exit); ``hosts``: extra /etc/hosts
        entries, name -> address (a Service name for the actors, say)."""
        argv = ["from", "--pull=never"]
        for host, address in (hosts or {}).items():
            argv += ["--add-host", f"{host}:{address}"]
        name = self.buildah(*argv, image).stdout.strip().splitlines()[-1]
        try:
            mountpoint = Path(self.buildah("mount", name).stdout.strip().splitlines()[-1])
            yield Container(self, name, mountpoint)
        finally:
            self.buildah("umount", name, check=False)
            self.buildah("rm", name, check=False)


class Container:
    """A working container that commands run in with ``buildah run``, as a pod's would.

    Args:
      store: the store holding it.
      name: the container's name.
      mountpoint: where its root filesystem is mounted on this machine.
    """

    def __init__(self, store: Store, name: str, mountpoint: Path):
        self.store = store
        self.name = name
        self.mountpoint = mountpoint

    def argv(
        self,
        command: Sequence[str],
        *,
        user: str = "1000:1000",
        env: Mapping[str, str] | None = None,
        volumes: Sequence[tuple[str | Path, str, bool]] = (),
        read_only_root: bool = True,
    ) -> list[str]:
        """The ``buildah run`` command line for ``command``.

        Args:
          user: ``uid:gid`` to run as (the pods' 1000 by default).
          env: variables set for the command, on top of the image's.
          volumes: (host path, container path, read_only) bind mounts: the pod's volumes.
          read_only_root: bind every top-level folder of the image read-only over itself, as
            the pods' ``readOnlyRootFilesystem`` does (buildah run has no such flag); /tmp and
            the volumes stay writable.
        """
        argv = [
            *self.store._global(),
            "run",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--user",
            user,
        ]
        targets = []
        for _, path, _ in volumes:
            # Mount points are resolved inside the container's root, as runc does (buildah's
            # chroot isolation silently skips a mount whose path crosses a symbolic link, such
            # as /var/run -> /run), and made before the folders above them turn read-only.
            resolved = self.resolve(path)
            resolved.mkdir(parents=True, exist_ok=True)
            targets.append("/" + str(resolved.relative_to(self.mountpoint)))
        if read_only_root:
            for entry in sorted(self.mountpoint.iterdir()):
                # A volume mounted at a top-level folder (/shared) replaces that folder.
                if (
                    entry.is_dir()
                    and not entry.is_symlink()
                    and entry.name not in _NOT_READ_ONLY
                    and f"/{entry.name}" not in targets
                ):
                    argv += ["-v", f"{entry}:/{entry.name}:ro"]
        for (host, _, read_only), target in zip(volumes, targets):
            argv += ["-v", f"{host}:{target}" + (":ro" if read_only else "")]
        for key, value in (env or {}).items():
            argv += ["-e", f"{key}={value}"]
        return _nice([*argv, self.name, "--", *command])

    def resolve(self, path: str) -> Path:
        """Where ``path`` of the container is on this machine: symbolic links are followed
        inside the container's root (``/var/run`` -> ``/run`` must not lead to this machine's
        ``/run``)."""
        parts = [p for p in Path(path).parts if p != "/"]
        current = self.mountpoint
        for _ in range(64):
            if not parts:
                return current
            part = parts.pop(0)
            candidate = current / part
            if candidate.is_symlink():
                target = Path(os.readlink(candidate))
                base = self.mountpoint if target.is_absolute() else current
                parts = [p for p in target.parts if p != "/"] + parts
                current = base
                continue
            if part == "..":
                current = current.parent if current != self.mountpoint else current
                continue
            current = candidate
        raise ValueError(f"too many symbolic links resolving {path} in {self.name}")

    def run(
        self, command: Sequence[str], timeout: float = 600, **kwargs
    ) -> subprocess.CompletedProcess:
        """Runs ``command`` to its end; returns it with stdout and stderr captured."""
        return subprocess.run(
            self.argv(command, **kwargs),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.store.env(),
        )

    def popen(self, command: Sequence[str], log: Path, **kwargs) -> subprocess.Popen:
        """Starts ``command`` in the background, its output (both streams) into ``log``."""
        with open(log, "w") as out:
            return subprocess.Popen(
                self.argv(command, **kwargs),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.store.env(),
                start_new_session=True,
            )


def scratch_dir(parent: Path, name: str, owner: int = 1000) -> Path:
    """A folder for a pod's volume (an emptyDir, say), owned by the pods' user."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=parent))
    os.chown(path, owner, owner)
    return path


class PodInitFailed(RuntimeError):
    """An init container of a :class:`Pod` exited non-zero: the pod's container never ran."""

    def __init__(self, name: str, run: subprocess.CompletedProcess):
        super().__init__(
            f"init container {name} exited {run.returncode}:\n{(run.stdout + run.stderr)[-3000:]}"
        )
        self.name = name
        self.run = run


class Pod:
    """One rendered pod (a Job's or a Deployment's template) run inside an image: its
    container's command, env, user and volumes as the operator rendered them.

    ConfigMap volumes get the files of the rendered ConfigMap of that name, Secret volumes
    those of ``secrets[name]``, emptyDirs and PersistentVolumeClaims (the learner's run
    directory without ``spec.checkpoint.uri``) a fresh folder owned by the pod's user; all mounts
    are made as the container's volumeMounts say (read-only where they say so), over a
    read-only root filesystem when the securityContext asks for one. Init containers run
    first, each to its end in its own image (``init_images``), sharing the pod's volumes; one
    that fails fails the pod (:class:`PodInitFailed`), as under ``restartPolicy: Never``.

    Args:
      store: the buildah store holding ``image``.
      image: the image to run (in place of the rendered one, which no registry serves here).
      workload: the rendered Job or Deployment.
      objects: every object rendered with it (the ConfigMaps are looked up there).
      workdir: where the volumes' folders and the log are made.
      pod_name: the pod's name (``metadata.name`` for the downward API).
      hosts: extra /etc/hosts entries, e.g. the learner Service's name -> 127.0.0.1.
      secrets: Secret name -> {key: bytes}, for Secret volumes.
      extra_env: variables this machine needs on top of the rendered ones.
      init_images: init container name -> the image to run it in (the rendered pod's
        ``initContainers`` each need one).
    """

    def __init__(
        self,
        store: Store,
        image: str,
        workload: Mapping,
        objects: Sequence[Mapping],
        workdir: Path,
        pod_name: str,
        hosts: Mapping[str, str] | None = None,
        secrets: Mapping[str, Mapping[str, bytes]] | None = None,
        extra_env: Mapping[str, str] | None = None,
        init_images: Mapping[str, str] | None = None,
    ):
        self.store = store
        self.image = image
        self.pod_spec = workload["spec"]["template"]["spec"]
        self.spec_container = self.pod_spec["containers"][0]
        self.objects = objects
        self.workdir = Path(workdir)
        self.pod_name = pod_name
        self.hosts = hosts or {}
        self.secrets = secrets or {}
        self.extra_env = extra_env or {}
        self.init_images = init_images or {}
        #: Each init container's run, by name, once the pod has started.
        self.init_runs: dict[str, subprocess.CompletedProcess] = {}
        self.log = self.workdir / f"{pod_name}.log"
        self.volume_dirs: dict[str, Path] = {}
        self.process: subprocess.Popen | None = None
        self._stack = contextlib.ExitStack()

    def _user(self, container: Mapping | None = None) -> tuple[int, int]:
        ctx = {
            **self.pod_spec.get("securityContext", {}),
            **(container or self.spec_container).get("securityContext", {}),
        }
        return int(ctx.get("runAsUser", 0)), int(ctx.get("runAsGroup", 0))

    def _runtime(self, container: Mapping) -> dict:
        """What ``Container.run``/``popen`` take for one of the pod's containers: its user,
        environment, volumes (made once per pod, shared by its containers) and root."""
        uid, gid = self._user(container)
        volumes = {v["name"]: v for v in self.pod_spec.get("volumes", [])}
        mounts = []
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in self.volume_dirs:
                self.volume_dirs[mount["name"]] = self._volume(volumes[mount["name"]], uid, gid)
            mounts.append(
                (self.volume_dirs[mount["name"]], mount["mountPath"], bool(mount.get("readOnly")))
            )
        env = {}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[item["name"]] = self.pod_name
        env.update(self.extra_env)
        # The kubelet mounts one file of its own at terminationMessagePath, writable by the
        # container's user, and reads it once the container has stopped. buildah's chroot
        # isolation makes /dev its own, read-only: the file is in a folder of this machine
        # mounted at TERMINATION_DIR, and the path in the command is mapped to it
        # (:meth:`_argv`).
        mounts.append((self._termination_folder(container), TERMINATION_DIR, False))
        read_only = bool(container.get("securityContext", {}).get("readOnlyRootFilesystem"))
        return {"user": f"{uid}:{gid}", "env": env, "volumes": mounts, "read_only_root": read_only}

    def _volume(self, volume: Mapping, uid: int, gid: int) -> Path:
        path = self.workdir / f"{self.pod_name}-{volume['name']}"
        path.mkdir(parents=True)
        files: Mapping[str, bytes] = {}
        if "configMap" in volume:
            name = volume["configMap"]["name"]
            found = [
                o
                for o in self.objects
                if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name
            ]
            assert found, f"no rendered ConfigMap {name}"
            files = {k: v.encode() for k, v in found[0].get("data", {}).items()}
        elif "secret" in volume:
            files = self.secrets[volume["secret"]["secretName"]]
        elif "emptyDir" not in volume and "persistentVolumeClaim" not in volume:
            # A claim is a fresh folder too: one pod here, so nothing outlives it to share.
            raise ValueError(f"volume kind not emulated: {volume}")
        for key, data in files.items():
            (path / key).write_bytes(data)
            # As the kubelet projects them for fsGroup: readable by the pod's group only.
            os.chown(path / key, 0, gid)
            os.chmod(path / key, 0o440)
        os.chown(path, uid, gid)
        return path

    def command(self) -> list[str]:
        """The container's command line as rendered (its termination message path mapped)."""
        return self._argv(self.spec_container)

    def __enter__(self) -> "Pod":
        for init in self.pod_spec.get("initContainers", []):
            if init["name"] not in self.init_images:
                raise ValueError(f"init container {init['name']}: pass its image in init_images")
            command = self._argv(init)
            with self.store.container(self.init_images[init["name"]], self.hosts) as container:
                run = container.run(command, timeout=600, **self._runtime(init))
            self.init_runs[init["name"]] = run
            if run.returncode != 0:
                raise PodInitFailed(init["name"], run)
        runtime = self._runtime(self.spec_container)
        container = self._stack.enter_context(self.store.container(self.image, self.hosts))
        try:
            self.process = container.popen(self.command(), self.log, **runtime)
        except BaseException:
            self._stack.close()
            raise
        return self

    def wait(self, timeout: float) -> int:
        """Waits for the container's process to exit; returns its exit code."""
        return self.process.wait(timeout)

    def stop(self, grace: float = 20) -> int | None:
        """SIGTERM, as the kubelet sends, then SIGKILL after ``grace`` seconds."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        import signal

        # To the container's own process, as the kubelet does: buildah, signalled itself,
        # kills the command outright.
        for pid in self._command_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            return self.process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(grace)

    def _command_pids(self) -> list[int]:
        """The processes of this pod's session that run its command (not buildah's own)."""
        command = self.command()
        # buildah runs argv[0] by its full path in the image (python -> /opt/venv/bin/python).
        name, rest = os.path.basename(command[0]).encode(), [c.encode() for c in command[1:]]
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) != self.process.pid:
                    continue
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if os.path.basename(argv[0]) == name and argv[1 : 1 + len(rest)] == rest:
                    pids.append(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
        return pids

    def _termination_folder(self, container: Mapping) -> Path:
        folder = self.workdir / f"{self.pod_name}-{container['name']}-termination"
        if not folder.exists():
            folder.mkdir(parents=True)
            uid, gid = self._user(container)
            os.chown(folder, uid, gid)
        return folder

    def _argv(self, container: Mapping) -> list[str]:
        """A container's command line, its terminationMessagePath mapped into
        TERMINATION_DIR (see :meth:`_runtime`)."""
        path = container.get("terminationMessagePath", "/dev/termination-log")
        mapped = f"{TERMINATION_DIR}/{Path(path).name}"
        return [
            mapped if arg == path else arg
            for arg in [*container.get("command", []), *container.get("args", [])]
        ]

    def termination_message(self) -> str:
        """What the container wrote at its terminationMessagePath (at most 4096 bytes, as the
        kubelet keeps)."""
        path = self.spec_container.get("terminationMessagePath", "/dev/termination-log")
        file = self._termination_folder(self.spec_container) / Path(path).name
        return file.read_bytes()[:4096].decode(errors="replace") if file.exists() else ""

    def output(self) -> str:
        """What the container printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._stack.close()
