"""InferenceService API: the types, one module per version (``v1alpha1``, ``v1beta1``, ``v1``), the
conversion between them (``conversion``: v1 is the hub) and the CRD generated from them
(``mlops_platform.api.crd``).

``RESOURCE`` is the REST resource of InferenceServices at the storage version and hub, v1, which the
operator reads and writes; :func:`decode` turns an object of any served version into the internal
model (:mod:`mlops_platform.api.internal`) that the controller reads, through v1;
``crd_manifest()`` is the CustomResourceDefinition object. Importing this package does not import
the CRD generator (so ``python -m mlops_platform.api.crd`` runs it exactly once).
"""

from __future__ import annotations

from typing import Any

from mlops_platform.api import conversion, internal, v1, v1_decode, v1alpha1, v1beta1
from mlops_platform.runtime.transport.client import Resource

CRD_NAME = f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}"
RESOURCE = Resource(v1.GROUP, v1.VERSION, v1alpha1.PLURAL, v1.KIND)


ValidationError = v1alpha1.ValidationError


def decode(obj: dict[str, Any]) -> internal.InferenceService:
    """The internal model of an InferenceService as the API server serves it (any served version);
    raises :class:`ValidationError` naming the field."""
    if obj.get("apiVersion") == v1alpha1.API_VERSION:
        v1alpha1.from_dict(obj)  # its own rules first: the message names the field as written
    if obj.get("apiVersion") != v1.API_VERSION:
        try:
            obj = conversion.to_hub(obj)
        except conversion.ConversionError as e:
            raise ValidationError(str(e)) from None
    return v1_decode.to_internal(v1_decode.from_dict(obj))


def crd_manifest() -> dict[str, Any]:
    """The InferenceService CustomResourceDefinition (see :func:`mlops_platform.api.crd.crd_manifest`)."""
    from mlops_platform.api import crd

    return crd.crd_manifest()


__all__ = [
    "CRD_NAME",
    "RESOURCE",
    "ValidationError",
    "conversion",
    "crd_manifest",
    "decode",
    "internal",
    "v1",
    "v1alpha1",
    "v1beta1",
]
