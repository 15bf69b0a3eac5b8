"""InferenceService manifests for tests: one factory, with the served apiVersion and kind."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mlops_platform.api import v1alpha1
from mlops_platform.runtime.transport.client import Resource

#: the REST resource of :func:`manifest`'s objects (v1alpha1: the API server converts them to the
#: storage version through the conversion webhook, which the operator then reads as v1)
RESOURCE = Resource(v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL, v1alpha1.KIND)


def manifest(
    name: str, *, namespace: str | None = None, metadata: Mapping[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """A v1alpha1 InferenceService named ``name`` whose spec is exactly ``spec`` (camelCase keys, as
    served: ``modelUri``, ``framework``, ``minReplicas``...). The caller passes its own defaults (a
    module can bind them once with :func:`functools.partial`); ``metadata`` adds fields such as
    ``uid`` or ``generation``. Everything passed in is copied, so manifests never share state."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(copy.deepcopy(dict(metadata or {})))
    return {
        "apiVersion": v1alpha1.API_VERSION,
        "kind": v1alpha1.KIND,
        "metadata": meta,
        "spec": copy.deepcopy(spec),
    }


def without(obj: Mapping[str, Any], *path: str) -> dict[str, Any]:
    """A deep copy of ``obj`` without the field at ``path`` (``without(m, "spec", "modelUri")``)."""
    out = copy.deepcopy(dict(obj))
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out
