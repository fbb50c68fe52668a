"""The one way seedrl's service code reaches a Kubernetes API server: the operator, `seedrl
submit`, `seedrl status` and `seedrl cost` all take their client from :func:`api_client`.

Credentials, first found wins:

1. an explicit kubeconfig file or context (``--kubeconfig``, ``--context``): that kubeconfig;
2. else, inside a pod (a service account token is mounted): the pod's service account;
3. else the default kubeconfig: ``$KUBECONFIG``, then ``~/.kube/config``.

So a command run in a pod talks to its own cluster unless told otherwise, and one run on a
laptop uses the current kubeconfig context.
"""

from __future__ import annotations

import kubernetes


def api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> kubernetes.client.ApiClient:
    """A client for the cluster the precedence above picks.

    Raises:
      kubernetes.config.ConfigException: no kubeconfig and not in a pod.
    """
    if kubeconfig is None and context is None:
        try:
            kubernetes.config.load_incluster_config()
            return kubernetes.client.ApiClient()
        except kubernetes.config.ConfigException:
            pass
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=cfg
    )
    return kubernetes.client.ApiClient(cfg)


def default_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's current (or given) context; ``default`` if none."""
    try:
        contexts, current = kubernetes.config.list_kube_config_contexts(kubeconfig)
    except (kubernetes.config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"
