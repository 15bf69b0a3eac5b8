"""Loopback ports for the servers tests and benchmarks start (the one helper for it)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: where Linux keeps the range it takes the local ports of outgoing connections from
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: the lowest port :func:`free_port` hands out
LOWEST = 10000
#: ports just below the ephemeral range left alone: kwokctl gives a cluster's components the free
#: ports counting down from 32767 (Linux's default range starts at 32768)
BELOW_EPHEMERAL = 1000


def _ephemeral_low() -> int | None:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago: the caller's server binds it right after,
    and retries with another if a different process took it in between.

    Taken at random below the kernel's ephemeral range, not from it (``bind(0)`` picks from it):
    every outgoing connection of every process on the machine takes its local port from that
    range, so a port picked there and bound a moment later can meanwhile be a connection's (an
    operator replica of a test once exited at start on ``address already in use``). Where the range
    cannot be read or leaves no room below it, the kernel's pick."""
    low = _ephemeral_low()
    if low is not None and low - BELOW_EPHEMERAL > LOWEST:
        for _ in range(64):
            port = random.randrange(LOWEST, low - BELOW_EPHEMERAL)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
