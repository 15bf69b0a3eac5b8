"""The probe/metrics HTTP server on loopback: routes, HEAD, 404, 413, 415, 500, keep-alive and stop."""

from __future__ import annotations

import asyncio

import httpx2 as httpx
import pytest

from mlops_platform.runtime.transport import httpserver


async def _ok(method: str, path: str, body: bytes) -> httpserver.Response:
    return 200, "text/plain", f"{method} {len(body)}\n".encode()


async def test_routes_head_404_413_and_stop_closes_keepalive_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(httpserver, "MAX_BODY", 10)
    server = httpserver.HttpServer({"/x": _ok})
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient() as http:
        got = await http.get(f"{base}/x?q=1")
        assert (got.status_code, got.text) == (200, "GET 0\n")
        head = await http.head(f"{base}/x")
        assert head.status_code == 200
        assert head.headers["content-length"] == str(len("HEAD 0\n"))  # the length a GET body would have
        assert head.content == b""
        assert (await http.get(f"{base}/missing")).status_code == 404
        assert (await http.post(f"{base}/x", content=b"0123456789abc")).status_code == 413
        again = await http.post(f"{base}/x", content=b"small")  # a new connection works after a 413
        assert again.text == "POST 5\n"
        # a keep-alive connection is open now: stop() must not wait for the client to go away
        await asyncio.wait_for(server.stop(), 2)


async def test_a_per_server_body_limit_and_accepted_content_types() -> None:
    server = httpserver.HttpServer({"/x": _ok}, max_body=4, content_types=("application/json",))
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient() as http:
            json = {"content-type": "application/json; charset=utf-8"}
            assert (await http.post(f"{base}/x", content=b"{}", headers=json)).text == "POST 2\n"
            assert (
                await http.post(f"{base}/x", content=b"{}", headers={"content-type": "text/plain"})
            ).status_code == 415
            assert (await http.post(f"{base}/x", content=b"{}")).status_code == 415  # none given
            assert (await http.get(f"{base}/x")).status_code == 200  # a GET has no body to check
            assert (await http.post(f"{base}/x", content=b"[1, 2]", headers=json)).status_code == 413
    finally:
        await server.stop()


async def test_a_handler_that_raises_is_a_500_and_the_connection_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(method: str, path: str, body: bytes) -> httpserver.Response:
        raise RuntimeError("boom")

    server = httpserver.HttpServer({"/broken": broken, "/x": _ok})
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient() as http:
            failed = await http.get(f"{base}/broken")
            assert (failed.status_code, failed.text) == (500, "internal error\n")
            assert (await http.get(f"{base}/x")).text == "GET 0\n"
    finally:
        await server.stop()
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["http handler failed"]


async def test_stop_with_grace_answers_on_open_connections_until_their_clients_let_go() -> None:
    """A draining server answers the request in flight AND the next request a client sends on an
    idle keep-alive connection (closing that connection at once races with the request: the API
    server reads EOF and does not retry a POST), each answer saying Connection: close; it stops as
    soon as the last connection is closed, well before the grace ends."""
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(method: str, path: str, body: bytes) -> httpserver.Response:
        started.set()
        await release.wait()
        return 200, "text/plain", b"answered\n"

    server = httpserver.HttpServer({"/slow": slow, "/x": _ok}, reuse_port=True)
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient() as busy, httpx.AsyncClient() as idle:
        assert (await idle.get(f"{base}/x")).status_code == 200  # a keep-alive connection, idle now
        in_flight = asyncio.create_task(busy.get(f"{base}/slow"))
        await asyncio.wait_for(started.wait(), 5)
        stopping = asyncio.create_task(server.stop(grace=60))
        await asyncio.sleep(0)  # stop() closes the listener
        # the idle connection still carries a request (the listener is closed: a new one would fail)
        late = await asyncio.wait_for(idle.post(f"{base}/x", content=b"review"), 5)
        assert (late.status_code, late.text) == (200, "POST 6\n")
        assert late.headers["connection"] == "close"  # its client goes elsewhere next time
        assert not stopping.done()  # the request in flight holds it
        release.set()
        answer = await asyncio.wait_for(in_flight, 5)
        assert (answer.status_code, answer.text) == (200, "answered\n")
        assert answer.headers["connection"] == "close"
        await asyncio.wait_for(stopping, 5)  # every connection closed: no waiting out the 60 s
        with pytest.raises(httpx.TransportError):  # the listener is gone
            await idle.get(f"{base}/x")


async def test_stop_with_grace_gives_up_on_a_request_that_outlasts_it() -> None:
    started = asyncio.Event()

    async def stuck(method: str, path: str, body: bytes) -> httpserver.Response:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = httpserver.HttpServer({"/stuck": stuck})
    await server.start()
    async with httpx.AsyncClient() as http:
        in_flight = asyncio.create_task(http.get(f"http://127.0.0.1:{server.port}/stuck"))
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(server.stop(grace=0.2), 5)  # returns after the grace, not never
        with pytest.raises(httpx.TransportError):
            await asyncio.wait_for(in_flight, 5)
