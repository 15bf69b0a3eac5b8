"""Loopback ports for the servers tests and benchmarks start (the one helper for it)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago: the caller's server binds it right after,
    and retries with another if a different process took it in between."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
