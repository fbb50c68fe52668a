"""CustomResourceDefinitions of other projects' kinds whose controllers a test plays."""

from __future__ import annotations


def open_crd(group: str, kind: str, plural: str, *versions: str) -> dict:
    """A CustomResourceDefinition of another project's kind whose controller a test plays
    (Kueue's, cert-manager's): served like the project's own at ``versions`` (default
    ``v1``; the first is stored, the others served through conversion None, as alike as an
    open schema makes them), with a schema left open (``x-kubernetes-preserve-unknown-fields``:
    nothing pruned) since the test, not that controller, decides what the objects hold."""
    versions = versions or ("v1",)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": version == versions[0],
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
                for version in versions
            ],
        },
    }
