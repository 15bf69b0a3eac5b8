"""``mlops.platform/v1beta1`` InferenceService: the predictor redesign, before graduation to v1.

v1beta1 introduced what v1 keeps: the ``predictor`` block (``model{uri, format}``, a ``runtime``
reference, Kubernetes resource requirements, an ``autoscaling`` block) and the canary as an explicit
candidate (``canary{model, trafficPercent}``). It differs from v1 (``docs/api-versions.md``):

- ``autoscaling`` has a single CPU target, ``targetCPUUtilization``, and no scale-to-zero policy
  (v1: ``targetUtilization{cpu, memory}`` and ``scaleToZero``);
- monitoring, network policy and the traffic router stay under ``spec.extensions``, as in v1alpha1.

What v1beta1 cannot say survives a round trip through it in the conversion annotation
(:mod:`mlops_platform.api.conversion`). Served, not stored; the reconciler never reads it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from mlops_platform.api import isvc_status, v1, v1_rules, v1alpha1

GROUP = v1alpha1.GROUP
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = v1alpha1.KIND
ROOT_RULES = v1alpha1.ROOT_RULES

AUTOSCALING_RULES = [v1_rules.AUTOSCALING_RULES[0]]


#: the default autoscaling block, whole: the server checks a default against the CEL rules as it is
_DEFAULT_SCALING = {"minReplicas": 1, "maxReplicas": 1}


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class Autoscaling(v1.ReplicaBounds):
    """Replica bounds and the CPU target of the autoscaler."""

    target_cpu_utilization: Annotated[
        Annotated[int, Meta(ge=1, le=1000)] | None,
        Meta(description="Average CPU utilization target in percent of the request."),
    ] = msgspec.field(default=None, name="targetCPUUtilization")


class Predictor(v1.PredictorBase):
    """The model server that serves the stable model."""

    autoscaling: Annotated[
        Autoscaling,
        Meta(extra_json_schema={"x-kubernetes-validations": AUTOSCALING_RULES, "default": _DEFAULT_SCALING}),
    ] = msgspec.field(default_factory=Autoscaling)


class InferenceServiceSpec(_Base):
    """The desired model service."""

    predictor: Predictor
    canary: v1.CanaryField = None
    extensions: v1alpha1.Extensions = None


class InferenceService(msgspec.Struct, rename="camel", omit_defaults=True):
    """InferenceService is one model service: predictor Deployment, Service, autoscaler and more."""

    metadata: dict[str, Any]
    spec: InferenceServiceSpec
    api_version: str = API_VERSION
    kind: str = KIND
    status: isvc_status.InferenceServiceStatus = msgspec.field(
        default_factory=isvc_status.InferenceServiceStatus
    )
