"""The operator's Prometheus queries (``promclient``) against a fake Prometheus on 127.0.0.1: through
the API server's service proxy path and at a URL (TLS, bearer token), the deadline, bounded retries,
every failure classified, the concurrency bound; and the ``--prometheus*`` flags."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import pytest
from aiohttp import web
from click.testing import CliRunner

from mlops_platform import promapi, promclient
from mlops_platform.cli import options
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.webhook import keypairs

PROXY = "/api/v1/namespaces/monitoring/services/http:prometheus-operated:9090/proxy/api/v1/query"
VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"a": "b"}, "value": [1700000000.0, "0.25"]}]},
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclasses.dataclass
class Fake:
    """A fake Prometheus: what it saw, and at its URL."""

    url: str
    seen: list[web.Request] = dataclasses.field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0


@contextlib.asynccontextmanager
async def prometheus(
    answer: Callable[[web.Request, int], Awaitable[web.StreamResponse]], tls: ssl.SSLContext | None = None
) -> AsyncIterator[Fake]:
    fake = Fake("")

    async def route(request: web.Request) -> web.StreamResponse:
        fake.seen.append(request)
        fake.in_flight += 1
        fake.most_in_flight = max(fake.most_in_flight, fake.in_flight)
        try:
            return await answer(request, len(fake.seen))
        finally:
            fake.in_flight -= 1

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", route)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def json_answer(body: Any, status: int = 200) -> Callable[[web.Request, int], Awaitable[web.StreamResponse]]:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return answer


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@contextlib.asynccontextmanager
async def proxied(fake: Fake, **kw: Any) -> AsyncIterator[tuple[promclient.QueryClient, rclient.Client]]:
    api = rclient.Client(rhttp.Transport(fake.url))
    try:
        yield promclient.QueryClient(promapi.DEFAULT, api=api, **kw), api
    finally:
        await api.close()


@contextlib.asynccontextmanager
async def direct(endpoint: promclient.Direct, **kw: Any) -> AsyncIterator[promclient.QueryClient]:
    c = promclient.QueryClient(endpoint, **kw)
    try:
        yield c
    finally:
        await c.close()


async def test_through_the_api_servers_service_proxy() -> None:
    async with prometheus(json_answer(VECTOR)) as fake, proxied(fake) as (c, api):
        got = await c.query('sum(rate(x{namespace="ml"}[1m]))')
    assert got == [promapi.Sample({"a": "b"}, 0.25)]
    [request] = fake.seen
    assert request.path == PROXY and request.query["query"] == 'sum(rate(x{namespace="ml"}[1m]))'
    assert api.requests[("get", "services/proxy", 200)] == 1
    assert c.answers == {"ok": 1}


async def test_at_a_url_with_a_bearer_token_reread_when_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old\n")

    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        if request.headers.get("Authorization") != "Bearer new":
            token.write_text("new\n")  # rotated meanwhile
            return web.Response(status=401, text="Unauthorized")
        return web.json_response(
            {"status": "success", "data": {"resultType": "scalar", "result": [1, "NaN"]}}
        )

    async with prometheus(answer) as fake:
        endpoint = promclient.Direct(fake.url + "/prom/", bearer_token_file=str(token))
        async with direct(endpoint) as c:
            [sample] = await c.query("vector(0) / 0")
    assert sample.labels == {} and sample.value != sample.value  # NaN kept: the caller's no data
    assert [r.path for r in fake.seen] == ["/prom/api/v1/query"] * 2


@pytest.mark.parametrize(
    ("status", "body", "kind", "requests", "words"),
    [
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}, "invalid", 1,
         "bad_data: parse error"),
        (422, {"status": "error", "errorType": "execution", "error": "many-to-many matching"}, "failed", 1,
         "execution: many-to-many"),
        (503, {"status": "error", "errorType": "unavailable", "error": "not ready"}, "failed", 3,
         "unavailable"),
        (503, {"kind": "Status", "reason": "ServiceUnavailable",
               "message": 'no endpoints available for service "prometheus-operated"'}, "unreachable", 3,
         "503 ServiceUnavailable: no endpoints available"),
        (404, {"kind": "Status", "reason": "NotFound", "message": 'services "prometheus-operated" not found'},
         "unreachable", 1, "404 NotFound"),
        (403, {"kind": "Status", "reason": "Forbidden", "message": "cannot get services/proxy"},
         "unreachable", 1, "403 Forbidden"),
        (200, "<html>a login page</html>", "unreachable", 1, "not a Prometheus API answer"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "unreachable", 1,
         "not an instant vector"),
    ],
)  # fmt: skip
async def test_every_failure_is_classified_and_only_one_without_an_answer_retried(
    status: int, body: Any, kind: str, requests: int, words: str
) -> None:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        if isinstance(body, str):
            return web.Response(status=status, text=body, content_type="text/html")
        return web.json_response(body, status=status)

    sleeps = Sleeps()
    async with prometheus(answer) as fake, proxied(fake, sleep=sleeps) as (c, _):
        with pytest.raises(promclient.QueryError) as e:
            await c.query("up")
    assert (e.value.kind, len(fake.seen)) == (kind, requests)
    assert words in str(e.value) and "Prometheus monitoring/prometheus-operated:9090" in str(e.value)
    assert "up" not in str(e.value).split(": ", 1)[0]  # the query is not in the message
    assert len(sleeps.delays) == requests - 1 and all(0 < d <= 1.0 for d in sleeps.delays)
    assert c.answers[kind] == 1 and c.answers["retried"] == requests - 1


async def test_an_answer_after_a_retry_is_an_answer() -> None:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        return web.json_response(VECTOR) if n > 1 else web.Response(status=502, text="bad gateway")

    async with prometheus(answer) as fake, proxied(fake, sleep=Sleeps()) as (c, _):
        assert await c.query("up") == [promapi.Sample({"a": "b"}, 0.25)]
    assert c.answers == {"retried": 1, "ok": 1}


async def test_a_slow_prometheus_costs_the_timeout_and_no_more() -> None:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        await asyncio.sleep(1.5)
        return web.json_response(VECTOR)

    async with prometheus(answer) as fake, proxied(fake, timeout=0.3) as (c, _):
        started = time.monotonic()
        with pytest.raises(promclient.QueryError, match=r"no answer within 0.3s") as e:
            await c.query("up")
        assert time.monotonic() - started < 2
    assert e.value.kind == "unreachable"


async def test_nothing_listening_is_unreachable_and_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    async with direct(promclient.Direct(f"http://127.0.0.1:{port}"), retries=1, sleep=sleeps) as c:
        with pytest.raises(promclient.QueryError, match="no answer: ClientConnectorError") as e:
            await c.query("up")
    assert e.value.kind == "unreachable" and len(sleeps.delays) == 1
    assert "api/v1/query" not in str(e.value)


async def test_at_most_max_in_flight_queries_at_once() -> None:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return web.json_response(VECTOR)

    async with prometheus(answer) as fake, proxied(fake, max_in_flight=2) as (c, _):
        await asyncio.gather(*(c.query(f"q{i}") for i in range(6)))
    assert (len(fake.seen), fake.most_in_flight) == (6, 2)


async def test_https_verified_against_the_ca_file_or_not_at_all(tmp_path: Path) -> None:
    hour = __import__("datetime").timedelta(hours=1)
    ca = keypairs.new_ca("prometheus-ca", validity=hour)
    serving = keypairs.new_serving(
        ca, dns_names=("prometheus.test",), ip_addresses=("127.0.0.1",), validity=hour
    )
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    async with prometheus(json_answer(VECTOR), tls=tls) as fake:
        async with direct(promclient.Direct(fake.url, ca_file=str(tmp_path / "ca.pem"))) as c:
            assert await c.query("up") == [promapi.Sample({"a": "b"}, 0.25)]
        async with direct(promclient.Direct(fake.url), retries=0) as c:  # the system's roots: refused
            with pytest.raises(promclient.QueryError, match="certificate verify failed"):
                await c.query("up")
        async with direct(promclient.Direct(fake.url, insecure_skip_tls_verify=True)) as c:
            assert len(await c.query("up")) == 1


async def test_a_missing_token_file_is_said() -> None:
    async with (
        prometheus(json_answer(VECTOR)) as fake,
        direct(promclient.Direct(fake.url, bearer_token_file="/nonexistent/token"), retries=0) as c,
    ):
        with pytest.raises(promclient.QueryError, match="/nonexistent/token") as e:
            await c.query("up")
    assert e.value.kind == "unreachable" and not fake.seen


# -- the flags --------------------------------------------------------------------------------------


@click.command()
@options.prometheus_options
def show(**flags: Any) -> None:
    endpoint = options.prometheus_endpoint(options.take(promclient.Options, flags))
    click.echo(f"{type(endpoint).__name__} {endpoint!r}")


def in_a_directory_with_a_ca_file(args: list[str]) -> Any:
    """``show`` run where ``ca.pem`` exists (``--prometheus-ca-file`` must name a file)."""
    runner = CliRunner()
    with runner.isolated_filesystem():
        Path("ca.pem").write_text("a CA bundle\n")
        return runner.invoke(show, args)


@pytest.mark.parametrize(
    ("args", "out"),
    [
        ([], "Server Server(namespace='monitoring', service='prometheus-operated', port=9090)"),
        (["--prometheus", "obs/prom:9091"], "Server Server(namespace='obs', service='prom', port=9091)"),
        (["--prometheus-url", "https://prometheus.monitoring.svc:9090/", "--prometheus-ca-file", "ca.pem",
          "--prometheus-bearer-token-file", "/var/run/secrets/token"],
         "Direct Direct(url='https://prometheus.monitoring.svc:9090', ca_file='ca.pem', "
         "insecure_skip_tls_verify=False, bearer_token_file='/var/run/secrets/token')"),
    ],
)  # fmt: skip
def test_the_flags_name_where_prometheus_is(args: list[str], out: str) -> None:
    result = in_a_directory_with_a_ca_file(args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == out


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--prometheus", "prometheus:9090"],
            "--prometheus: 'prometheus:9090' is not NAMESPACE/SERVICE:PORT",
        ),
        (["--prometheus-url", "prometheus:9090"], "--prometheus-url: 'prometheus:9090' is not an http(s)://"),
        (["--prometheus-url", "http://p:9090", "--prometheus-ca-file", "ca.pem"], "need an https URL"),
        (["--prometheus-insecure-skip-tls-verify"], "go with --prometheus-url"),
        (["--prometheus-timeout", "0"], "--prometheus-timeout"),
        (["--prometheus-url", "https://p:9090", "--prometheus-ca-file", "no.pem"], "'--prometheus-ca-file'"),
        (["--prometheus-retries", "11"], "--prometheus-retries"),
    ],
)
def test_flags_that_do_not_fit_are_a_usage_error_naming_them(args: list[str], error: str) -> None:
    result = in_a_directory_with_a_ca_file(args)
    assert result.exit_code == 2
    assert error in result.output, result.output


def test_options_make_a_client_of_their_endpoint() -> None:
    o = promclient.Options(prometheus_url="http://127.0.0.1:9", prometheus_timeout=2.5, prometheus_retries=0)
    c = promclient.QueryClient.from_options(o)
    assert (c.endpoint, c.timeout, c.retries) == (promclient.Direct("http://127.0.0.1:9"), 2.5, 0)
    with pytest.raises(ValueError, match="needs the API client"):
        promclient.QueryClient.from_options(promclient.Options())
