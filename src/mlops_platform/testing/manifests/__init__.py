"""Hypothesis strategies of hostile InferenceService manifests, for the reliability suite's scenario 9
(``tests/reliability/test_hostile_input.py``).

- :func:`invalid` draws :class:`Invalid` manifests of every served version: one valid object (from
  :mod:`mlops_platform.testing.conversion`) with ONE field made invalid, and the path of that field
  as the API server names it in its answer (``spec.port``, ``spec.predictor.resources.requests``,
  ``metadata.name``). The categories (:data:`CATEGORIES`): wrong JSON types, numbers out of range,
  bad quantities, strings and maps far over their bounds (the biggest close to the API server's
  3 MiB request limit), unknown fields (rejected with ``fieldValidation=Strict``), bad model URIs
  and endpoints, unicode tricks in names, labels and annotations, and cross-field (CEL) rules;
  the canary analysis' fields (v1beta1, v1: bounds, durations, types, and its CEL rules:
  decreasing weights, a percent beside it, no check, a check without a bound) among them.
  Every one of them is invalid by the API's own contract: :func:`mlops_platform.api.decode` (the
  operator's reading of an object) refuses it too.
- :func:`valid` draws valid objects of every served version with at most :data:`MAX_REPLICAS`
  replicas (the local cluster runs their pods on kwok nodes), named by the caller.

The modules: :mod:`~mlops_platform.testing.manifests.objects` (the versions, limits,
:class:`Invalid`, :func:`base` and :func:`valid`), :mod:`~mlops_platform.testing.manifests.values`
(hostile values), :mod:`~mlops_platform.testing.manifests.fields` (what each version's fields take)
and :mod:`~mlops_platform.testing.manifests.mutations` (one invalid thing per manifest,
:func:`invalid`). The names below are this package's API.
"""

from __future__ import annotations

from mlops_platform.testing.manifests.fields import FIELDS
from mlops_platform.testing.manifests.mutations import invalid
from mlops_platform.testing.manifests.objects import (
    ANNOTATIONS_LIMIT,
    BUILTIN_RUNTIMES,
    CATEGORIES,
    HUGE_MARGIN,
    JSON,
    MAX_REPLICAS,
    REQUEST_LIMIT,
    RESOURCES,
    VERSIONS,
    Invalid,
    base,
    valid,
    version_of,
)
from mlops_platform.testing.manifests.values import BAD_QUANTITY_SAMPLES

__all__ = [
    "ANNOTATIONS_LIMIT",
    "BAD_QUANTITY_SAMPLES",
    "BUILTIN_RUNTIMES",
    "CATEGORIES",
    "FIELDS",
    "HUGE_MARGIN",
    "JSON",
    "MAX_REPLICAS",
    "REQUEST_LIMIT",
    "RESOURCES",
    "VERSIONS",
    "Invalid",
    "base",
    "invalid",
    "valid",
    "version_of",
]
