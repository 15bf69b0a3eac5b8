"""Client (over HTTP to a local test server), store indexes, builder validation, informer backoff."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from aiohttp import web
from lightkube.config import client_adapter

from mlops_platform.runtime.caching import informer, store, transforms
from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.control import builder as rbuilder
from mlops_platform.runtime.control import controller, reconcile
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, wait


@dataclasses.dataclass(frozen=True)
class Seen:
    """A request as the test server received it."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    content: bytes


Answer = tuple[int, dict[str, str], bytes]
Handler = Callable[[Seen], Answer]


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
    return status, headers or {}, b"" if body is None else json.dumps(body).encode()


@contextlib.asynccontextmanager
async def served(handler: Handler, auth: httpx.Auth | None = None) -> AsyncIterator[rclient.Client]:
    """A Client talking HTTP to a real server on 127.0.0.1 whose answers come from ``handler``."""

    async def route(request: web.Request) -> web.Response:
        seen = Seen(
            request.method,
            request.path,
            dict(request.query),
            {k.lower(): v for k, v in request.headers.items()},
            await request.read(),
        )
        status, headers, body = handler(seen)
        return web.Response(status=status, headers=headers, body=body, content_type="application/json")

    async with fakes.http_api(route, auth=auth) as client:
        yield client


async def test_429_is_retried_after_retry_after_and_every_request_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Seen] = []
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(s: float) -> None:  # asyncio.sleep everywhere: aiohttp's own sleep(0) too
        if s:
            slept.append(s)
        await real_sleep(0)

    monkeypatch.setattr(rclient.asyncio, "sleep", fake_sleep)

    def handler(req: Seen) -> Answer:
        calls.append(req)
        if len(calls) < 3:
            return answer(429, {"reason": "TooManyRequests"}, {"Retry-After": "2"})
        return answer(200, {"metadata": {"name": "x"}})

    async with served(handler) as c:
        obj = await c.get(resources.CONFIG_MAP, "x", "ns")
    assert obj["metadata"]["name"] == "x"
    assert slept == [2.0, 2.0]
    assert c.requests[("get", "configmaps", 429)] == 2
    assert c.requests[("get", "configmaps", 200)] == 1
    assert calls[0].path == "/api/v1/namespaces/ns/configmaps/x"
    assert calls[0].headers["user-agent"].startswith("mlops-platform/")


async def test_errors_carry_status_reason_and_message() -> None:
    def handler(req: Seen) -> Answer:
        return answer(422, {"kind": "Status", "reason": "Invalid", "message": "spec.port: Invalid value: 0"})

    async with served(handler) as c:
        with pytest.raises(rclient.ApiError) as e:
            await c.create(resources.CONFIG_MAP, {"metadata": {"name": "x"}}, "ns")
    assert e.value.status == 422
    assert e.value.reason == "Invalid"
    assert "spec.port" in e.value.message


async def test_no_http_answer_is_a_transport_error_and_counted_as_code_0() -> None:
    c = rclient.Client(rhttp.Transport("http://127.0.0.1:9", connect_timeout=2))  # discard port: refused
    try:
        with pytest.raises(rclient.TransportError) as e:
            await c.get(resources.CONFIG_MAP, "x", "ns")
    finally:
        await c.close()
    assert isinstance(e.value, OSError)  # what the informer's reconnect loop catches
    assert c.requests[("get", "configmaps", 0)] == 1


async def test_requests_carry_a_client_go_shaped_user_agent_naming_this_process() -> None:
    seen: list[Seen] = []

    def handler(req: Seen) -> Answer:
        seen.append(req)
        return answer(200, {"kind": "DeploymentList", "metadata": {"resourceVersion": "1"}, "items": []})

    async with served(handler) as c:
        await c.list(resources.DEPLOYMENT, "ns")
    agent = seen[0].headers["user-agent"]
    # binary/version (os/arch) identity: the API server's audit log tells replicas apart by it
    assert re.fullmatch(r"mlops-platform/[^ /]+ \([a-z0-9]+/[a-z0-9_]+\) \S+", agent), agent
    assert agent.endswith(f" {socket.gethostname()}_{os.getpid()}")


