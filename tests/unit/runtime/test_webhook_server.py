"""The TLS webhook server on loopback: verified handshakes, TLS 1.1 refused, a certificate swap seen
by new connections (open ones keep theirs), 503 before a certificate, the request checks, a
handler's exception, controller-runtime's webhook metrics, and the drain on a fake clock (an idle
keep-alive connection answered, not closed; a connection in its handshake served; the grace)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import socket
import ssl
import warnings
from collections.abc import AsyncIterator, Callable

import h11
import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client import CollectorRegistry
from tests.unit.runtime.test_webhook_drain import FakeClock

from mlops_platform.runtime.webhook import drain, keypairs, server

PATH = "/convert"
DER = Encoding.DER
HOUR = dt.timedelta(hours=1)


def pair(name: str) -> tuple[keypairs.KeyPair, keypairs.KeyPair]:
    ca = keypairs.new_ca(name, validity=HOUR)
    return ca, keypairs.new_serving(
        ca, dns_names=("hooks.test.svc",), ip_addresses=("127.0.0.1",), validity=HOUR
    )


def trusting(ca: keypairs.KeyPair | None) -> ssl.SSLContext:
    if ca is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cadata=ca.cert_pem.decode())


class Conn:
    """One HTTP/1.1 connection over TLS (h11), for requests on the same connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.headers: dict[bytes, bytes] = {}  # the last answer's

    async def closed_by_server(self) -> bool:
        """Whether the server closes the connection (the read ends) rather than sending anything."""
        return await asyncio.wait_for(self.reader.read(1), 10) == b""

    @property
    def peer(self) -> bytes:
        ssl_object: ssl.SSLObject = self.writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        assert der is not None
        return der

    async def request(
        self,
        body: bytes = b"{}",
        *,
        method: str = "POST",
        ctype: str = "application/json",
        path: str = PATH,
    ) -> tuple[int, str, bytes]:
        await self.send_head(len(body), method=method, ctype=ctype, path=path)
        await self.send_body(body)
        return await self.answer()

    async def send_head(
        self, length: int, *, method: str = "POST", ctype: str = "application/json", path: str = PATH
    ) -> None:
        headers = [("host", "127.0.0.1"), ("content-type", ctype), ("content-length", str(length))]
        self.writer.write(self.h11.send(h11.Request(method=method, target=path, headers=headers)) or b"")
        await self.writer.drain()

    async def send_body(self, body: bytes) -> None:
        self.writer.write(self.h11.send(h11.Data(data=body)) or b"")
        self.writer.write(self.h11.send(h11.EndOfMessage()) or b"")
        await self.writer.drain()

    async def answer(self) -> tuple[int, str, bytes]:
        status, content_type, payload = 0, "", bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await asyncio.wait_for(self.reader.read(65536), 10))
            elif isinstance(event, h11.Response):
                status = event.status_code
                self.headers = dict(event.headers)
                content_type = self.headers.get(b"content-type", b"").decode()
            elif isinstance(event, h11.Data):
                payload += event.data
            elif isinstance(event, h11.EndOfMessage):
                if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
                    self.h11.start_next_cycle()
                return status, content_type, bytes(payload)


