"""The activator's HTTP side (aiohttp): the proxy every parked Service's traffic reaches, and the
admin endpoints KEDA and the kubelet read.

Contract of :func:`proxy_app`:
- a request whose Service cannot be told (:mod:`.target`) is answered 404 with how to address it;
- otherwise it gets a ready endpoint of its Service from the :class:`~.waiting.Room`, held up to
  ``hold`` seconds (503 ``NotReady`` saying so when none comes), and is forwarded there as it came:
  method, path and query, body, headers but the hop-by-hop ones; the answer comes back as the model
  server gave it (status, headers but the hop-by-hop ones, streamed body);
- an endpoint that refuses the connection is a 502 naming it (the next request may get another).

:func:`admin_app`: ``GET /healthz`` (alive); ``GET /readyz`` (its watches synced: it can park);
``GET /v1/held/{namespace}/{service}`` -> ``{"held": N}``, the requests held for that Service now
(KEDA's ``metrics-api`` trigger: any held request wakes it); ``GET /metrics``, its metrics.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import prometheus_client
from aiohttp import web

from mlops_platform.activator import target, waiting

#: headers that belong to one connection, not to the request (RFC 9110 7.6.1), and Host (the
#: endpoint's own is sent)
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "host", "content-length"}
)  # fmt: skip
ROOM = web.AppKey("room", waiting.Room)
SESSION = web.AppKey("session", aiohttp.ClientSession)
HOLD = web.AppKey("hold", float)
OWN = web.AppKey("own", target.Target)


class Metrics:
    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry
        self.requests = prometheus_client.Counter(
            "mlops_activator_requests_total",
            "Requests the activator handled, by result (forwarded, not_ready, no_target, unreachable).",
            ["result"],
            registry=registry,
        )
        self.hold = prometheus_client.Histogram(
            "mlops_activator_hold_seconds",
            "How long a request waited for a ready endpoint.",
            buckets=(0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
            registry=registry,
        )


METRICS = web.AppKey("metrics", Metrics)


def _forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


async def _proxy(request: web.Request) -> web.StreamResponse:
    metrics = request.app[METRICS]
    where = target.of_request(request.headers, request.app[OWN])
    if where is None:
        metrics.requests.labels("no_target").inc()
        return web.Response(status=404, text=target.NO_TARGET + "\n")
    started = time.monotonic()
    try:
        endpoint = await request.app[ROOM].endpoint(where, request.app[HOLD])
    except waiting.NotReady as e:
        metrics.requests.labels("not_ready").inc()
        return web.Response(status=503, text=f"{e}\n", headers={"Retry-After": "1"})
    finally:
        metrics.hold.observe(time.monotonic() - started)
    url = f"http://{endpoint}{request.rel_url}"
    body = await request.read()
    try:
        async with request.app[SESSION].request(
            request.method, url, data=body, headers=_forwarded_headers(request.headers), allow_redirects=False
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for k, v in answer.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    response.headers.add(k, v)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
    except aiohttp.ClientConnectionError as e:
        metrics.requests.labels("unreachable").inc()
        return web.Response(status=502, text=f"{where}: endpoint {endpoint} unreachable: {e}\n")
    metrics.requests.labels("forwarded").inc()
    return response


async def _session(app: web.Application) -> AsyncIterator[None]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        app[SESSION] = session
        yield


def proxy_app(room: waiting.Room, metrics: Metrics, *, hold: float, own: target.Target) -> web.Application:
    """The proxy; ``own``: the activator's own Service."""
    app = web.Application(client_max_size=64 * 2**20)
    app[ROOM], app[METRICS] = room, metrics
    app[HOLD], app[OWN] = hold, own
    app.cleanup_ctx.append(_session)
    app.router.add_route("*", "/{tail:.*}", _proxy)
    return app


def admin_app(
    room: waiting.Room, metrics: Metrics, ready: Callable[[], str | None] = lambda: None
) -> web.Application:
    """``ready``: None once the activator can park (its watches synced), else what it waits for."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        waiting_for = ready()
        if waiting_for is not None:
            return web.Response(status=503, text=f"not ready: {waiting_for}\n")
        return web.Response(text="ok\n")

    async def held(request: web.Request) -> web.Response:
        where = target.Target(request.match_info["namespace"], request.match_info["service"])
        return web.json_response({"held": room.held(where)})

    async def exported(_: web.Request) -> web.Response:
        return web.Response(
            body=prometheus_client.generate_latest(metrics.registry),
            content_type="text/plain",
            charset="utf-8",
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/held/{namespace}/{service}", held)
    app.router.add_get("/metrics", exported)
    return app
