"""Conversion between the served versions of InferenceService: v1 is the hub, the others are spokes.

Contract:
- :func:`convert` turns one object of any served version into another. Every conversion goes
  through the hub: ``v1alpha1 -> v1 -> v1beta1``. Only ``apiVersion``, ``spec`` and the annotation
  :data:`ANNOTATION` change; ``status`` (the same type in every version), the other metadata and
  unknown top-level keys are kept as they are.
- **Lossless.** A spoke's ``up`` and ``down`` functions map what both versions can say; what the
  target cannot say is kept, per top-level spec key, in :data:`ANNOTATION` (a JSON object: version
  -> the keys whose value the target version cannot reproduce, ``null`` for "absent"), as Cluster
  API's ``conversion-data`` does. Converting back restores them when the object was not changed in
  between (checked by converting the restored object forward again and comparing); a stale entry is
  dropped. So A -> B -> A is the identity for every valid object of every version.
- When an object was edited in a spoke that cannot say everything, the hub-only settings it could
  not see (v1's memory target and scale-to-zero policy, formats, extra resources) are kept from
  the annotation, as far as they still apply (the candidate's format, checksum and storage while
  its URI stays): an edit in an old version does not silently reset
  what a newer version set.
- Bad input raises :class:`ConversionError` naming the field; it never raises anything else for a
  JSON object (the webhook turns it into a ``Failure`` result).
- Pure: no I/O, deterministic, the input is not modified.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from mlops_platform.api import internal, v1, v1_decode, v1_rules, v1alpha1, v1beta1

JSON = dict[str, Any]
GROUP = v1alpha1.GROUP
HUB = v1.VERSION
#: served versions, oldest first
VERSIONS = (v1alpha1.VERSION, v1beta1.VERSION, v1.VERSION)
ANNOTATION = f"{GROUP}/conversion-data"
GPU = internal.GPU_RESOURCE
_ROOTS: dict[str, type[msgspec.Struct]] = {
    v1alpha1.VERSION: v1alpha1.InferenceService,
    v1beta1.VERSION: v1beta1.InferenceService,
    v1.VERSION: v1.InferenceService,
}


class ConversionError(ValueError):
    """An object that cannot be converted; the message names the field."""


# -- the spokes ------------------------------------------------------------------------------------


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
        try:
            uri = v1alpha1.resolve_canary(a["modelUri"], traffic["canaryVersion"])
        except v1alpha1.ValidationError as e:
            raise ConversionError(str(e)) from None
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


_SPOKES: dict[str, tuple[Callable[[JSON], JSON], Callable[[JSON], JSON]]] = {
    v1alpha1.VERSION: (_alpha_up, _alpha_down),
    v1beta1.VERSION: (_beta_up, _beta_down),
}


def _keep_hub_only(spoke: str, fresh: JSON, kept: JSON) -> JSON:
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
        was_res = was.get("resources") or {}
        for part in ("requests", "limits"):
            extra = {k: v for k, v in (was_res.get(part) or {}).items() if k not in ("cpu", "memory", GPU)}
            if extra:
                res = p.setdefault("resources", {})
                res[part] = {**extra, **(res.get(part) or {})}
    return out


# -- the stash ------------------------------------------------------------------------------------


def _difference(original: JSON, recomputed: JSON) -> JSON:
    """The top-level keys of ``original`` that ``recomputed`` does not reproduce (None: absent)."""
    keys = sorted(set(original) | set(recomputed))
    return {k: original.get(k) for k in keys if original.get(k) != recomputed.get(k)}


def _patched(spec: JSON, difference: JSON) -> JSON:
    out = dict(spec)
    for k, v in difference.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _to_hub(version: str, spec: JSON, stash: JSON) -> JSON:
    if version == HUB:
        return spec
    up, down = _SPOKES[version]
    # edited in the spoke since: keep what only v1 could say
    return _stashed(spec, stash, up, down, HUB, version, lambda hub, kept: _keep_hub_only(version, hub, kept))


def _from_hub(version: str, hub: JSON, stash: JSON) -> JSON:
    if version == HUB:
        return hub
    up, down = _SPOKES[version]
    return _stashed(hub, stash, down, up, version, HUB, lambda out, kept: out)


def _stashed(
    spec: JSON,
    stash: JSON,
    there: Callable[[JSON], JSON],
    back: Callable[[JSON], JSON],
    kept_at: str,
    lost_at: str,
    edited: Callable[[JSON, JSON], JSON],
) -> JSON:
    """``there(spec)``, losslessly: with the difference stashed under ``kept_at`` by the conversion
    that made ``spec`` applied when ``back`` of the result is still ``spec`` (unchanged since:
    exactly what it came from), else ``edited(converted, restored)``; what ``back`` of the result
    does not reproduce of ``spec`` is stashed under ``lost_at``."""
    out = there(spec)
    kept = stash.pop(kept_at, None)
    if isinstance(kept, dict):
        restored = _patched(out, kept)
        out = restored if _safe(back, restored) == spec else edited(out, restored)
    lost = _difference(spec, back(out))
    if lost:
        stash[lost_at] = lost
    return out


def _safe(fn: Callable[[JSON], JSON], spec: JSON) -> JSON | None:
    """``fn(spec)``, or None when a remembered value no longer fits (a stale annotation)."""
    try:
        return fn(spec)
    except (KeyError, TypeError, AttributeError, ConversionError):
        return None


# -- objects --------------------------------------------------------------------------------------


def version_of(obj: JSON) -> str:
    """The served version of ``obj`` (``ConversionError`` naming ``apiVersion`` otherwise)."""
    api_version = obj.get("apiVersion")
    group, _, version = str(api_version).partition("/")
    if group != GROUP or version not in VERSIONS:
        raise ConversionError(
            f"apiVersion: {api_version!r} is not one of {', '.join(f'{GROUP}/{v}' for v in VERSIONS)}"
        )
    return version


def check(obj: JSON) -> str:
    """Validate ``obj``'s shape for its version (types, ranges, required fields); return the version."""
    if not isinstance(obj, dict):
        raise ConversionError(f"object: expected a JSON object, got {type(obj).__name__}")
    version = version_of(obj)
    if obj.get("kind") != v1alpha1.KIND:
        raise ConversionError(f"kind: expected {v1alpha1.KIND!r}, got {obj.get('kind')!r}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise ConversionError("metadata: expected an object")
    annotations = metadata.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        raise ConversionError("metadata.annotations: expected a map of strings")
    spec = obj.get("spec")
    if version == v1alpha1.VERSION and isinstance(spec, dict) and _runtime_name(spec.get("framework")):
        # a runtime v1alpha1's enum lacks (one a platform team added, set in v1) is shown as it is,
        # the way Kubernetes shows a newer enum value in an older version; admission still refuses
        # it in a v1alpha1 write
        spec = {**spec, "framework": "triton"}
    shape = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {}, "spec": spec}
    try:
        msgspec.convert(shape, _ROOTS[version], strict=True)
    except msgspec.ValidationError as e:
        raise ConversionError(f"{obj['apiVersion']}: " + str(e).replace("`$.", "`")) from None
    return version