async def test_apply_is_server_side_apply_with_field_manager_and_force() -> None:
    seen: list[Seen] = []

    def handler(req: Seen) -> Answer:
        seen.append(req)
        return 200, {}, req.content

    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}}
    async with served(handler) as c:
        await c.apply(resources.DEPLOYMENT, dep, field_manager="me")
        await c.apply(resources.DEPLOYMENT, dep, field_manager="me", subresource="status")
    assert seen[0].method == "PATCH"
    assert seen[0].headers["content-type"] == "application/apply-patch+yaml"
    assert seen[0].params["fieldManager"] == "me"
    assert seen[0].params["force"] == "true"
    assert json.loads(seen[0].content) == dep
    assert seen[1].path == "/apis/apps/v1/namespaces/ns/deployments/d/status"
    assert c.requests[("patch", "deployments.apps/status", 200)] == 1


async def test_watch_decodes_events_and_raises_error_events() -> None:
    big = "x" * 300_000  # one event larger than aiohttp's default line limit
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": big}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}},
        {
            "type": "ERROR",
            "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
        },
    ]

    def handler(req: Seen) -> Answer:
        assert req.params["watch"] == "true"
        assert req.params["allowWatchBookmarks"] == "true"
        return 200, {}, "\n".join(json.dumps(x) for x in lines).encode()

    got: list[str] = []
    async with served(handler) as c:

        async def consume() -> None:
            async for ev in c.watch(resources.CONFIG_MAP, "ns", resource_version="1", timeout_seconds=5):
                got.append(ev["type"])
                if ev["type"] == "ADDED":
                    assert ev["object"]["data"]["k"] == big

        with pytest.raises(rclient.ApiError) as e:
            await consume()
    assert got == ["ADDED", "BOOKMARK"]
    assert e.value.gone


async def test_a_401_rereads_a_rotated_token_file_and_resends(tmp_path: Path) -> None:
    """lightkube's in-cluster auth (a token file the kubelet rotates) driven by the transport."""
    token = tmp_path / "token"
    token.write_text("old")
    seen: list[str] = []

    def handler(req: Seen) -> Answer:
        seen.append(req.headers["authorization"])
        if req.headers["authorization"] != "Bearer new":
            token.write_text("new")  # rotated meanwhile
            return answer(401, {"reason": "Unauthorized"})
        return answer(200, {"metadata": {"name": "x"}})

    async with served(handler, auth=client_adapter.BearerTokenFileAuth(str(token))) as c:
        await c.get(resources.CONFIG_MAP, "x", "ns")
        await c.get(resources.CONFIG_MAP, "x", "ns")
    assert seen == ["Bearer old", "Bearer new", "Bearer new"]
    assert c.requests[("get", "configmaps", 200)] == 2  # the 401 is the transport's, not a retry


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
    assert s.writes == 5  # four inserts and a replacement; a delete puts nothing in


def test_builder_reports_every_misconfiguration_at_once() -> None:
    class NotAReconciler:
        pass

    cache = object.__new__(type("C", (), {}))
    b = rbuilder.Builder("", cache)  # type: ignore[arg-type]
    b.with_options(max_concurrent_reconciles=0)
    with pytest.raises(rbuilder.BuildError) as e:
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


def test_the_default_transform_drops_managed_fields_and_shares_short_strings() -> None:
    import msgspec

    raw = msgspec.json.encode(
        {
            "metadata": {"name": "web", "labels": {"app": "web"}, "managedFields": [{"manager": "x"}]},
            "spec": {"containers": [{"image": "example.com/server:1", "args": ["x" * 100]}]},
        }
    )
    a, b = (transforms.compact(msgspec.json.decode(raw)) for _ in range(2))
    assert "managedFields" not in a["metadata"]
    assert (
        a
        == b
        == {
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"containers": [{"image": "example.com/server:1", "args": ["x" * 100]}]},
        }
    )
    ca, cb = a["spec"]["containers"][0], b["spec"]["containers"][0]
    assert ca["image"] is cb["image"] and a["metadata"]["labels"]["app"] is b["metadata"]["labels"]["app"]
    assert ca["args"][0] is not cb["args"][0]  # long strings (scripts, certificates) are left alone
