"""Fixed loopback ports a test cannot choose (a command's defaults, a README's command as written),
held host-wide while the test uses them: one lock file per port in the system's temporary
directory, taken with ``flock``, so the test sessions that run side by side on one machine (``make
test``'s groups) take turns on such a port instead of failing on "address already in use".

Every test that binds such a port on purpose takes it through :func:`holding` (a port a test may
choose comes from :func:`mlops_platform.testing.ports.free_port`, which never hands out one below
10000, where these defaults are).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import socket
import tempfile
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import IO

from mlops_platform.runtime import wait


def lock_path(port: int) -> Path:
    """The lock file of ``port``, shared by every process of this machine."""
    return Path(tempfile.gettempdir()) / f"mlops-platform-port-{port}.lock"


def _locked(file: IO[str]) -> bool:
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on ``host:port`` now (a bind would succeed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no holder
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@contextlib.asynccontextmanager
async def holding(ports: Iterable[int], *, timeout: float = 300.0) -> AsyncIterator[None]:
    """The host-wide lock of each of ``ports`` (taken in port order: two holders of overlapping sets
    never deadlock), then each port free on 127.0.0.1 (a process that takes no lock may hold it);
    released on exit. TimeoutError naming the port after ``timeout`` seconds in all."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    files: list[IO[str]] = []
    try:
        for port in sorted(set(ports)):
            lock: IO[str] = lock_path(port).open("a")
            files.append(lock)
            what = f"the host-wide lock of port {port}"
            await wait.until(
                functools.partial(_locked, lock), timeout=max(deadline - loop.time(), 0), what=what
            )
        for port in sorted(set(ports)):
            what = f"port {port} free on 127.0.0.1"
            await wait.until(
                functools.partial(bindable, port), timeout=max(deadline - loop.time(), 0), what=what
            )
        yield
    finally:
        for held in files:
            held.close()  # closing the file releases its flock
