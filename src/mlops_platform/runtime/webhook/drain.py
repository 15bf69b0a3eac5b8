"""How a stopping webhook server lets go of its connections: the drain, apart from sockets and TLS so
that its timing can be tested on a fake clock.

The Kubernetes API server calls a webhook over HTTP/1.1 keep-alive connections (Go's net/http: a
pool per address, the most recently used idle connection taken first) and retries no conversion
request that fails with its connection: client-go's ``Request.Do`` retries a connection error on
GETs only (a conversion is a POST), and net/http retries a POST only on a connection used before and
only if not a byte of it was written. A server that closes a connection on which a request may be
on its way therefore fails that request, and the client's request with it. So the drain never
closes a connection the API server may be using:

1. the server stops listening (having taken the connections the kernel had already accepted for
   it: :mod:`.listener`); the API server's next new connections go to the other replicas;
2. it keeps every connection it has, from the TCP accept on: in their TLS handshake, receiving or
   answering a request, or idle between two requests (the keep-alive connections the API server
   reuses). Each request that comes is answered with ``Connection: close`` and its connection closed
   after the answer: the one way HTTP/1.1 lets a server end a connection without a race, as the
   client reads the answer before it sends anything else on that connection;
3. it returns as soon as the last connection has ended. If ``grace`` seconds pass first it closes
   the idle ones (the API server has left them unused through the whole grace; a request it sent
   on one at that very moment is the one race left, see docs/webhook-tls.md), gives the ones still
   in a handshake or a request ``finish`` more seconds, then closes whatever is left.

:class:`Connections` holds the open connections (anything with ``idle`` and ``close()``) and runs
the drain; ``sleep`` is the clock (``asyncio.sleep``, or a test's fake one).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

Sleep = Callable[[float], Awaitable[None]]


class Conn(Protocol):
    @property
    def idle(self) -> bool:
        """Between two requests with nothing of the next one received (nor a handshake going on)."""
        ...

    def close(self) -> None:
        """End it now, whatever it is doing; it leaves :class:`Connections` when it has ended."""
        ...


@dataclasses.dataclass
class Report:
    """What a drain did, for the log."""

    open: int = 0  # connections open when it began
    answered: int = 0  # requests answered while draining (each with Connection: close)
    idle_closed: int = 0  # idle connections closed when the grace ran out
    cut: int = 0  # connections closed in a handshake or a request when ``finish`` ran out


class Connections:
    """The connections a server has open, from accept to close, and their drain."""

    def __init__(self) -> None:
        self._open: set[Conn] = set()
        self._empty = asyncio.Event()
        self._empty.set()
        #: set by :meth:`drain`: every answer says ``Connection: close`` and ends its connection
        self.draining = False
        self._answered_draining = 0

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Conn]:
        return iter(list(self._open))

    def add(self, conn: Conn) -> None:
        self._open.add(conn)
        self._empty.clear()

    def discard(self, conn: Conn) -> None:
        self._open.discard(conn)
        if not self._open:
            self._empty.set()

    def answering(self) -> bool:
        """Called as a connection writes an answer: whether that answer must be its last one (the
        server is draining: ``Connection: close``, then the connection is closed)."""
        if self.draining:
            self._answered_draining += 1
        return self.draining

    async def drain(self, grace: float, finish: float, *, sleep: Sleep = asyncio.sleep) -> Report:
        """Let the connections end (see the module docstring): wait for all of them to end, up to
        ``grace`` seconds; then close the idle ones and wait for the rest up to ``finish`` seconds;
        then close the rest. Returns when no connection is left open or every one has been closed."""
        self.draining = True
        report = Report(open=len(self._open))
        if not await self._emptied(grace, sleep):
            idle = [conn for conn in self._open if conn.idle]
            for conn in idle:
                conn.close()
            report.idle_closed = len(idle)
            if not await self._emptied(finish, sleep):
                rest = list(self._open)
                for conn in rest:
                    conn.close()
                report.cut = len(rest)
        report.answered = self._answered_draining
        return report

    async def _emptied(self, seconds: float, sleep: Sleep) -> bool:
        """Whether every connection has ended within ``seconds`` (on ``sleep``'s clock)."""
        if self._empty.is_set() or seconds <= 0:
            return self._empty.is_set()
        timer = asyncio.ensure_future(sleep(seconds))
        empty = asyncio.ensure_future(self._empty.wait())
        try:
            await asyncio.wait({timer, empty}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            empty.cancel()
        return self._empty.is_set()
