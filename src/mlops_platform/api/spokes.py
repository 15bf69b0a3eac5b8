"""The spokes of InferenceService's conversion (:mod:`~.conversion`): what v1alpha1 and v1beta1
say, mapped to and from the hub v1 (``up``/``down`` per spoke, on specs), and the v1-only settings an
edit made in a spoke keeps from the hub spec the conversion annotation remembers.

Each function is pure and maps what both versions can say; the stash in the annotation keeps the
rest (the conversion's business, not theirs). ``v1alpha1.ValidationError`` (a canary version that
does not resolve) is left to the conversion, which reports it as a ``ConversionError``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec

from mlops_platform.api import internal, v1, v1_decode, v1alpha1, v1beta1

JSON = dict[str, Any]
GPU = internal.GPU_RESOURCE


def _extensions_up(ext: JSON | None, out: JSON) -> None:
    """v1alpha1/v1beta1 ``extensions`` -> v1: the graduated keys become fields when they validate
    (an invalid one stays in ``extensions``, where v1 reports it naming the field)."""
    rest = dict(ext or {})
    for key, typ in v1.GRADUATED.items():
        if key in rest:
            try:
                msgspec.convert(rest[key], typ, strict=True)
            except msgspec.ValidationError:
                continue
            out[v1.GRADUATED_FIELD[key]] = rest.pop(key)
    if rest:
        out["extensions"] = rest


def _extensions_down(hub: JSON, out: JSON) -> None:
    ext = dict(hub.get("extensions") or {})
    for key, field in v1.GRADUATED_FIELD.items():
        if field in hub:
            ext[key] = hub[field]
    if ext:
        out["extensions"] = ext


#: v1alpha1 ``extensions.storage`` keys that v1 says in ``predictor.model.storage``
_STORAGE_KEYS = ("secretName", "endpoint", "region")


def _storage_up(ext: JSON | None, predictor: JSON) -> JSON | None:
    """v1alpha1 ``extensions.storage`` -> v1 ``predictor.model.{sha256, storage}`` and
    ``predictor.serviceAccountName`` when it validates (an invalid one stays in ``extensions``,
    where v1 reports it naming the field); returns the other extensions."""
    if not ext or v1.STORAGE_EXTENSION not in ext:
        return ext
    raw = ext[v1.STORAGE_EXTENSION]
    try:
        msgspec.convert(raw, v1.StorageExtension, strict=True)
    except msgspec.ValidationError:
        return ext
    model = predictor["model"]
    if "sha256" in raw:
        model["sha256"] = raw["sha256"]
    storage = {k: raw[k] for k in _STORAGE_KEYS if k in raw}
    if storage:
        model["storage"] = storage
    if "serviceAccountName" in raw:
        predictor["serviceAccountName"] = raw["serviceAccountName"]
    return {k: v for k, v in ext.items() if k != v1.STORAGE_EXTENSION}


def _storage_down(p: JSON) -> JSON:
    """v1 ``predictor`` -> v1alpha1 ``extensions.storage`` (empty: nothing to say)."""
    model = p.get("model") or {}
    out: JSON = {k: v for k, v in (model.get("storage") or {}).items() if k in _STORAGE_KEYS}
    if "sha256" in model:
        out["sha256"] = model["sha256"]
    if "serviceAccountName" in p:
        out["serviceAccountName"] = p["serviceAccountName"]
    return out


def _alpha_up(a: JSON) -> JSON:
    predictor: JSON = {"model": {"uri": a["modelUri"]}, "runtime": a["framework"]}
    if "port" in a:
        predictor["port"] = a["port"]
    res = a.get("resources") or {}
    requests = {k: res[f] for k, f in (("cpu", "cpuRequest"), ("memory", "memoryRequest")) if f in res}
    limits = {k: res[f] for k, f in (("cpu", "cpuLimit"), ("memory", "memoryLimit")) if f in res}
    gpus = a.get("gpuPerReplica", 0)
    if gpus:
        requests[GPU] = limits[GPU] = gpus  # v1alpha1 always asked for both (the same children)
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        predictor["resources"] = resources
    predictor["autoscaling"] = {k: a[k] for k in ("minReplicas", "maxReplicas") if k in a}
    out: JSON = {"predictor": predictor}
    traffic = a.get("traffic")
    if traffic is not None and traffic.get("canaryVersion"):
        # v1alpha1.ValidationError: the conversion names it as a ConversionError
        uri = v1alpha1.resolve_canary(a["modelUri"], traffic["canaryVersion"])
        out["canary"] = {"model": {"uri": uri}, "trafficPercent": traffic.get("canaryPercent", 0)}
    _extensions_up(_storage_up(a.get("extensions"), predictor), out)
    return out


def _gpu_count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _alpha_down(h: JSON) -> JSON:
    p = h["predictor"]
    a: JSON = {"modelUri": p["model"]["uri"], "framework": p["runtime"], "port": p.get("port", 8080)}
    scaling = p.get("autoscaling") or {}
    a["minReplicas"] = scaling.get("minReplicas", 1)
    a["maxReplicas"] = scaling.get("maxReplicas", 1)
    res = p.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    gpus = _gpu_count(limits.get(GPU, requests.get(GPU, 0)))
    a["gpuPerReplica"] = gpus if gpus is not None and gpus <= 16 else 0
    resources = {
        f: values[k]
        for values, pairs in ((requests, (("cpu", "cpuRequest"), ("memory", "memoryRequest"))),
                              (limits, (("cpu", "cpuLimit"), ("memory", "memoryLimit"))))
        for k, f in pairs
        if k in values
    }  # fmt: skip
    if resources:
        a["resources"] = resources
    canary = h.get("canary")
    if canary is not None:
        a["traffic"] = {  # the version token when the candidate's URI is the stable one's sibling
            "canaryVersion": v1_decode.version_of(p["model"]["uri"], canary["model"]["uri"]),
            "canaryPercent": canary.get("trafficPercent", 0),
        }
    _extensions_down(h, a)
    storage = _storage_down(p)
    if storage:
        a["extensions"] = {**(a.get("extensions") or {}), v1.STORAGE_EXTENSION: storage}
    return a


def _beta_up(b: JSON) -> JSON:
    predictor = dict(b["predictor"])
    scaling = dict(predictor.get("autoscaling") or {})
    cpu = scaling.pop("targetCPUUtilization", None)
    if cpu is not None:
        scaling["targetUtilization"] = {"cpu": cpu}
    predictor["autoscaling"] = scaling
    out: JSON = {"predictor": predictor}
    if "canary" in b:
        out["canary"] = b["canary"]
    _extensions_up(b.get("extensions"), out)
    return out


def _beta_down(h: JSON) -> JSON:
    predictor = dict(h["predictor"])
    hub_scaling = predictor.get("autoscaling") or {}
    scaling = {k: hub_scaling[k] for k in ("minReplicas", "maxReplicas") if k in hub_scaling}
    cpu = (hub_scaling.get("targetUtilization") or {}).get("cpu")
    if cpu is not None:
        scaling["targetCPUUtilization"] = cpu
    predictor["autoscaling"] = scaling
    out: JSON = {"predictor": predictor}
    if "canary" in h:
        out["canary"] = h["canary"]
    _extensions_down(h, out)
    return out


SPOKES: dict[str, tuple[Callable[[JSON], JSON], Callable[[JSON], JSON]]] = {
    v1alpha1.VERSION: (_alpha_up, _alpha_down),
    v1beta1.VERSION: (_beta_up, _beta_down),
}


def keep_hub_only(spoke: str, fresh: JSON, kept: JSON) -> JSON:
    """``fresh`` (converted from an edited spoke) with the v1 settings that spoke cannot say, taken
    from ``kept`` (the hub spec the annotation remembers) where they still apply."""
    out = copy.deepcopy(fresh)
    was = kept.get("predictor")
    if not isinstance(was, dict):
        return out
    p = out["predictor"]
    scaling, was_scaling = p.setdefault("autoscaling", {}), was.get("autoscaling") or {}
    target = dict(was_scaling.get("targetUtilization") or {})
    if spoke == v1beta1.VERSION:
        target.pop("cpu", None)  # v1beta1 says the CPU target
    target.update(scaling.get("targetUtilization") or {})
    if target:
        scaling["targetUtilization"] = target
    if "scaleToZero" in was_scaling and scaling.get("minReplicas", 1) == 0:
        scaling["scaleToZero"] = was_scaling["scaleToZero"]
    if spoke == v1alpha1.VERSION:
        was_model = was.get("model") or {}
        if "format" in was_model and was_model.get("uri") == p["model"]["uri"]:
            p["model"]["format"] = was_model["format"]
        was_canary, canary = kept.get("canary") or {}, out.get("canary")
        was_canary_model = was_canary.get("model") or {}
        if canary is not None and was_canary_model.get("uri") == canary["model"]["uri"]:
            for key in ("format", "sha256", "storage"):  # what v1alpha1 cannot say of its candidate
                if key in was_canary_model:
                    canary["model"][key] = was_canary_model[key]
            if "analysis" in was_canary and not canary.get("trafficPercent"):
                # its analysis too, unless the edit set a percent by hand (which v1 refuses beside one)
                canary["analysis"] = was_canary["analysis"]
        was_res = was.get("resources") or {}
        for part in ("requests", "limits"):
            extra = {k: v for k, v in (was_res.get(part) or {}).items() if k not in ("cpu", "memory", GPU)}
            if extra:
                res = p.setdefault("resources", {})
                res[part] = {**extra, **(res.get(part) or {})}
    return out
