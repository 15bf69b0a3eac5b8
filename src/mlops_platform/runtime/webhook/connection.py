"""One accepted webhook connection: its TLS handshake, then HTTP/1.1 requests on h11, each routed to
an async handler ``(method, path, body) -> (status, content_type, body)``.

It is in :class:`~.drain.Connections` from the TCP accept to its end (a connection in its TLS
handshake is one the API server dialed to send a request on) and tells the drain whether it is
``idle``: between two requests with not a byte of the next one received. It counts the bytes the
loop hands its protocol, so a request that has arrived but not been read yet is not idle. Answers
say ``Connection: close`` and end the connection once the server drains (:meth:`.Connections.answering`).

Reading a request (a body over ``max_body`` is answered 413), routing it (404, 415, a handler's
exception a logged 500) and framing the answer are
:mod:`~mlops_platform.runtime.transport.httpserver`'s ``read_request``, ``answer`` and ``respond``;
this module keeps the connection and its bookkeeping. A request must arrive within
:data:`REQUEST_TIMEOUT` once begun; between two requests a connection may stay idle for
:data:`IDLE_TIMEOUT`, longer than the API server keeps an idle connection (Go's 90 s
``IdleConnTimeout``), so that the client, not the server, closes it: a server closing an idle
keep-alive connection races with a request sent on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Collection, Mapping

import h11

from mlops_platform.runtime.transport import httpserver
from mlops_platform.runtime.webhook import drain

HANDSHAKE_TIMEOUT = 10.0  # Go's TLSHandshakeTimeout
REQUEST_TIMEOUT = 60.0
IDLE_TIMEOUT = 120.0
CLOSE_TIMEOUT = 5.0  # for the TLS close (close_notify both ways) after the last answer
READ_SIZE = 65536


class _Counting(asyncio.StreamReaderProtocol):
    """The stream protocol, counting the bytes the loop has received (decrypted) on the connection."""

    received = 0

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        super().data_received(data)


class Connection:
    """Serves ``sock`` (just accepted) in a task of its own, a member of ``connections`` until it ends."""

    def __init__(
        self,
        sock: socket.socket,
        routes: Mapping[str, httpserver.Handler],
        connections: drain.Connections,
        *,
        ssl_context: ssl.SSLContext | None,
        max_body: int,
        content_types: Collection[str] | None,
    ) -> None:
        self.routes = routes
        self.connections = connections
        self.ssl_context = ssl_context
        self.max_body = max_body
        self.content_types = frozenset(content_types) if content_types is not None else None
        self._sock = sock
        self._protocol: _Counting | None = None
        self._read = 0  # bytes taken from the stream
        self._waiting = False  # for a request, with nothing of it in h11's buffer
        connections.add(self)
        self.task = asyncio.create_task(self._run())
        self.task.add_done_callback(self._ended)

    @property
    def idle(self) -> bool:
        return self._waiting and self._protocol is not None and self._protocol.received == self._read

    def close(self) -> None:
        self.task.cancel()

    def _ended(self, _: asyncio.Task[None]) -> None:
        self._sock.close()  # closed already, unless the task was cancelled before it began
        self.connections.discard(self)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_SIZE)
        protocol = _Counting(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, self._sock, ssl=self.ssl_context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if self.ssl_context is not None else None,
            )  # fmt: skip
        except OSError:  # a failed handshake (ssl.SSLError, a timeout): the client hears of it
            return
        self._protocol = protocol
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            with contextlib.suppress(h11.ProtocolError, ConnectionError, TimeoutError):
                await self._exchange(reader, writer)
            writer.close()  # after the last answer is sent (TLS: close_notify, then the peer's)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT)
        finally:
            transport.abort()  # whatever is left: closed by the drain (cancelled), a close unanswered

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            try:
                request, body = await httpserver.read_request(
                    conn, lambda: self._receive(conn, reader), self.max_body
                )
            except httpserver.BodyTooLarge:
                self.connections.answering()
                too_large = (413, "text/plain", b"request body too large\n")
                await httpserver.respond(conn, writer, too_large, close=True)
                return
            if request is None:
                return
            response = await httpserver.answer(self.routes, request, body, self.content_types)
            last = self.connections.answering()  # a drain begun meanwhile makes it the last one too
            await httpserver.respond(conn, writer, response, head=request.method == b"HEAD", close=last)
            if last or conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()

    async def _receive(self, conn: h11.Connection, reader: asyncio.StreamReader) -> bytes:
        """The connection's next bytes, for h11; idle meanwhile if it waits for a new request with
        nothing of it received (:attr:`idle`), with the timeout of that wait or of a request's."""
        between = conn.their_state is h11.IDLE and not conn.trailing_data[0]
        timeout = IDLE_TIMEOUT if between else REQUEST_TIMEOUT
        self._waiting = between
        try:
            data = await asyncio.wait_for(reader.read(READ_SIZE), timeout)
        finally:
            self._waiting = False
        self._read += len(data)
        return data
