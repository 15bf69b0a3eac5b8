"""Decoding only what a reader keeps (runtime.transport.shape), through the client and the informer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport import shape as rshape
from mlops_platform.testing import fakes

MANAGED = [{"manager": "kube-controller-manager", "fieldsV1": {"f:status": {"f:replicas": {}}}}]

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": {"app": "a"},
        "annotations": {"x": "y"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u0", "controller": True}],
        "deletionTimestamp": "2026-12-04T00:00:00Z",
        "managedFields": MANAGED,
    },
    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    "extra": {"unknown": "top-level field"},
}
POD_SHAPE = rshape.shape({"spec": {"nodeName": None}, "status": None})


def kept(obj: dict[str, Any]) -> dict[str, Any]:
    """What POD_SHAPE must keep of ``obj``: everything but managedFields, the unnamed top-level
    field and the spec's other keys."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {
        **{k: obj[k] for k in ("apiVersion", "kind", "status")},
        "metadata": meta,
        "spec": {"nodeName": "n1"},
    }


def test_an_event_keeps_the_named_fields_and_metadata_but_managed_fields() -> None:
    event = POD_SHAPE.event(json.dumps({"type": "MODIFIED", "object": POD}).encode())
    assert event == {"type": "MODIFIED", "object": kept(POD)}
    assert type(event["object"]["metadata"]) is dict  # plain dicts, as a full decode gives


def test_an_error_event_is_decoded_whole() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410,
              "reason": "Expired", "message": "too old", "details": {"retryAfterSeconds": 2}}  # fmt: skip
    assert POD_SHAPE.event(json.dumps({"type": "ERROR", "object": status}).encode())["object"] == status


def test_a_value_that_does_not_fit_the_shape_is_decoded_whole() -> None:
    odd = {"type": "ADDED", "object": {"metadata": {"name": "p"}, "spec": None, "extra": 1}}
    assert POD_SHAPE.event(json.dumps(odd).encode()) == odd  # never less than the shape keeps


def test_spec_and_status_keeps_both_whole() -> None:
    event = rshape.SPEC_AND_STATUS.event(json.dumps({"type": "ADDED", "object": POD}).encode())
    want = {**kept(POD), "spec": POD["spec"]}
    assert event["object"] == want


async def test_the_client_decodes_list_pages_and_watch_events_into_the_shape() -> None:
    page = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9", "continue": "c"},
            "items": [POD, POD]}  # fmt: skip

    async def route(request: web.Request) -> web.Response:
        if request.query.get("watch") == "true":
            body = json.dumps({"type": "ADDED", "object": POD}).encode()
        elif request.query.get("labelSelector") == "missing":
            body = json.dumps(
                {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}
            ).encode()
            return web.Response(status=404, body=body, content_type="application/json")
        else:
            body = json.dumps(page).encode()
        return web.Response(status=200, body=body, content_type="application/json")

    async with fakes.http_api(route) as client:
        listed = await client.list(resources.POD, "ns", shape=POD_SHAPE)
        assert listed["items"] == [kept(POD), kept(POD)]
        assert listed["metadata"] == page["metadata"]  # the page's own fields are kept
        assert (await client.list(resources.POD, "ns"))["items"] == [POD, POD]  # no shape: whole
        with pytest.raises(rclient.ApiError) as e:  # an error answer keeps its Status
            await client.list(resources.POD, "ns", label_selector="missing", shape=POD_SHAPE)
        assert (e.value.status, e.value.reason, e.value.message) == (404, "NotFound", "gone")
        events = [ev async for ev in client.watch(resources.POD, "ns", shape=POD_SHAPE)]
        assert events == [{"type": "ADDED", "object": kept(POD)}]


async def test_the_cache_hands_the_shape_to_its_informer_before_the_transform() -> None:
    world = fakes.FakeClient()
    world.objects[("pods", "ns", "p")] = POD
    cache = rcache.Cache(world)
    cache.shape(resources.POD, POD_SHAPE)
    seen: list[dict[str, Any]] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append(obj)
        return obj

    cache.transform(resources.POD, transform)
    informer = cache.informer_for(resources.POD)
    assert informer.shape is POD_SHAPE
    await informer._list_and_replace()
    assert seen == [kept(POD)]  # the transform got the shaped object
    assert cache.get(resources.POD, "ns", "p") == kept(POD)
    with pytest.raises(RuntimeError, match="after its informer was created"):
        cache.shape(resources.POD, rshape.SPEC_AND_STATUS)
