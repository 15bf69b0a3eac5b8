"""A small asyncio HTTP/1.1 server on h11 for probes, metrics and TLS webhooks.

h11 does the protocol work (parsing, framing, keep-alive); this module only routes a request to an
async handler ``(method, path, body) -> (status, content_type, body)``. Binds 127.0.0.1 by default.
Request bodies over ``max_body`` bytes are answered 413; with ``content_types``, a POST, PUT or PATCH
of another media type is answered 415, both before any handler runs.

:func:`read_request` (read a request and its body off an h11 connection), :func:`answer` (route it
to its handler) and :func:`respond` (send the answer) serve any server on h11 that keeps its
connections its own way (the webhook's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping

import h11

log = logging.getLogger("mlops_platform.runtime.transport.httpserver")
Response = tuple[int, str, bytes]
Handler = Callable[[str, str, bytes], Awaitable[Response]]
MAX_BODY = 8 * 1024 * 1024


class BodyTooLarge(Exception):
    """A request body over the limit (:func:`read_request`): answered 413."""


class HttpServer:
    def __init__(
        self,
        routes: dict[str, Handler],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        max_body: int | None = None,
        content_types: Collection[str] | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.routes = routes
        #: SO_REUSEPORT: other processes may listen on the same port; the kernel spreads new
        #: connections over them (replicas on one host share one address)
        self.reuse_port = reuse_port
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self.max_body = max_body  # None: MAX_BODY
        self.content_types = frozenset(content_types) if content_types is not None else None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()  # open connections, closed by stop()
        self._unconnected = asyncio.Event()  # set whenever no connection is open
        self._unconnected.set()
        self._draining = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=self.ssl_context, reuse_port=self.reuse_port or None
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, grace: float = 0.0) -> None:
        """Stop listening, then close every connection.

        ``grace``: for up to that many seconds first keep answering the requests that come on the
        connections already open, each answer saying ``Connection: close`` so the client opens its
        next connection elsewhere (another replica sharing the address); return as soon as every
        connection has closed. Closing an idle keep-alive connection at once would race with a
        request the client is writing on it: it reads EOF, and an HTTP client does not retry a
        POST (Go's net/http, the API server's, retries one only if nothing was written). With no
        grace (probes, metrics) every connection is closed at once."""
        if self._server is None:
            return
        self._server.close()
        self._draining = True
        if grace > 0 and self._writers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._unconnected.wait(), grace)
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        self._writers.add(writer)
        self._unconnected.clear()
        try:
            while True:
                try:
                    request, body = await self._read_request(conn, reader)
                except BodyTooLarge:
                    await respond(conn, writer, (413, "text/plain", b"request body too large\n"))
                    return
                if request is None:
                    return
                response = await answer(self.routes, request, body, self.content_types)
                # draining: the client must not send another request on this connection
                await respond(conn, writer, response, head=request.method == b"HEAD", close=self._draining)
                if self._draining or conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            self._writers.discard(writer)
            if not self._writers:
                self._unconnected.set()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        limit = self.max_body if self.max_body is not None else MAX_BODY
        return await read_request(conn, lambda: asyncio.wait_for(reader.read(65536), 60), limit)


async def read_request(
    conn: h11.Connection, receive: Callable[[], Awaitable[bytes]], limit: int
) -> tuple[h11.Request | None, bytes]:
    """The next request on ``conn`` and its body, ``receive()`` giving h11 the connection's next
    bytes whenever it needs them; ``(None, b"")`` once the client has closed the connection;
    :class:`BodyTooLarge` as soon as the body passes ``limit`` bytes."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await receive())
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > limit:
                raise BodyTooLarge
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


async def answer(
    routes: Mapping[str, Handler],
    request: h11.Request,
    body: bytes,
    content_types: Collection[str] | None = None,
) -> Response:
    """What ``request`` (whose ``body`` has been read) is answered: its path's handler's answer, a
    500 when the handler raises (logged); 404 for an unknown path, 415 for a POST, PUT or PATCH of a
    media type not in ``content_types`` (None: any), both before any handler runs."""
    path = request.target.decode("latin-1").split("?", 1)[0]
    handler = routes.get(path)
    if handler is None:
        return 404, "text/plain", b"not found\n"
    if not _acceptable(request, content_types):
        return 415, "text/plain", b"unsupported media type\n"
    try:
        return await handler(request.method.decode(), path, body)
    except Exception:
        log.exception("http handler failed", extra={"path": path})
        return 500, "text/plain", b"internal error\n"


def _acceptable(request: h11.Request, content_types: Collection[str] | None) -> bool:
    if content_types is None or request.method not in (b"POST", b"PUT", b"PATCH"):
        return True
    ctype = next((v for k, v in request.headers if k == b"content-type"), b"")
    return ctype.split(b";", 1)[0].strip().decode("latin-1").lower() in content_types


async def respond(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    response: Response,
    *,
    head: bool = False,
    close: bool = False,
) -> None:
    """Send ``response`` on ``conn`` (no body for a ``head`` request); ``close``: with
    ``Connection: close``, the client must not send another request on this connection."""
    status, ctype, payload = response
    headers = [("content-type", ctype), ("content-length", str(len(payload)))]
    if close:
        headers.append(("connection", "close"))
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
    if not head:  # a HEAD answer has the headers of a GET and no body
        writer.write(conn.send(h11.Data(data=payload)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()
