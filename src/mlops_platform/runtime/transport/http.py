"""The HTTP layer under :class:`~mlops_platform.runtime.transport.client.Client`: aiohttp.

Why aiohttp: on the operator's two hot requests (a GET and a server-side apply of a predictor-sized
Deployment) it costs about a third of the CPU of httpx2 (lightkube's HTTP stack) per request, with
its C HTTP parser and pooled keep-alive connections; HTTP/2 through httpx2 costs more, not less
(``bench/http_stack.py``; figures in ``docs/benchmarks/``).

What stays with the kept library: the kubeconfig, in-cluster service account, exec credential
plugins, client certificates and the CA come from lightkube's config layer, which hands us an
:class:`ssl.SSLContext` and an ``httpx.Auth``. The auth object is driven here as an auth *flow*
(the protocol httpx defines): its first request gives the ``Authorization`` header, which is reused
on every request; a ``401`` feeds the answer back into a fresh flow, so a rotated token file is
re-read and an exec plugin re-run exactly as lightkube does, and the request is sent once more.

Failures below HTTP (connection refused or reset, TLS, timeouts) raise :class:`TransportError`, an
``OSError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import platform
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx2 as httpx

from mlops_platform import __version__

_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}  # Go's GOARCH names, as client-go writes them


def user_agent() -> str:
    """client-go's shape, ``binary/version (os/arch) ...``, ending in this process's identity
    (``hostname_pid``, the manager's default leader-election identity): the API server records it
    (audit log) and replicas of one ServiceAccount and field manager are told apart by it. The field
    manager the server derives for writes without one stays ``mlops-platform`` (the part before
    the first ``/``)."""
    arch = platform.machine().lower()
    return (
        f"mlops-platform/{__version__} ({sys.platform}/{_ARCH.get(arch, arch)}) "
        f"{socket.gethostname()}_{os.getpid()}"
    )


class TransportError(ConnectionError):
    """The request did not get an HTTP answer (connection, TLS or timeout)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


@dataclasses.dataclass(slots=True)
class Stream:
    """An open streaming answer: its status and headers, and its body as lines."""

    status: int
    reason: str
    headers: Mapping[str, str]
    _response: aiohttp.ClientResponse

    async def read(self) -> bytes:
        return await self._response.read()

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split on ``\\n`` (no length limit: one watch event can be a 1 MiB object)."""
        buf = bytearray()
        try:
            async for chunk in self._response.content.iter_any():
                buf += chunk  # amortised: a 1 MiB event in 64 KiB chunks is not copied 16 times
                if b"\n" not in chunk:
                    continue
                *complete, rest = buf.split(b"\n")
                buf = bytearray(rest)
                for line in complete:
                    yield bytes(line)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e
        if buf:
            yield bytes(buf)


class Transport:
    """HTTP/1.1 keep-alive connections to one API server (``base_url``)."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth: httpx.Auth | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 100,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._ssl = ssl_context
        self._auth = auth
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._connect_timeout = connect_timeout
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._authorization: str | None = None
        self._auth_ready = auth is None
        self._auth_lock = asyncio.Lock()

    def _http(self) -> aiohttp.ClientSession:
        # created on first use: a session belongs to the running event loop
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                ssl=self._ssl if self._ssl is not None else False, limit=self._max_connections
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers={"User-Agent": user_agent()}
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- auth -----------------------------------------------------------------------------------

    async def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        if not self._auth_ready:
            await self._refresh_auth(rejected=None)
        out = dict(headers)
        if self._authorization is not None:
            out["Authorization"] = self._authorization
        return out

    async def _refresh_auth(self, rejected: str | None) -> None:
        """Run the auth flow once (``rejected``: the header a 401 answered, to be refreshed)."""
        assert self._auth is not None
        async with self._auth_lock:
            if self._auth_ready and self._authorization != rejected:
                return  # another request refreshed it meanwhile
            request = httpx.Request("GET", self.base_url + "/")
            flow = self._auth.async_auth_flow(request)
            try:
                request = await flow.__anext__()
                if rejected is not None:
                    with contextlib.suppress(StopAsyncIteration):
                        request = await flow.asend(httpx.Response(401, request=request))
            finally:
                await flow.aclose()
            self._authorization = request.headers.get("Authorization")
            self._auth_ready = True

    # -- requests -------------------------------------------------------------------------------

    async def send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str],
        timeout: float | None = None,
    ) -> Response:
        url = self.base_url + path
        t = aiohttp.ClientTimeout(total=timeout, connect=self._connect_timeout) if timeout else None
        for attempt in (1, 2):
            sent = await self._headers(headers)
            try:
                async with self._http().request(
                    method, url, params=params, data=content, headers=sent, timeout=t
                ) as r:
                    body = await r.read()
                    response = Response(r.status, r.reason or "", r.headers, body)
            except (aiohttp.ClientError, TimeoutError) as e:
                raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
            if response.status == 401 and self._auth is not None and attempt == 1:
                await self._refresh_auth(rejected=sent.get("Authorization"))
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str],
        read_timeout: float | None = None,
    ) -> AsyncIterator[Stream]:
        """A streaming request (watch): no total timeout, ``read_timeout`` between reads."""
        url = self.base_url + path
        t = aiohttp.ClientTimeout(total=None, connect=self._connect_timeout, sock_read=read_timeout)
        sent = await self._headers(headers)
        try:
            response = await self._http().request(method, url, params=params, headers=sent, timeout=t)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        if response.status == 401 and self._auth is not None:
            # refresh for the next attempt; the caller (the reflector) retries with backoff
            await self._refresh_auth(rejected=sent.get("Authorization"))
        try:
            yield Stream(response.status, response.reason or "", response.headers, response)
        finally:
            response.release()
