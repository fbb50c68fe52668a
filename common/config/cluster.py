"""Where Experiments live in a cluster: the custom resource's coordinates in the Kubernetes
API (:data:`GROUP`, :data:`VERSION`, :data:`KIND`, ...) and the release's container images
(:data:`IMAGE_REGISTRY`, :data:`RELEASE`, :class:`ImageDefaults`).
"""

from __future__ import annotations

import dataclasses


#: The Experiment custom resource's coordinates in the Kubernetes API: the CRD, the operator's
#: watches, ``seedrl submit``/``status``/``cost`` and the documents' ``apiVersion`` use these.
GROUP = "seedrl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Experiment"
PLURAL = "experiments"
SINGULAR = "experiment"


#: Where seedrl's images are published, and the release whose images an Experiment runs unless
#: it names its own (the Makefile's IMAGE_REGISTRY and pyproject.toml's version; a test checks
#: that they agree).
IMAGE_REGISTRY = "ghcr.io/seedrl"
RELEASE = "0.1.0"
#: The learner image of this release for each accelerator kind: Dockerfile.learner built with
#: ACCELERATOR=cpu, gpu or tpu (TensorFlow for the CPU, with CUDA, with libtpu).
LEARNER_IMAGES = {
    "cpu": f"{IMAGE_REGISTRY}/learner:{RELEASE}",
    "gpu": f"{IMAGE_REGISTRY}/learner:{RELEASE}-gpu",
    "tpu": f"{IMAGE_REGISTRY}/learner:{RELEASE}-tpu",
}
#: The actor image of this release (Dockerfile.actor).
ACTOR_IMAGE = f"{IMAGE_REGISTRY}/actors:{RELEASE}"


@dataclasses.dataclass(frozen=True)
class ImageDefaults:
    """Where the images of an Experiment that names none come from: a registry and a
    release, both roles alike, so that learner and actors always run the same version.

    The operator resolves them (its own release; ``--image-registry`` for a mirror) and
    records them in the Experiment's status at its first reconcile, so that an operator
    upgrade changes no running Experiment's images, not even those of a learner replaced
    later.

    Attributes:
      registry: e.g. ``ghcr.io/seedrl`` or a private mirror.
      release: the image tag's version, e.g. ``0.1.0``.
    """

    registry: str = IMAGE_REGISTRY
    release: str = RELEASE

    def learner(self, kind: str) -> str:
        """The learner image for an accelerator kind (cpu, gpu, tpu)."""
        return f"{self.registry}/learner:{self.release}{'' if kind == 'cpu' else '-' + kind}"

    def actors(self) -> str:
        """The actor image."""
        return f"{self.registry}/actors:{self.release}"


#: This release's images from the default registry.
RELEASE_IMAGES = ImageDefaults()
