"""The InferenceService conversion webhook: ``ConversionReview`` (``apiextensions.k8s.io/v1``) in,
``ConversionReview`` out.

Contract (the API server's, ``docs/api-versions.md``):
- the response carries the request's ``uid`` and the objects converted in the request's order, each
  to ``desiredAPIVersion``; only ``apiVersion``, ``spec`` and the labels and annotations of metadata
  change (:mod:`mlops_platform.api.conversion`);
- bad input (not JSON, not a ConversionReview, an object that does not decode) gets a ``Failure``
  result whose message names the object and the field; :func:`review` never raises;
- pure and synchronous: it runs on every replica, leader or not, and needs no cache.
"""

from __future__ import annotations

import json
from typing import Any

from mlops_platform.api import conversion

REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
#: the request body limit the webhook server enforces (the API server sends at most ~3 MiB objects)
MAX_OBJECTS = 10_000


def _response(uid: str, objects: list[dict[str, Any]] | None, message: str | None) -> bytes:
    result: dict[str, Any] = (
        {"status": "Success"} if message is None else {"status": "Failure", "message": message}
    )
    response: dict[str, Any] = {"uid": uid, "result": result}
    if message is None:
        response["convertedObjects"] = objects or []
    return json.dumps(
        {"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview", "response": response},
        separators=(",", ":"),
    ).encode()


def review(body: bytes) -> bytes:
    """The ``ConversionReview`` response to a request body (always a ConversionReview)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        return _response("", None, f"request body: not JSON ({e})")
    if not isinstance(doc, dict):
        return _response("", None, "request body: expected a ConversionReview object")
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    if not isinstance(uid, str) or not uid:
        return _response("", None, "request.uid: missing")
    if doc.get("apiVersion") != REVIEW_API_VERSION or doc.get("kind") != "ConversionReview":
        return _response(
            uid, None, f"apiVersion/kind: expected {REVIEW_API_VERSION} ConversionReview, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}"
        )  # fmt: skip
    assert isinstance(request, dict)
    desired = request.get("desiredAPIVersion")
    if not isinstance(desired, str):
        return _response(uid, None, "request.desiredAPIVersion: missing")
    objects = request.get("objects")
    if not isinstance(objects, list):
        return _response(uid, None, "request.objects: expected a list")
    if len(objects) > MAX_OBJECTS:
        return _response(uid, None, f"request.objects: more than {MAX_OBJECTS}")
    try:
        conversion.version_of({"apiVersion": desired})
    except conversion.ConversionError:
        return _response(uid, None, f"request.desiredAPIVersion: {desired!r} is not served by this webhook")
    converted = []
    for i, obj in enumerate(objects):
        try:
            converted.append(conversion.convert(obj, desired))
        except conversion.ConversionError as e:
            return _response(uid, None, f"{_describe(obj, i)}: {e}")
        except Exception as e:  # a bug must answer Failure, not crash the API server's request
            return _response(uid, None, f"{_describe(obj, i)}: internal error converting: {e!r}")
    return _response(uid, converted, None)


def _describe(obj: Any, index: int) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns = meta.get("namespace")
        return (
            f"request.objects[{index}] ({ns}/{meta['name']})"
            if isinstance(ns, str)
            else f"request.objects[{index}] ({meta['name']})"
        )
    return f"request.objects[{index}]"
