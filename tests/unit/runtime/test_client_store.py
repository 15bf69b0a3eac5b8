"""Client (over a mock transport), store indexes, builder validation, informer backoff."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest

from mlops_platform.runtime.caching import informer, store
from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.control import controller, reconcile
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, wait


def _client(handler: Any) -> rclient.Client:
    return rclient.Client(
        httpx.AsyncClient(base_url="https://k8s.test", transport=httpx.MockTransport(handler))
    )


async def test_429_is_retried_after_retry_after_and_every_request_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[httpx.Request] = []
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(rclient.asyncio, "sleep", fake_sleep)

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        if len(calls) < 3:
            return httpx.Response(429, headers={"Retry-After": "2"}, json={"reason": "TooManyRequests"})
        return httpx.Response(200, json={"metadata": {"name": "x"}})

    c = _client(handler)
    obj = await c.get(resources.CONFIG_MAP, "x", "ns")
    assert obj["metadata"]["name"] == "x"
    assert slept == [2.0, 2.0]
    assert c.requests[("get", "configmaps", 429)] == 2
    assert c.requests[("get", "configmaps", 200)] == 1
    assert str(calls[0].url) == "https://k8s.test/api/v1/namespaces/ns/configmaps/x"


async def test_errors_carry_status_reason_and_message() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json={"kind": "Status", "reason": "Invalid", "message": "spec.port: Invalid value: 0"}
        )

    c = _client(handler)
    with pytest.raises(rclient.ApiError) as e:
        await c.create(resources.CONFIG_MAP, {"metadata": {"name": "x"}}, "ns")
    assert e.value.status == 422
    assert e.value.reason == "Invalid"
    assert "spec.port" in e.value.message


async def test_apply_is_server_side_apply_with_field_manager_and_force() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json=json.loads(req.content))

    c = _client(handler)
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}}
    await c.apply(resources.DEPLOYMENT, dep, field_manager="me")
    await c.apply(resources.DEPLOYMENT, dep, field_manager="me", subresource="status")
    assert seen[0].method == "PATCH"
    assert seen[0].headers["content-type"] == "application/apply-patch+yaml"
    assert seen[0].url.params["fieldManager"] == "me"
    assert seen[0].url.params["force"] == "true"
    assert seen[1].url.path == "/apis/apps/v1/namespaces/ns/deployments/d/status"
    assert c.requests[("patch", "deployments.apps/status", 200)] == 1


async def test_watch_decodes_events_and_raises_error_events() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}},
        {
            "type": "ERROR",
            "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
        },
    ]

    def handler(req: httpx.Request) -> httpx.Response:
        assert req.url.params["watch"] == "true"
        assert req.url.params["allowWatchBookmarks"] == "true"
        return httpx.Response(200, content="\n".join(json.dumps(x) for x in lines).encode())

    c = _client(handler)
    got: list[str] = []

    async def consume() -> None:
        async for ev in c.watch(resources.CONFIG_MAP, "ns", resource_version="1", timeout_seconds=5):
            got.append(ev["type"])

    with pytest.raises(rclient.ApiError) as e:
        await consume()
    assert got == ["ADDED", "BOOKMARK"]
    assert e.value.gone


def _obj(name: str, ns: str | None = "ns", owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    if owner:
        meta["ownerReferences"] = [
            {"uid": owner, "controller": True, "kind": "X", "name": "o", "apiVersion": "v1"}
        ]
    return {"metadata": meta}


def test_store_indexes_follow_updates_and_deletes() -> None:
    s = store.Store()
    s.upsert(_obj("a", owner="u1"))
    s.upsert(_obj("b", owner="u1"))
    s.upsert(_obj("c", ns="other", owner="u2"))
    s.upsert(_obj("node", ns=None))
    assert sorted(o["metadata"]["name"] for o in s.by_index(store.OWNER_INDEX, "u1")) == ["a", "b"]
    s.upsert(_obj("b", owner="u2"))  # owner changed: re-indexed
    assert [o["metadata"]["name"] for o in s.by_index(store.OWNER_INDEX, "u1")] == ["a"]
    s.delete(_obj("a"))
    assert s.by_index(store.OWNER_INDEX, "u1") == []
    assert "u1" not in s._indices[store.OWNER_INDEX]  # an emptied index value is dropped, not kept
    assert s.get(None, "node") is not None
    assert [o["metadata"]["name"] for o in s.by_index(store.NAMESPACE_INDEX, "other")] == ["c"]
    s.add_indexers({"by-name-length": lambda o: (str(len(o["metadata"]["name"])),)})
    assert {o["metadata"]["name"] for o in s.by_index("by-name-length", "1")} == {"b", "c"}


def test_builder_reports_every_misconfiguration_at_once() -> None:
    class NotAReconciler:
        pass

    cache = object.__new__(type("C", (), {}))
    b = controller.Builder("", cache)  # type: ignore[arg-type]
    b.with_options(max_concurrent_reconciles=0)
    with pytest.raises(controller.BuildError) as e:
        b.build(NotAReconciler())  # type: ignore[arg-type]
    msg = str(e.value)
    assert "needs a name" in msg
    assert "exactly one for_()" in msg
    assert "max_concurrent_reconciles" in msg
    assert "no reconcile" in msg


def test_owner_mapper_maps_only_the_controller_owner_of_the_kind() -> None:
    mapper = controller.owner_mapper(resources.DEPLOYMENT)
    child = {
        "metadata": {
            "namespace": "ns",
            "name": "rs",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Deployment",
                    "name": "wrong-group",
                    "uid": "1",
                    "controller": True,
                },
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "2",
                    "controller": True,
                },
            ],
        }
    }
    assert list(mapper(child)) == [reconcile.Request("ns", "web")]
    child["metadata"]["ownerReferences"][1]["controller"] = False
    assert list(mapper(child)) == []


class _OpenWatch(fakes.FakeClient):
    """LISTs answer from the fake (or fail as told); a WATCH stays open and sends nothing."""

    async def watch(
        self, res: rclient.Resource, namespace: str | None = None, **kw: Any
    ) -> AsyncIterator[Any]:
        self._call("watch", res, None, namespace)
        await asyncio.Event().wait()
        yield {}


async def test_the_informer_backs_off_list_failures_on_its_clock() -> None:
    clock, client = FakeClock(), _OpenWatch()
    client.fail("list", "configmaps", status=500, times=2)
    inf = informer.Informer(client, resources.CONFIG_MAP, namespace="ns", resync_period=0, clock=clock)
    inf.start()
    waits: list[float] = []
    try:
        for failed in (1, 2):
            # the informer has failed `failed` times and sleeps on the fake clock
            await wait.until(
                lambda failed=failed: len(client.calls) == failed and clock.pending_timers() == 1,
                timeout=5,
                interval=0.001,
                what=f"backoff sleep after failure {failed}",
            )
            deadline = clock.next_deadline()
            assert deadline is not None
            assert isinstance(inf.last_error, rclient.ApiError) and inf.last_error.status == 500
            waits.append(deadline - clock.now())
            clock.step(waits[-1] - 0.001)
            assert clock.pending_timers() == 1  # not woken before the deadline
            assert [c.verb for c in client.calls] == ["list"] * failed
            clock.step(0.002)  # past the deadline (more than float rounding of the two steps)
        await inf.wait_for_sync(timeout=5)  # a guard against hanging, not synchronisation
    finally:
        await inf.stop()
    assert 0.8 <= waits[0] <= 1.6 and 1.6 <= waits[1] <= 3.2  # 0.8 s doubling, up to 100 % jitter
    assert [c.verb for c in client.calls] == ["list", "list", "list", "watch"]
    assert inf.last_error is None
