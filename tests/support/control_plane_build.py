"""Builds the real Kubernetes control plane the cluster tests boot (``make control-plane``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl are built from the Go
module proxy, at the versions pinned by the checked-in ``go.mod``/``go.sum`` of
``tests/cluster/controlplane/`` (Kubernetes) and ``tests/cluster/controlplane/etcd/`` (etcd,
a module of its own: the two pin different etcd client libraries). The binaries go to a cache
keyed by those files and this recipe (:func:`binary_dir`, under ``~/.cache/seedrl/``), so they
are built once per pin; a second ``make control-plane`` only checks they are there.

Only the standard library is used: ``make`` runs this before the virtualenv may exist, and the
fixture (:mod:`support.control_plane`) imports :func:`binary_dir` to find what was built.

    python tests/support/control_plane_build.py          # build what is missing, with timings
    python tests/support/control_plane_build.py --dir    # print where the binaries are
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "tests" / "cluster" / "controlplane"
ETCD_MODULE = MODULE / "etcd"
#: The Kubernetes release the module pins (go.mod) and the binaries report (ldflags below).
KUBERNETES_VERSION = "v1.37.2"
#: The Kubernetes commands built, in build order; etcd is built first, from its own module.
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = ("etcd", *KUBERNETES_COMMANDS)


def _version_ldflags() -> str:
    # A `go build` of k8s.io/kubernetes outside its repository reports v0.0.0-master, which
    # breaks Helm's kubeVersion checks and version-gated code; kubectl reads client-go's copy.
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for name, value in (
            ("gitVersion", KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        ):
            flags.append(f"-X {package}.{name}={value}")
    return " ".join(flags)


#: Static binaries (no C compiler needed), no build paths inside them.
BUILD_FLAGS = ("-trimpath",)
BUILD_ENV = {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def _recipe() -> str:
    return repr((KUBERNETES_VERSION, BINARIES, BUILD_FLAGS, BUILD_ENV, _version_ldflags()))


def cache_key() -> str:
    """What the binaries are built from: both modules' go.mod and go.sum, etcd's main and
    this recipe; a change to any of them builds anew into another directory."""
    return file_digest(
        _recipe(),
        (
            MODULE / "go.mod",
            MODULE / "go.sum",
            ETCD_MODULE / "go.mod",
            ETCD_MODULE / "go.sum",
            ETCD_MODULE / "main.go",
        ),
    )


def cache_root() -> Path:
    """``$SEEDRL_CONTROL_PLANE_CACHE``, else ``~/.cache/seedrl/control-plane``."""
    explicit = os.environ.get("SEEDRL_CONTROL_PLANE_CACHE")
    return Path(explicit) if explicit else Path.home() / ".cache" / "seedrl" / "control-plane"


def binary_dir() -> Path:
    """Where the binaries of the checked-in pins are (or will be, once built)."""
    return cache_root() / f"{KUBERNETES_VERSION}-{cache_key()}"


def missing() -> list[str]:
    """The binaries not built yet for the current pins."""
    return [name for name in BINARIES if not os.access(binary_dir() / name, os.X_OK)]


def go_command(target: str = "control-plane") -> str:
    """The Go toolchain (``$GO``, else ``go`` on PATH); exits naming ``make TARGET`` if none."""
    found = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(found, os.X_OK):
        sys.exit(f"make {target}: no Go toolchain (Go >= 1.26 on PATH, or GO=/path/to/go)")
    return found


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Holds ``root/.lock``: worktrees of one machine share a cache, so one build at a time
    (the others then find it built)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class GoBuild:
    """One binary to build: ``go build PACKAGE`` in the module at ``module``."""

    name: str
    module: Path
    package: str
    ldflags: str = ""


def build_binaries(
    label: str, root: Path, target: Path, wanted: Sequence[GoBuild]
) -> dict[str, float]:
    """Builds each of ``wanted`` missing from ``target`` (under the cache ``root``, locked),
    with :data:`BUILD_FLAGS` and :data:`BUILD_ENV`, into a staging folder first so that a
    failed build leaves no half of a set; prints and returns the seconds each took."""
    timings: dict[str, float] = {}
    with locked(root):
        todo = [b for b in wanted if not os.access(target / b.name, os.X_OK)]
        if not todo:
            return timings
        go = go_command(label)
        staging = target.with_name(target.name + ".partial")
        staging.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **BUILD_ENV}
        for step in todo:
            output = str(staging / step.name)
            command = [go, "build", *BUILD_FLAGS, "-ldflags", step.ldflags, "-o", output]
            print(f"{label}: building {step.name} ...", flush=True)
            start = time.monotonic()
            subprocess.run([*command, step.package], cwd=step.module, env=env, check=True)
            timings[step.name] = time.monotonic() - start
            print(f"{label}: {step.name} built in {timings[step.name]:.0f} s", flush=True)
        target.mkdir(parents=True, exist_ok=True)
        for step in todo:
            os.replace(staging / step.name, target / step.name)
        shutil.rmtree(staging, ignore_errors=True)
    return timings


def file_digest(recipe: str, paths: Sequence[Path]) -> str:
    """A short digest of a build recipe and the files it builds from (their names and bytes)."""
    digest = hashlib.sha256(recipe.encode())
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build() -> dict[str, float]:
    """Builds each missing binary into :func:`binary_dir`; returns the seconds each took."""
    steps = [
        GoBuild(name, ETCD_MODULE, ".")
        if name == "etcd"
        else GoBuild(name, MODULE, f"k8s.io/kubernetes/cmd/{name}", _version_ldflags())
        for name in BINARIES
    ]
    return build_binaries("control-plane", cache_root(), binary_dir(), steps)


def run_build(
    label: str,
    version: str,
    build: Callable[[], dict[str, float]],
    where: Callable[[], Path],
    argv: list[str] | None = None,
) -> int:
    """The command line of a cached Go build (``make control-plane``, ``make kueue``): builds
    what is missing with ``build`` and prints how long it took, or (``--dir``) prints
    ``where()`` the binaries go; 1 when the build fails."""
    parser = argparse.ArgumentParser(description=f"Build {label} {version} (cached).")
    parser.add_argument("--dir", action="store_true", help="print the binaries' directory")
    args = parser.parse_args(argv)
    if args.dir:
        print(where())
        return 0
    start = time.monotonic()
    try:
        timings = build()
    except subprocess.CalledProcessError as exc:
        print(f"{label}: build failed: {exc}", file=sys.stderr)
        return 1
    if timings:
        print(f"{label}: built {', '.join(timings)} in {time.monotonic() - start:.0f} s")
    else:
        print(f"{label}: {version} up to date in {where()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``make control-plane``: :func:`run_build` of :func:`build`."""
    return run_build("control-plane", KUBERNETES_VERSION, build, binary_dir, argv)


if __name__ == "__main__":
    sys.exit(main())
