"""InferenceService API: the types, one module per version (``v1alpha1``), and the CRD generated
from them (``mlops_platform.api.crd``).

``RESOURCE`` is the REST resource of InferenceServices (storage version) for the runtime client;
:func:`decode` turns a served object of any version into the internal model
(:mod:`mlops_platform.api.internal`) that the controller reads;
``crd_manifest()`` is the CustomResourceDefinition object. Importing this package does not import
the CRD generator (so ``python -m mlops_platform.api.crd`` runs it exactly once).
"""

from __future__ import annotations

from typing import Any

from mlops_platform.api import internal, v1alpha1
from mlops_platform.runtime.transport.client import Resource

CRD_NAME = f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}"
RESOURCE = Resource(v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL, v1alpha1.KIND)


ValidationError = v1alpha1.ValidationError


def decode(obj: dict[str, Any]) -> internal.InferenceService:
    """The internal model of an InferenceService as the API server serves it (any served version);
    raises :class:`ValidationError` naming the field."""
    api_version = obj.get("apiVersion", v1alpha1.API_VERSION)
    if api_version != v1alpha1.API_VERSION:
        raise ValidationError(f"apiVersion: {api_version!r} is not served by this operator")
    return v1alpha1.to_internal(v1alpha1.from_dict(obj))


def crd_manifest() -> dict[str, Any]:
    """The InferenceService CustomResourceDefinition (see :func:`mlops_platform.api.crd.crd_manifest`)."""
    from mlops_platform.api import crd

    return crd.crd_manifest()


__all__ = ["CRD_NAME", "RESOURCE", "ValidationError", "crd_manifest", "decode", "internal", "v1alpha1"]
