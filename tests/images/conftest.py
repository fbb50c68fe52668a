"""The images built for real with buildah (``make test-images``), once per session."""

from __future__ import annotations

import shutil
import threading

import pytest

from support import buildah

#: name -> (Dockerfile, build arguments); tags are localhost/seedrl/<name>:test.
IMAGES = {
    "learner-cpu": ("Dockerfile.learner", {"ACCELERATOR": "cpu"}),
    "learner-tpu": ("Dockerfile.learner", {"ACCELERATOR": "tpu"}),
    "actors": ("Dockerfile.actor", {}),
    "operator": ("Dockerfile.operator", {}),
}


class BuiltImages:
    """Builds each image the first time a test asks for it (buildah's layer cache makes a
    rebuild of unchanged sources take seconds) and remembers how long each build took."""

    def __init__(self, store: buildah.Store):
        self.store = store
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        """The tag of image ``name`` (see :data:`IMAGES`), built if this session has not."""
        with self._lock:
            tag = f"localhost/seedrl/{name}:test"
            if name not in self.seconds:
                dockerfile, args = IMAGES[name]
                self.seconds[name] = self.store.build(dockerfile, tag, args)
            return tag


@pytest.fixture(scope="session")
def store() -> buildah.Store:
    """buildah's store under the cache folder; the tools come from ``make image-tools``."""
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: `make test-images` installs them "
            f"(make image-tools)"
        )
    return buildah.Store()


@pytest.fixture(scope="session")
def images(store, request) -> BuiltImages:
    """The images, built on demand; the build times are printed at the end of the session."""
    built = BuiltImages(store)
    yield built
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and built.seconds:
        reporter.write_line(
            "image builds (s, buildah, %s store): %s"
            % (store.driver, ", ".join(f"{k} {v:.0f}" for k, v in built.seconds.items()))
        )
