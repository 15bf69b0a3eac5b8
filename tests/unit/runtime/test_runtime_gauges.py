"""The runtime's leak gauges: ``mlops_platform_watches_open`` follows every watch stream the client
opens and ends (however it ends), ``mlops_platform_asyncio_tasks`` the event loop's tasks, both read
at scrape time from the manager's registry."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import generate_latest

from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, wait

EVENTS = [
    {"type": "ADDED", "object": {"metadata": {"name": f"cm-{i}", "resourceVersion": str(10 + i)}}}
    for i in range(3)
]


@contextlib.asynccontextmanager
async def _server() -> AsyncIterator[rclient.Client]:
    """A local HTTP server: a watch of configmaps streams EVENTS and ends; of secrets is a 410."""

    async def route(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/secrets"):
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return web.Response(status=410, body=json.dumps(gone).encode(), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for event in EVENTS:
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    async with fakes.http_api(route) as client:
        yield client


def _sample(registry_text: bytes, name: str) -> float | None:
    for line in registry_text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_watches_open_counts_streams_until_they_end_are_closed_or_fail() -> None:
    metrics = rmetrics.Metrics()
    async with _server() as c:
        metrics.observe_runtime(lambda: None, lambda: c.watches_open)
        assert c.watches_open == 0
        seen = []
        async for event in c.watch(resources.CONFIG_MAP, "ns"):
            seen.append(event)
            assert c.watches_open == 1
            assert _sample(generate_latest(metrics.registry), "mlops_platform_watches_open") == 1
        assert len(seen) == len(EVENTS)
        assert c.watches_open == 0  # the server ended the stream

        two = [c.watch(resources.CONFIG_MAP, "ns"), c.watch(resources.CONFIG_MAP, "ns")]
        for stream in two:
            await anext(stream)
        assert c.watches_open == 2
        await two[0].aclose()  # abandoned by its reader, closed: no longer open
        assert c.watches_open == 1
        await two[1].aclose()
        assert c.watches_open == 0

        with pytest.raises(rclient.ApiError) as gone:
            await anext(c.watch(resources.SECRET, "ns"))
        assert gone.value.status == 410
        assert c.watches_open == 0
        assert _sample(generate_latest(metrics.registry), "mlops_platform_watches_open") == 0


async def test_the_manager_serves_its_loops_tasks_once_running() -> None:
    mgr = rmanager.Manager(
        fakes.FakeClient(), rmanager.Options(health_probe_address=None, metrics_address=None)
    )
    before = generate_latest(mgr.metrics.registry)
    assert _sample(before, "mlops_platform_asyncio_tasks") is None  # no loop to count yet
    assert _sample(before, "mlops_platform_watches_open") == 0
    running = asyncio.create_task(mgr.run())
    try:
        await wait.until(mgr.is_ready, timeout=10, what="manager ready")

        def tasks() -> float | None:
            return _sample(generate_latest(mgr.metrics.registry), "mlops_platform_asyncio_tasks")

        assert tasks() == len(asyncio.all_tasks())
        idle = asyncio.Event()
        extra = [asyncio.create_task(idle.wait()) for _ in range(3)]
        assert tasks() == len(asyncio.all_tasks()) >= 3
        baseline = len(asyncio.all_tasks()) - 3
        idle.set()
        await asyncio.gather(*extra)
        assert tasks() == baseline
    finally:
        mgr.stop()
        await asyncio.wait_for(running, 10)


async def test_the_manager_logs_the_address_each_server_bound(caplog: pytest.LogCaptureFixture) -> None:
    """Port 0 lets the kernel pick (a port picked free beforehand can be taken by another process's
    connection before the bind: a test's operator replica once died of it); the log says which."""
    caplog.set_level("INFO", logger="mlops_platform.runtime.control.manager")
    options = rmanager.Options(health_probe_address=("127.0.0.1", 0), metrics_address=("127.0.0.1", 0))
    mgr = rmanager.Manager(fakes.FakeClient(), options)
    running = asyncio.create_task(mgr.run())
    try:
        await wait.until(mgr.is_ready, timeout=10, what="manager ready")
        served = {r.server: r.address for r in caplog.records if r.getMessage() == "serving"}
        assert served == {
            "health probe": f"127.0.0.1:{mgr.health_port}",
            "metrics": f"127.0.0.1:{mgr.metrics_port}",
        }
        assert 0 not in (mgr.health_port, mgr.metrics_port)
    finally:
        mgr.stop()
        await asyncio.wait_for(running, 10)
