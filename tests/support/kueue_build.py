"""Builds Kueue's controller manager for the Kueue scenarios (``make kueue``).

``sigs.k8s.io/kueue/cmd/kueue`` is built from the Go module proxy at the version the checked-in
``go.mod``/``go.sum`` of ``tests/cluster/kueue/`` pin, with the recipe of ``make control-plane``
(:mod:`support.control_plane_build`: ``-trimpath``, static, the module read-only), into a cache
keyed by those files (:func:`binary_dir`, under ``~/.cache/seedrl/``): built once per pin, a
second ``make kueue`` only checks it is there. The fixture (:mod:`support.kueue`) also reads
Kueue's own manifests (CRDs, RBAC, webhooks, its default configuration) from the module's
folder in the Go module cache (:func:`module_dir`).

Only the standard library is used, as in :mod:`support.control_plane_build`.

    python tests/support/kueue_build.py          # build it if missing, with the time it took
    python tests/support/kueue_build.py --dir    # print where the binary is
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run as a script, this folder is on sys.path; imported by the tests, ``support`` is.
try:
    from support.control_plane_build import (
        BUILD_ENV,
        BUILD_FLAGS,
        ROOT,
        GoBuild,
        build_binaries,
        file_digest,
        go_command,
        run_build,
    )
except ImportError:  # pragma: no cover - the script's own path
    from control_plane_build import (  # type: ignore[no-redef]
        BUILD_ENV,
        BUILD_FLAGS,
        ROOT,
        GoBuild,
        build_binaries,
        file_digest,
        go_command,
        run_build,
    )

MODULE = ROOT / "tests" / "cluster" / "kueue"
#: The Go module of Kueue and the release its go.mod pins (and the binary reports).
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
#: The one binary: Kueue's controller manager (its webhooks and controllers in one process).
BINARY = "kueue"
#: Without it the binary reports v0.0.0-main (pkg/version's default).
LDFLAGS = f"-X {KUEUE_MODULE}/pkg/version.GitVersion={KUEUE_VERSION}"


def cache_key() -> str:
    """What the binary is built from: the module's go.mod and go.sum and this recipe."""
    recipe = repr((KUEUE_VERSION, BINARY, BUILD_FLAGS, BUILD_ENV, LDFLAGS))
    return file_digest(recipe, (MODULE / "go.mod", MODULE / "go.sum"))


def cache_root() -> Path:
    """``$SEEDRL_KUEUE_CACHE``, else ``~/.cache/seedrl/kueue``."""
    explicit = os.environ.get("SEEDRL_KUEUE_CACHE")
    return Path(explicit) if explicit else Path.home() / ".cache" / "seedrl" / "kueue"


def binary_dir() -> Path:
    """Where the binary of the checked-in pin is (or will be, once built)."""
    return cache_root() / f"{KUEUE_VERSION}-{cache_key()}"


def binary() -> Path:
    """The controller manager's path (it may not be built yet: see :func:`missing`)."""
    return binary_dir() / BINARY


def missing() -> bool:
    """Whether the binary of the current pin is not built yet."""
    return not os.access(binary(), os.X_OK)


def module_dir() -> Path:
    """Kueue's module folder in the Go module cache (read-only), downloaded at the pinned
    version through the module proxy if the cache lost it; its ``config/`` holds the
    manifests Kueue releases are made from."""
    answer = subprocess.run(
        [go_command("kueue"), "mod", "download", "-json", KUEUE_MODULE],
        cwd=MODULE,
        env={**os.environ, **BUILD_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(answer.stdout)["Dir"])


def build() -> dict[str, float]:
    """Builds the binary if missing; returns the seconds it took (empty when it was there)."""
    step = GoBuild(BINARY, MODULE, f"{KUEUE_MODULE}/cmd/kueue", LDFLAGS)
    return build_binaries("kueue", cache_root(), binary_dir(), [step])


def main(argv: list[str] | None = None) -> int:
    """``make kueue``: :func:`~control_plane_build.run_build` of :func:`build`."""
    return run_build("kueue", KUEUE_VERSION, build, binary_dir, argv)


if __name__ == "__main__":
    sys.exit(main())