@contextlib.asynccontextmanager
async def connect(port: int, ctx: ssl.SSLContext) -> AsyncIterator[Conn]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 10)
    try:
        yield Conn(reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def echo(body: bytes) -> bytes:
    return b'{"echo":' + body + b"}"


async def broken(body: bytes) -> bytes:
    raise RuntimeError("converter bug")


@pytest.fixture
async def hooks() -> AsyncIterator[tuple[server.WebhookServer, CollectorRegistry]]:
    registry = CollectorRegistry()
    srv = server.WebhookServer({PATH: echo, "/broken": broken}, registry=registry, max_body=1024)
    await srv.start()
    yield srv, registry
    await srv.stop()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_verified_handshake_answers_json_and_is_counted(
    hooks: tuple[server.WebhookServer, CollectorRegistry],
) -> None:
    srv, registry = hooks
    ca, serving = pair("ca")
    srv.set_certificate(serving.cert_pem, serving.key_pem)
    ctx = trusting(ca)
    ctx.set_alpn_protocols(["h2", "http/1.1"])  # as Go clients (the API server) offer
    async with connect(srv.port, ctx) as conn:
        assert await conn.request(b'{"a":1}') == (200, "application/json", b'{"echo":{"a":1}}')
        assert conn.writer.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
    name = "controller_runtime_webhook_requests_total"
    assert sample(registry, name, webhook=PATH, code="200") == 1
    assert sample(registry, "controller_runtime_webhook_latency_seconds_count", webhook=PATH) == 1
    assert sample(registry, "controller_runtime_webhook_requests_in_flight", webhook=PATH) == 0


async def test_tls_1_1_is_refused_and_1_2_accepted(
    hooks: tuple[server.WebhookServer, CollectorRegistry],
) -> None:
    srv, _ = hooks
    ca, serving = pair("ca")
    srv.set_certificate(serving.cert_pem, serving.key_pem)
    old = trusting(ca)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # a client able to speak TLS 1.1 (OpenSSL 3 disables it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        async with connect(srv.port, old):
            pass
    tls12 = trusting(ca)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    async with connect(srv.port, tls12) as conn:
        assert conn.writer.get_extra_info("ssl_object").version() == "TLSv1.2"
        assert (await conn.request())[0] == 200


async def test_a_swapped_certificate_serves_new_connections_while_open_ones_keep_theirs(
    hooks: tuple[server.WebhookServer, CollectorRegistry],
) -> None:
    srv, _ = hooks
    ca_a, serving_a = pair("ca-a")
    ca_b, serving_b = pair("ca-b")
    srv.set_certificate(serving_a.cert_pem, serving_a.key_pem)
    async with connect(srv.port, trusting(ca_a)) as before:
        assert (await before.request())[0] == 200
        srv.set_certificate(serving_b.cert_pem, serving_b.key_pem)  # no restart: same port
        async with connect(srv.port, trusting(ca_b)) as after:
            assert after.peer == serving_b.cert.public_bytes(DER)
            assert (await after.request())[0] == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            async with connect(srv.port, trusting(ca_a)):
                pass
        assert before.peer == serving_a.cert.public_bytes(DER)
        assert (await before.request())[0] == 200  # the open connection goes on with the old pair
    assert srv.certificate == serving_b


async def test_an_invalid_pair_is_refused_and_the_current_one_kept(
    hooks: tuple[server.WebhookServer, CollectorRegistry],
) -> None:
    srv, _ = hooks
    ca, serving = pair("ca")
    _, other = pair("other")
    srv.set_certificate(serving.cert_pem, serving.key_pem)
    with pytest.raises(ssl.SSLError):
        srv.set_certificate(serving.cert_pem, other.key_pem)
    async with connect(srv.port, trusting(ca)) as conn:
        assert (await conn.request())[0] == 200
    assert srv.certificate == serving


async def test_503_until_a_certificate_is_set_and_no_verified_handshake(
    hooks: tuple[server.WebhookServer, CollectorRegistry],
) -> None:
    srv, registry = hooks
    ca, serving = pair("ca")
    with pytest.raises(ssl.SSLCertVerificationError):  # the placeholder is trusted by nobody
        async with connect(srv.port, trusting(ca)):
            pass
    async with connect(srv.port, trusting(None)) as conn:
        assert (await conn.request())[0] == 503
    assert sample(registry, "controller_runtime_webhook_requests_total", webhook=PATH, code="503") == 1
    srv.set_certificate(serving.cert_pem, serving.key_pem)
    async with connect(srv.port, trusting(ca)) as conn:
        assert (await conn.request())[0] == 200


async def test_post_json_only_a_body_limit_and_a_failing_handler_is_a_logged_500(
    hooks: tuple[server.WebhookServer, CollectorRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    srv, registry = hooks
    ca, serving = pair("ca")
    srv.set_certificate(serving.cert_pem, serving.key_pem)
    ctx = trusting(ca)
    async with connect(srv.port, ctx) as conn:
        assert (await conn.request(method="GET", body=b""))[0] == 405
        assert (await conn.request(ctype="text/plain"))[0] == 415
        assert (await conn.request(ctype="application/json; charset=utf-8"))[0] == 200
        assert (await conn.request(b""))[0] == 400
    async with connect(srv.port, ctx) as conn:
        assert (await conn.request(b"x" * 2048))[0] == 413  # the server closes the connection after it
    async with connect(srv.port, ctx) as conn:
        with caplog.at_level(logging.ERROR, logger="mlops_platform.runtime.webhook.server"):
            assert (await conn.request(path="/broken"))[0] == 500
    assert any(r.message == "webhook handler failed" and r.exc_info for r in caplog.records)
    total = "controller_runtime_webhook_requests_total"
    assert [sample(registry, total, webhook=PATH, code=c) for c in ("405", "200", "400")] == [1, 1, 1]
    assert sample(registry, total, webhook="/broken", code="500") == 1


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (turns of the loop, no clock)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not met")


@pytest.fixture
async def serving() -> AsyncIterator[tuple[server.WebhookServer, ssl.SSLContext]]:
    """A server with a certificate, and a client context trusting it."""
    srv = server.WebhookServer({PATH: echo}, registry=CollectorRegistry())
    ca, pem = pair("ca")
    srv.set_certificate(pem.cert_pem, pem.key_pem)
    await srv.start()
    yield srv, trusting(ca)
    await srv.stop()


async def test_a_stopping_server_answers_the_next_request_on_an_idle_keep_alive_connection(
    serving: tuple[server.WebhookServer, ssl.SSLContext],
) -> None:
    """The drain keeps an idle keep-alive connection (closing it would race with a request the API
    server may be writing on it, and Go retries no POST it has written): new connections are
    refused, the next request on it is answered with Connection: close, then the server closes it,
    and stop returns without waiting out the grace (the clock never moves)."""
    srv, ctx = serving
    clock = FakeClock()
    async with connect(srv.port, ctx) as conn:
        assert (await conn.request())[0] == 200
        assert b"connection" not in conn.headers  # kept alive
        stopping = asyncio.create_task(srv.stop(grace=10, sleep=clock.sleep))
        await clock.sleeping()  # draining: waiting for the connection, or the grace
        with pytest.raises(ConnectionRefusedError):
            async with connect(srv.port, ctx):
                pass
        assert await conn.request(b'{"late":1}') == (200, "application/json", b'{"echo":{"late":1}}')
        assert conn.headers[b"connection"] == b"close"
        assert await conn.closed_by_server()
        report = await asyncio.wait_for(stopping, 10)
    assert report == drain.Report(open=1, answered=1, idle_closed=0, cut=0)
    assert clock.now == 0


async def test_a_connection_in_its_tls_handshake_when_the_server_stops_is_served(
    serving: tuple[server.WebhookServer, ssl.SSLContext],
) -> None:
    """A connection accepted but not through its TLS handshake is one the API server dialed for a
    request (Go retries no request on a new connection): the drain waits for it and answers it."""
    srv, ctx = serving
    clock = FakeClock()
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=5)  # loopback: connected at once
    raw.setblocking(False)
    await until(lambda: len(srv.connections) == 1)  # accepted; the handshake waits for the client
    stopping = asyncio.create_task(srv.stop(grace=10, sleep=clock.sleep))
    await clock.sleeping()
    reader, writer = await asyncio.open_connection(sock=raw, ssl=ctx, server_hostname="127.0.0.1")
    try:
        conn = Conn(reader, writer)
        assert (await conn.request())[0] == 200
        assert conn.headers[b"connection"] == b"close"
        report = await asyncio.wait_for(stopping, 10)
    finally:
        writer.close()
    assert report == drain.Report(open=1, answered=1, idle_closed=0, cut=0)


async def test_after_the_grace_an_idle_connection_is_closed_and_a_request_begun_is_answered(
    serving: tuple[server.WebhookServer, ssl.SSLContext],
) -> None:
    srv, ctx = serving
    clock = FakeClock()
    async with connect(srv.port, ctx) as idle, connect(srv.port, ctx) as begun:
        assert (await idle.request())[0] == (await begun.request())[0] == 200
        await begun.send_head(2)  # its headers are out, its body not yet
        await until(lambda: sum(c.idle for c in srv.connections) == 1)  # the server has them
        stopping = asyncio.create_task(srv.stop(grace=10, sleep=clock.sleep))
        await clock.sleeping()
        clock.advance(10)  # the grace runs out with one connection left idle all along
        assert await idle.closed_by_server()
        await clock.sleeping()  # the request begun gets the finish
        await begun.send_body(b"{}")
        assert await begun.answer() == (200, "application/json", b'{"echo":{}}')
        assert begun.headers[b"connection"] == b"close"
        report = await asyncio.wait_for(stopping, 10)
    assert report == drain.Report(open=2, answered=1, idle_closed=1, cut=0)