def _runtime_name(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) <= 63 and re.match(v1_rules.RUNTIME_PATTERN, value) is not None
    )


def _read_stash(metadata: JSON) -> JSON:
    raw = (metadata.get("annotations") or {}).get(ANNOTATION)
    if raw is None:
        return {}
    try:
        stash = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        stash = None
    if not isinstance(stash, dict):
        raise ConversionError(f"metadata.annotations[{ANNOTATION}]: not a JSON object (edited by hand?)")
    return stash


def convert(obj: JSON, api_version: str) -> JSON:
    """``obj`` (any served version) as ``api_version``; raises :class:`ConversionError` naming the field."""
    source = check(obj)
    target = version_of({"apiVersion": api_version})
    if source == target:
        return copy.deepcopy(obj)
    metadata = copy.deepcopy(obj["metadata"])
    stash = _read_stash(metadata)
    spec = copy.deepcopy(obj["spec"])
    hub = _to_hub(source, spec, stash)
    out_spec = _from_hub(target, hub, stash)
    annotations = dict(metadata.get("annotations") or {})
    annotations.pop(ANNOTATION, None)
    if stash:
        annotations[ANNOTATION] = json.dumps(stash, sort_keys=True, separators=(",", ":"))
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    out = copy.deepcopy(obj)
    out.update(apiVersion=f"{GROUP}/{target}", metadata=metadata, spec=out_spec)
    return out


def to_hub(obj: JSON) -> JSON:
    """``obj`` as v1 (what the reconciler reads)."""
    return convert(obj, v1.API_VERSION)
