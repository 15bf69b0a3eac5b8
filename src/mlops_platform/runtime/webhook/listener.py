"""Listening sockets whose connections this process accepts itself, so that stopping takes the
connections the kernel has already accepted instead of resetting them.

The kernel completes a client's TCP handshake on its own and queues the connection on the listening
socket until the process calls ``accept()``. Closing a listening socket resets every connection
still queued on it: the client had connected, wrote its TLS ClientHello, and reads ``connection
reset by peer``. For the API server that is a conversion failed on a new connection, which Go's
net/http never retries. asyncio's ``Server.close()`` closes the socket with whatever is queued, and
its accept loop runs only when the event loop polls, so a replica that is busy as it stops (its
manager winding down) has connections queued. :meth:`Listener.close` stops polling, takes every
queued connection with non-blocking ``accept()`` calls until the queue is empty, and closes the
socket in the same step, with no await in between: the connections the kernel had accepted are
served (``on_accept``), and later ones go to another listener (another replica of the address
with SO_REUSEPORT, another pod behind the Service).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("mlops_platform.runtime.webhook.listener")

BACKLOG = 128
#: accept() errors that mean "no resources now": wait this long before accepting again (as asyncio)
RETRY_AFTER = 1.0
_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def bind(host: str, port: int, *, reuse_port: bool = False, backlog: int = BACKLOG) -> list[socket.socket]:
    """Non-blocking listening sockets for every address of ``host`` (one for an IP address; IPv4
    and IPv6 for an empty host), as ``asyncio.start_server`` binds them."""
    infos = socket.getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Listener:
    """Accepts connections on ``sockets`` (see :func:`bind`) from the running loop and hands each
    to ``on_accept`` (a connected non-blocking socket, its handshake not begun) at once."""

    def __init__(self, sockets: list[socket.socket], on_accept: Callable[[socket.socket], None]) -> None:
        self.sockets = sockets
        self.on_accept = on_accept
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock, BACKLOG)

    def close(self) -> int:
        """Stop accepting: take the connections queued on the sockets, then close them (one step,
        nothing else runs in between). Returns how many queued connections were taken."""
        taken = 0
        for sock in self.sockets:
            if self._loop is not None:
                self._loop.remove_reader(sock.fileno())
            taken += self._accept(sock, None)
            sock.close()
        self.sockets = []
        return taken

    def _accept(self, sock: socket.socket, most: int | None) -> int:
        """Accept up to ``most`` (None: all) queued connections of ``sock``; how many."""
        accepted = 0
        while most is None or accepted < most:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno not in _RESOURCES or self._loop is None or most is None:
                    log.warning("accept failed", extra={"error": str(e)})
                    break
                log.error("accept failed: out of resources; accepting again later", extra={"error": str(e)})
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(RETRY_AFTER, self._resume, sock)
                break
            conn.setblocking(False)
            accepted += 1
            self.on_accept(conn)
        return accepted

    def _resume(self, sock: socket.socket) -> None:
        if self._loop is not None and sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock, BACKLOG)
