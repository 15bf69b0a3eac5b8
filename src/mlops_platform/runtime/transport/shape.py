"""Decode only the fields a reader keeps: LIST pages and watch events parsed into plain dicts that
hold an object's ``apiVersion``, ``kind``, ``metadata`` without ``managedFields``, and the top-level
fields a :class:`Shape` names (whole, or only some of their keys); the parser skips the rest
without building it.

Why: an informer that drops ``managedFields`` and most of a pod's spec after decoding has paid
for building them first. ``managedFields`` is a tree of small dicts (about half of a Deployment's
and of an InferenceService's JSON in a watch event); msgspec decodes into a ``TypedDict`` and skips
keys the type does not name at the parser, so nothing of them is allocated (a Deployment event
decodes 2.2 times as fast, an InferenceService's or a shaped pod's about 3 times,
``docs/measurements.md``). The result is the same ``dict`` a full decode gives, minus what was
skipped.

A shape is opt-in per resource (``Cache.shape``): a generic decoder cannot know a kind's top-level
fields (a ConfigMap's ``data``, an EndpointSlice's ``endpoints``), and a field a shape leaves out is
absent from every object the cache holds. An error answer (an ``ERROR`` watch event, a non-2xx
LIST) is decoded whole: a ``Status`` keeps its ``code``, ``reason``, ``message`` and ``details``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypedDict, cast

import msgspec

#: what a shape keeps of a field: ``None`` the whole value, a mapping only those keys (nested alike)
Fields = Mapping[str, "Fields | None"]

#: ObjectMeta (k8s.io/apimachinery meta/v1) without ``managedFields``
META: Fields = dict.fromkeys(
    (
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
        "annotations", "ownerReferences", "finalizers",
    )
)  # fmt: skip

_full = msgspec.json.Decoder()


def decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
    """``data`` decoded by a shape's ``decoder``, or whole where a value does not fit the shape (a
    ``null`` where it names keys): never less than the shape keeps."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        return _full.decode(data)


def _typed(name: str, fields: Fields) -> Any:
    """A ``TypedDict`` (not total) of ``fields``: ``Any`` where a field is kept whole."""
    members = {k: Any if v is None else _typed(f"{name}_{k}", v) for k, v in fields.items()}
    return cast(Any, TypedDict)(name, members, total=False)


@dataclasses.dataclass(frozen=True)
class Shape:
    """The decoders of a LIST page, of a watch event line and of one object (a write's answer)
    into the fields a shape keeps."""

    page: msgspec.json.Decoder[Any]
    _event: msgspec.json.Decoder[Any]
    object: msgspec.json.Decoder[Any]

    def event(self, line: bytes) -> dict[str, Any]:
        """A watch event: its object shaped, unless it is an ``ERROR`` (a Status: decoded whole)."""
        event: dict[str, Any] = decode(self._event, line)
        if event.get("type") == "ERROR":
            return cast(dict[str, Any], _full.decode(line))
        return event


def shape(fields: Fields) -> Shape:
    """The :class:`Shape` keeping ``apiVersion``, ``kind``, ``metadata`` (:data:`META`) and
    ``fields``; e.g. ``shape({"spec": {"nodeName": None}, "status": None})`` keeps of a pod its
    node and its status."""
    obj = _typed("Object", {"apiVersion": None, "kind": None, "metadata": META, **fields})
    page = cast(Any, TypedDict)(
        "Page", {"apiVersion": Any, "kind": Any, "metadata": Any, "items": cast(Any, list)[obj]}, total=False
    )
    event = cast(Any, TypedDict)("Event", {"type": Any, "object": obj}, total=False)
    return Shape(msgspec.json.Decoder(page), msgspec.json.Decoder(event), msgspec.json.Decoder(obj))


#: the shape of kinds whose top level is ``spec`` and ``status`` (Deployments, Services, custom
#: resources...), kept whole
SPEC_AND_STATUS = shape({"spec": None, "status": None})
