"""Reading a v1 object (:mod:`mlops_platform.api.v1`): :func:`from_dict` decodes it (msgspec, errors
naming the field) and checks the cross-field rules (:func:`validate`, the CRD's CEL rules of
:mod:`~mlops_platform.api.v1_rules` again), :func:`to_internal` turns it into the operator's model
(:mod:`mlops_platform.api.internal`), refusing settings still under ``spec.extensions`` that v1 has as
fields. :func:`version_of` is how status names a canary.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from mlops_platform.api import internal, modeluri, v1, v1_analysis, v1_rules, v1alpha1
from mlops_platform.runtime import quantity


def from_dict(obj: dict[str, Any]) -> v1.InferenceService:
    """Decode a v1 object; raise :class:`v1.ValidationError` naming the field."""
    isvc = v1alpha1.decode_as(obj, v1.InferenceService)
    validate(isvc)
    return isvc


def validate(isvc: v1.InferenceService) -> None:
    """Cross-field rules (also enforced by the CRD's CEL rules on the server)."""
    v1alpha1.validate_name(isvc.name)
    p = isvc.spec.predictor
    a = p.autoscaling
    if a.min_replicas > a.max_replicas:
        raise v1.ValidationError(
            f"spec.predictor.autoscaling.minReplicas ({a.min_replicas}) must be <= "
            f"spec.predictor.autoscaling.maxReplicas ({a.max_replicas})"
        )
    if a.scale_to_zero is not None and a.min_replicas != 0:
        raise v1.ValidationError(
            "spec.predictor.autoscaling.scaleToZero needs spec.predictor.autoscaling.minReplicas: 0"
        )
    _validate_model(p.model, "spec.predictor.model")
    canary = isvc.spec.canary
    if canary is not None:
        _validate_model(canary.model, "spec.canary.model")
        try:
            v1_analysis.validate_canary(canary.traffic_percent, canary.analysis)
        except v1_analysis.AnalysisError as e:
            raise v1.ValidationError(str(e)) from None
    r = p.resources
    for part in ("requests", "limits"):
        for name in getattr(r, part, None) or {}:
            if len(name) > 253 or not re.match(v1_rules.RESOURCE_NAME_PATTERN, name):
                raise v1.ValidationError(
                    f"spec.predictor.resources.{part}: {name!r} is not a resource name such as cpu, "
                    "memory or nvidia.com/gpu"
                )
    for part in ("requests", "limits"):
        for name, value in (getattr(r, part, None) or {}).items():
            if v1_rules.extended_resource(name) and quantity.parse(str(value)) % 1:
                raise v1.ValidationError(
                    f"spec.predictor.resources.{part}[{name}] ({value}): an extended resource is counted in "
                    "whole units"
                )
    if r is not None and r.requests:
        for name, request in r.requests.items():
            limit = (r.limits or {}).get(name)
            if limit is not None and quantity.parse(str(request)) > quantity.parse(str(limit)):
                raise v1.ValidationError(
                    f"spec.predictor.resources.requests[{name}] ({request}) must be <= "
                    f"spec.predictor.resources.limits[{name}] ({limit})"
                )
            if not v1_rules.overcommitted(name) and (
                limit is None or quantity.parse(str(request)) != quantity.parse(str(limit))
            ):
                raise v1.ValidationError(
                    f"spec.predictor.resources.requests[{name}] ({request}): Kubernetes does not overcommit "
                    f"{name}: spec.predictor.resources.limits[{name}] must be set and equal to it "
                    f"(it is {limit})"
                )


def _validate_model(m: v1.Model, where: str) -> None:
    """The URI parses (:func:`modeluri.parse`) and the download settings fit its scheme (the CEL
    rules :data:`MODEL_RULES` say the same)."""
    try:
        uri = modeluri.parse(m.uri)
    except modeluri.ModelURIError as e:
        raise v1.ValidationError(f"{where}.uri: {e}") from None
    if not uri.remote:
        for field, value in (("sha256", m.sha256), ("storage", m.storage)):
            if value is not None:
                raise v1.ValidationError(
                    f"{where}.{field}: only for s3://, gs:// and http(s):// models (a {uri.scheme}:// "
                    "model is not downloaded)"
                )
        return
    if m.sha256 is not None and uri.is_prefix:
        raise v1.ValidationError(
            f"{where}.sha256: verifies one file or archive; {m.uri!r} is a directory (drop the "
            "checksum or point at the file)"
        )
    st = m.storage
    if st is not None and st.endpoint is not None and uri.scheme not in ("s3", "gs"):
        raise v1.ValidationError(
            f"{where}.storage.endpoint: is for s3:// and gs:// models, not {uri.scheme}://"
        )
    if st is not None and st.region is not None and uri.scheme != "s3":
        raise v1.ValidationError(f"{where}.storage.region: is for s3:// models, not {uri.scheme}://")


def _legacy_extensions(isvc: v1.InferenceService) -> None:
    """v1 has monitoring, networkPolicy and routing as fields: the same keys under ``spec.extensions``
    (an object converted from an older version whose extension did not validate, or a v1 object
    written the old way) are reported, naming the field, never silently ignored."""
    for key, typ in v1.GRADUATED.items():
        raw = (isvc.spec.extensions or {}).get(key)
        if raw is None:
            continue
        where = f"spec.extensions.{key}"
        v1alpha1.decode_as(raw, typ, where)  # an invalid one: the error names the field in it
        raise v1.ValidationError(f"{where}: in v1 this is spec.{v1.GRADUATED_FIELD[key]}; move it there")
    raw = (isvc.spec.extensions or {}).get(v1.STORAGE_EXTENSION)
    if raw is not None:
        where = f"spec.extensions.{v1.STORAGE_EXTENSION}"
        v1alpha1.decode_as(raw, v1.StorageExtension, where)
        fields = ", ".join(sorted({v1.STORAGE_FIELDS[k] for k in raw} or {"spec.predictor.model.storage"}))
        raise v1.ValidationError(f"{where}: in v1beta1 and v1 these are fields ({fields}); move them there")


def _quantities(values: dict[str, Any] | None) -> MappingProxyType[str, str]:
    return MappingProxyType({k: str(v) for k, v in (values or {}).items()})


def to_internal(isvc: v1.InferenceService) -> internal.InferenceService:
    """The internal model of a decoded, validated v1 object."""
    _legacy_extensions(isvc)
    s = isvc.spec
    p = s.predictor
    a = p.autoscaling
    r = p.resources or v1.ResourceRequirements()
    target = a.target_utilization or v1.TargetUtilization()
    zero = a.scale_to_zero or v1.ScaleToZero()
    mon = s.monitoring or v1.Monitoring()
    alerts = mon.alerts or v1.Alerts()
    canary = s.canary
    return internal.InferenceService(
        name=isvc.name,
        namespace=isvc.namespace,
        uid=str(isvc.metadata.get("uid") or ""),
        generation=int(isvc.metadata.get("generation") or 0),
        framework=p.runtime,
        model_uri=p.model.uri,
        model_format=p.model.format,
        model_sha256=p.model.sha256,
        storage=_storage(p.model.storage),
        service_account_name=p.service_account_name,
        port=p.port,
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        resources=internal.ResourceRequirements(_quantities(r.requests), _quantities(r.limits)),
        autoscaling=internal.Autoscaling(
            target.cpu, target.memory, zero.requests_per_replica, zero.cooldown_seconds
        ),
        traffic=None
        if canary is None
        else internal.Traffic(
            version_of(p.model.uri, canary.model.uri),
            canary.traffic_percent,
            canary.model.uri,
            canary.model.format,
            canary.model.sha256,
            _storage(canary.model.storage or p.model.storage),
            analysis=None
            if canary.analysis is None
            else v1_analysis.to_internal(canary.analysis, v1_analysis.spec_hash(canary)),
        ),
        monitoring=internal.Monitoring(
            mon.enabled,
            internal.AlertOverrides(
                alerts.error_ratio, alerts.latency_seconds, alerts.for_, alerts.below_min_for
            ),
        ),
        network_policy=internal.NetworkPolicy((s.network_policy or v1.NetworkPolicy()).enabled),
        router=(s.routing or v1.Routing()).router,
    )


def _storage(st: v1.ModelStorage | None) -> internal.ModelStorage:
    if st is None:
        return internal.ModelStorage()
    return internal.ModelStorage(st.secret_name, st.endpoint, st.region)


def version_of(stable_uri: str, candidate_uri: str) -> str:
    """How status names the candidate: the version token when its URI is the stable one with the last
    path segment replaced (``gs://m/bert/7`` -> ``gs://m/bert/8``: ``8``), else its whole URI."""
    stable_head = stable_uri.rstrip("/").rpartition("/")[0]
    cand_head, _, token = candidate_uri.rstrip("/").rpartition("/")
    if (
        stable_head
        and cand_head == stable_head
        and re.match(v1alpha1.CANARY_TOKEN_PATTERN, token)
        and len(token) <= 63
        and re.match(v1alpha1.VERSIONED_URI_PATTERN, stable_uri)
        and v1alpha1.resolve_canary(stable_uri, token) == candidate_uri
    ):
        return token
    return candidate_uri
