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
  its URI stays, and its analysis while its URI stays and no percent is set by hand): an edit in an
  old version does not silently reset what a newer version set.
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

from mlops_platform.api import spokes, v1, v1_rules, v1alpha1, v1beta1

JSON = dict[str, Any]
GROUP = v1alpha1.GROUP
HUB = v1.VERSION
#: served versions, oldest first
VERSIONS = (v1alpha1.VERSION, v1beta1.VERSION, v1.VERSION)
ANNOTATION = f"{GROUP}/conversion-data"
_ROOTS: dict[str, type[msgspec.Struct]] = {
    v1alpha1.VERSION: v1alpha1.InferenceService,
    v1beta1.VERSION: v1beta1.InferenceService,
    v1.VERSION: v1.InferenceService,
}


class ConversionError(ValueError):
    """An object that cannot be converted; the message names the field."""


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
    up, down = spokes.SPOKES[version]

    def edited(hub: JSON, kept: JSON) -> JSON:  # edited in the spoke since: keep what only v1 could say
        return spokes.keep_hub_only(version, hub, kept)

    return _stashed(spec, stash, up, down, HUB, version, edited)


def _from_hub(version: str, hub: JSON, stash: JSON) -> JSON:
    if version == HUB:
        return hub
    up, down = spokes.SPOKES[version]
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
    except (KeyError, TypeError, AttributeError, ConversionError, v1alpha1.ValidationError):
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
    try:
        hub = _to_hub(source, spec, stash)
        out_spec = _from_hub(target, hub, stash)
    except v1alpha1.ValidationError as e:  # a v1alpha1 canary version that does not resolve
        raise ConversionError(str(e)) from None
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
