"""InferenceService API: the types, one module per version (``v1alpha1``), and the CRD generated
from them (``mlops_platform.api.crd``).

``RESOURCE`` is the REST resource of InferenceServices (storage version) for the runtime client;
``crd_manifest()`` is the CustomResourceDefinition object. Importing this package does not import
the CRD generator (so ``python -m mlops_platform.api.crd`` runs it exactly once).
"""

from __future__ import annotations

from typing import Any

from mlops_platform.api import v1alpha1
from mlops_platform.runtime.client import Resource

CRD_NAME = f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}"
RESOURCE = Resource(v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL, v1alpha1.KIND)


def crd_manifest() -> dict[str, Any]:
    """The InferenceService CustomResourceDefinition (see :func:`mlops_platform.api.crd.crd_manifest`)."""
    from mlops_platform.api import crd

    return crd.crd_manifest()


__all__ = ["CRD_NAME", "RESOURCE", "crd_manifest", "v1alpha1"]
