"""What an Experiment becomes in a cluster: :func:`render` turns a validated Experiment into
the Kubernetes objects that run it, one module per kind:

- :mod:`.config_map`: a ConfigMap holding the resolved Experiment (``config.yaml``), which both
  roles read;
- :mod:`.volume`: with no ``spec.checkpoint.uri``, the learner's run directory as a
  PersistentVolumeClaim, so that it outlives each learner pod;
- :mod:`.service`: a Service for the learner's gRPC and metrics ports;
- :mod:`.network_policy`: a NetworkPolicy that lets only this experiment's actors reach the
  learner's gRPC port;
- :mod:`.disruption_budget`: a PodDisruptionBudget that keeps voluntary disruptions off a
  healthy learner;
- :mod:`.learner_job`: the learner, a Job of one pod replaced by its exit code and resuming from
  its checkpoint;
- :mod:`.actors`: the actors, a Deployment of ``spec.actors.replicas`` pods (zero while
  suspended);
- :mod:`.tls`: with ``spec.learner.tls.enabled``, the learner's certificate (applied by the
  operator apart from these, before them) and its mounts into both roles' pods.

:mod:`.common` holds the children's names, labels and metadata; :mod:`.pod` what every pod has.
Pure functions only: the operator (:mod:`seedrl.service.operator.handlers`) applies what they
return.
"""

from __future__ import annotations

from typing import Any, Mapping

from seedrl.common.config import RELEASE_IMAGES, Experiment, ImageDefaults
from seedrl.service.operator.render.actors import render_actors
from seedrl.service.operator.render.config_map import render_config_map
from seedrl.service.operator.render.disruption_budget import render_disruption_budget
from seedrl.service.operator.render.learner_job import render_learner_job
from seedrl.service.operator.render.network_policy import render_network_policy
from seedrl.service.operator.render.service import render_service
from seedrl.service.operator.render.volume import needs_run_volume, render_run_volume
from seedrl.service.operator.usage import LearnerUsage


def render(
    exp: Experiment,
    owner: Mapping[str, Any] | None = None,
    namespace: str | None = None,
    finished: bool = False,
    admitted: bool = True,
    images: ImageDefaults = RELEASE_IMAGES,
    usage: LearnerUsage | None = None,
    config: str | None = None,
) -> list[dict[str, Any]]:
    """Every object that runs ``exp``, in the order to create them (config first).

    Args:
      exp: a validated Experiment.
      owner: an owner reference (see :func:`owner_reference`) put on every object.
      namespace: put in every object's metadata when given (else ``exp.metadata.namespace``).
      finished: the learner Job has completed or failed: no actors are rendered to run.
      admitted: whether Kueue admitted the learner (see :func:`admitted`); no actors before.
      images: where the images the spec does not name come from (:func:`image_defaults`).
      usage: what earlier learner Jobs used of the backoff limit and the deadline.
      config: the ``config.yaml`` the ConfigMap holds now, whose shape the pods' images read
        (:func:`~.config_map.config_text_like`); None: none yet.
    """
    ns = namespace or exp.metadata.namespace
    volume = [render_run_volume(exp, owner, ns)] if needs_run_volume(exp) else []
    return [
        render_config_map(exp, owner, ns, config),
        *volume,
        render_service(exp, owner, ns),
        render_network_policy(exp, owner, ns),
        render_disruption_budget(exp, owner, ns),
        render_learner_job(exp, owner, ns, images, usage),
        render_actors(exp, owner, ns, finished, admitted, images),
    ]
