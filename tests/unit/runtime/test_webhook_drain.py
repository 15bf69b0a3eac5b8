"""The webhook drain's logic on a fake clock (no socket), and the listener's close taking the
connections the kernel had queued on it instead of resetting them."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mlops_platform.runtime.webhook import drain, listener


class FakeClock:
    """``asyncio.sleep`` on a clock that moves only when the test says so (:meth:`advance`);
    :meth:`sleeping` waits until something sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        wakeup = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, wakeup))
        self._slept.set()
        try:
            await wakeup
        finally:
            self._sleepers = [s for s in self._sleepers if s[1] is not wakeup]

    async def sleeping(self) -> None:
        await asyncio.wait_for(self._slept.wait(), 5)  # a safety net, not a synchronization
        self._slept.clear()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for at, wakeup in self._sleepers:
            if at <= self.now and not wakeup.done():
                wakeup.set_result(None)


class FakeConn:
    def __init__(self, connections: drain.Connections, *, idle: bool) -> None:
        self.connections, self.idle, self.closed = connections, idle, False
        connections.add(self)

    def close(self) -> None:
        self.closed = True
        self.connections.discard(self)

    def answer(self) -> bool:
        """A request on it answered: whether that was its last (then the connection ends)."""
        self.idle = False
        last = self.connections.answering()
        if last:
            self.connections.discard(self)
        else:
            self.idle = True
        return last


async def test_before_a_drain_answers_keep_their_connection_open() -> None:
    connections = drain.Connections()
    conn = FakeConn(connections, idle=True)
    assert conn.answer() is False
    assert len(connections) == 1 and not connections.draining


async def test_a_drain_keeps_every_connection_and_ends_with_the_last_one_without_the_clock() -> None:
    """An idle keep-alive connection is not closed: its next request is answered, as the last on it
    (Connection: close); the drain returns once both connections have ended, the clock never moved."""
    connections, clock = drain.Connections(), FakeClock()
    idle, busy = FakeConn(connections, idle=True), FakeConn(connections, idle=False)
    draining = asyncio.create_task(connections.drain(10, 5, sleep=clock.sleep))
    await clock.sleeping()  # waiting for the connections, or the grace
    assert connections.draining and not idle.closed
    assert busy.answer() is True  # the request in flight: its answer is the last on its connection
    assert not draining.done()  # the idle connection holds it
    assert idle.answer() is True  # the API server sent one more request on it: answered, then closed
    report = await asyncio.wait_for(draining, 5)
    assert report == drain.Report(open=2, answered=2, idle_closed=0, cut=0)
    assert clock.now == 0 and not idle.closed and not busy.closed  # none closed by the server


async def test_after_the_grace_idle_connections_close_and_busy_ones_get_finish() -> None:
    connections, clock = drain.Connections(), FakeClock()
    idle = FakeConn(connections, idle=True)
    busy = FakeConn(connections, idle=False)  # a request half received (or being answered)
    handshake = FakeConn(connections, idle=False)  # a TLS handshake not done
    draining = asyncio.create_task(connections.drain(10, 5, sleep=clock.sleep))
    await clock.sleeping()
    clock.advance(9.9)
    await asyncio.sleep(0)  # a turn of the loop for the drain, were it due (it is not)
    assert not idle.closed
    clock.advance(0.1)
    await clock.sleeping()  # the grace ran out; now the finish
    assert idle.closed and not busy.closed and not handshake.closed
    assert busy.answer() is True  # its request arrived in full and was answered
    clock.advance(5)
    report = await asyncio.wait_for(draining, 5)
    assert handshake.closed
    assert report == drain.Report(open=3, answered=1, idle_closed=1, cut=1)


async def test_no_grace_closes_every_connection_at_once() -> None:
    connections, clock = drain.Connections(), FakeClock()
    conns = [FakeConn(connections, idle=i % 2 == 0) for i in range(3)]
    report = await asyncio.wait_for(connections.drain(0, 0, sleep=clock.sleep), 5)
    assert all(c.closed for c in conns) and len(connections) == 0
    assert (report.idle_closed, report.cut) == (2, 1)


async def test_closing_the_listener_takes_the_connections_queued_on_it() -> None:
    """The kernel completes a client's TCP handshake before the process accepts it; close() takes
    such a connection (it would be reset with the socket) and hands it on like any other."""
    taken: list[socket.socket] = []
    lst = listener.Listener(listener.bind("127.0.0.1", 0, reuse_port=True), taken.append)
    port = lst.sockets[0].getsockname()[1]
    lst.open()
    client = socket.create_connection(("127.0.0.1", port), timeout=5)  # loopback: connected at once
    try:
        # no await since the connect: the loop cannot have accepted it, it is queued in the kernel
        assert lst.close() == 1
        assert len(taken) == 1
        taken[0].setblocking(True)
        taken[0].sendall(b"alive")
        assert client.recv(5) == b"alive"  # not reset
        with pytest.raises(ConnectionRefusedError):  # nothing listens any more
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        client.close()
        for sock in taken:
            sock.close()
