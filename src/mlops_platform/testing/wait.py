"""Wait on conditions with timeouts (never sleep as synchronisation)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float = 60.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Await ``probe()`` until it returns a truthy value and return it; TimeoutError names ``what``.

    The last falsy value or exception is included in the error to make failures debuggable.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            value = await probe()
            if value:
                return value
            last = value
        except Exception as e:  # the probe may fail while the world converges
            last = e
        if loop.time() >= deadline:
            raise TimeoutError(f"{what} not met within {timeout:.0f}s (last: {last!r})")
        await asyncio.sleep(interval)
