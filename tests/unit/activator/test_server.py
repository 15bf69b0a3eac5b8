"""The activator's proxy and admin endpoints, on loopback: a real aiohttp backend stands in for the
model server, requests go through the activator's own HTTP server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import aiohttp
import prometheus_client
import pytest
from aiohttp import web

from mlops_platform.activator import server, waiting
from mlops_platform.activator.target import Target
from mlops_platform.testing import wait

IRIS = Target("ml", "iris-predictor")
HOST = {"Host": "iris-predictor.ml.svc"}


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"127.0.0.1:{port}"


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": str(request.rel_url),
            "body": body.decode(),
            "x": request.headers.get("X-Test"),
        },
        status=201,
        headers={"X-Model": "iris"},
    )


@dataclasses.dataclass
class Stack:
    room: waiting.Room
    metrics: server.Metrics
    activator: str  # the proxy's address
    admin: str
    backend: str  # the model server's


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    backend_app = web.Application()
    backend_app.router.add_route("*", "/{tail:.*}", _echo)
    backend, backend_addr = await _serve(backend_app)
    room = waiting.Room()
    metrics = server.Metrics(prometheus_client.CollectorRegistry())
    proxy, proxy_addr = await _serve(
        server.proxy_app(room, metrics, hold=2.0, own=Target("mlops-system", "mlops-activator"))
    )
    admin, admin_addr = await _serve(server.admin_app(room, metrics))
    yield Stack(room, metrics, proxy_addr, admin_addr, backend_addr)
    for r in (proxy, admin, backend):
        await r.cleanup()


async def test_a_request_for_a_ready_service_is_forwarded_as_it_came(stack: Stack) -> None:
    stack.room.set_ready(IRIS, [stack.backend])
    async with aiohttp.ClientSession() as c:
        url = f"http://{stack.activator}/v2/models/iris/infer?a=1"
        async with c.post(url, data=b'{"inputs": []}', headers={**HOST, "X-Test": "kept"}) as r:
            assert r.status == 201 and r.headers["X-Model"] == "iris"
            got = await r.json()
    assert got == {
        "method": "POST",
        "path": "/v2/models/iris/infer?a=1",
        "body": '{"inputs": []}',
        "x": "kept",
    }


async def test_a_request_at_zero_is_held_counted_for_keda_and_answered_once_ready(stack: Stack) -> None:
    async with aiohttp.ClientSession() as c:
        held = asyncio.create_task(c.get(f"http://{stack.activator}/v2/health/ready", headers=HOST))
        admin = f"http://{stack.admin}/v1/held/ml/iris-predictor"

        async def counted() -> bool:
            async with c.get(admin) as r:
                return bool(await r.json() == {"held": 1})

        await wait.until(counted, timeout=2, interval=0.01, what="KEDA's count of held requests")
        stack.room.set_ready(IRIS, [stack.backend])
        async with await held as r:
            assert r.status == 201 and (await r.json())["path"] == "/v2/health/ready"
        async with c.get(admin) as r:
            assert (await r.json()) == {"held": 0}


async def test_no_ready_endpoint_within_the_hold_is_a_503_saying_so(stack: Stack) -> None:
    async with aiohttp.ClientSession() as c, c.get(f"http://{stack.activator}/x", headers=HOST) as r:
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        assert "ml/iris-predictor had no ready endpoint within 2s" in await r.text()
    assert stack.metrics.requests.labels("not_ready")._value.get() == 1


async def test_a_request_for_no_service_is_a_404_saying_how_to_address_one(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession() as c,
        c.get(f"http://{stack.activator}/x", headers={"Host": "10.0.0.1"}) as r,
    ):
        assert r.status == 404 and "Host: NAME.NAMESPACE.svc" in await r.text()


async def test_an_endpoint_that_refuses_is_a_502_naming_it(stack: Stack) -> None:
    stack.room.set_ready(IRIS, ["127.0.0.1:1"])
    async with aiohttp.ClientSession() as c, c.get(f"http://{stack.activator}/x", headers=HOST) as r:
        assert r.status == 502 and "endpoint 127.0.0.1:1 unreachable" in await r.text()
    async with aiohttp.ClientSession() as c, c.get(f"http://{stack.admin}/metrics") as r:
        assert 'mlops_activator_requests_total{result="unreachable"} 1.0' in await r.text()


async def test_readyz_answers_503_naming_what_it_waits_for_until_it_can_park() -> None:
    """The kubelet's readiness probe: an activator whose watches have not synced (a missing RBAC
    rule: 403 on the list) gets no traffic and says why; /healthz (liveness) is 200 all along."""
    waiting_for: list[str | None] = ["parked Services' slices (403 Forbidden)"]
    metrics = server.Metrics(prometheus_client.CollectorRegistry())
    admin, addr = await _serve(server.admin_app(waiting.Room(), metrics, lambda: waiting_for[0]))
    try:
        async with aiohttp.ClientSession() as c:
            async with c.get(f"http://{addr}/readyz") as r:
                assert r.status == 503 and "parked Services' slices (403 Forbidden)" in await r.text()
            async with c.get(f"http://{addr}/healthz") as r:
                assert r.status == 200
            waiting_for[0] = None
            async with c.get(f"http://{addr}/readyz") as r:
                assert r.status == 200
    finally:
        await admin.cleanup()
