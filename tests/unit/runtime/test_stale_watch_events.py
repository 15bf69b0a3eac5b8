"""A watch event older than the cached object is dropped, never stored.

Found by the full API-server-restart scenario (``tests/reliability/test_control_plane_faults.py``):
after kube-apiserver restarted, the InferenceService watch resumed and, until it got its 410 23 s
later, delivered older versions of objects between newer ones. The cache went back and forth between
generation 4 and 5 of three objects; the operator reconciled each version in turn (rewriting the
Deployment and writing ``observedGeneration`` 4 after 5, a status regression) about twenty times.
Since KEP-5504 (GA in Kubernetes 1.35) the resourceVersions of one resource compare as integers.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from mlops_platform.runtime.caching import informer
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, wait


def _cm(rv: str, value: str, name: str = "a") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "data": {"v": value},
    }


async def test_an_event_older_than_the_cached_object_is_dropped() -> None:
    watches: list[str] = []
    events = [
        {"type": "MODIFIED", "object": _cm("15", "old")},  # older than the listed version 20
        {"type": "ADDED", "object": _cm("16", "x", name="b")},  # a new object: stored
        {"type": "MODIFIED", "object": _cm("25", "newer")},
        {"type": "MODIFIED", "object": _cm("21", "new")},  # older than 25
    ]

    async def route(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            listed = {
                "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "20"},
                "items": [_cm("20", "new")],
            }
            return web.Response(body=json.dumps(listed), content_type="application/json")
        watches.append(request.query.get("resourceVersion", ""))
        body = "".join(json.dumps(e) + "\n" for e in events) if len(watches) == 1 else ""
        return web.Response(body=body.encode(), content_type="application/json")

    seen: list[tuple[str, str]] = []

    class Recorder:
        def on_add(self, obj: dict[str, Any]) -> None:
            pass

        def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
            seen.append((new["metadata"]["name"], new["data"]["v"]))

        def on_delete(self, obj: dict[str, Any]) -> None:
            pass

    async with fakes.http_api(route) as c:
        inf = informer.Informer(c, resources.CONFIG_MAP, namespace="ns", resync_period=0)
        inf.add_event_handler(Recorder())
        inf.start()
        try:
            await wait.until(lambda: len(watches) >= 2, timeout=10, what="the first watch read to its end")
        finally:
            await inf.stop()
    cached = inf.store.get("ns", "a")
    assert cached is not None and cached["data"] == {"v": "newer"}
    assert seen == [("a", "newer")]  # no handler saw the object go back in time
    assert inf.store.get("ns", "b") is not None
    assert inf.stale_events == 2
    assert watches[1] == "25"  # resumed after the newest event, not after a stale one
