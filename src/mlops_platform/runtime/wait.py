"""Wait on conditions with timeouts (never sleep as synchronisation): :func:`until` polls a
probe; :class:`Waiters` are woken by whoever changes the state they wait on."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def until(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
    retry_on: tuple[type[Exception], ...] = ...,
) -> T: ...


@overload
async def until(
    probe: Callable[[], T | None],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
    retry_on: tuple[type[Exception], ...] = ...,
) -> T: ...


async def until(
    probe: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = 0.2,
    what: str = "condition",
    retry_on: tuple[type[Exception], ...] = (Exception,),
) -> Any:
    """Call ``probe()`` (sync or async) until it returns a truthy value and return that value.

    Raises TimeoutError naming ``what`` and the last falsy value or exception, so failures are
    debuggable. Exceptions in ``retry_on`` (default: all) count as "not yet" while the world
    converges; others propagate at once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            last = value
        except retry_on as e:
            last = e
        if loop.time() >= deadline:
            raise TimeoutError(f"{what} not met within {timeout:.0f}s (last: {last!r})")
        await asyncio.sleep(interval)


class Waiters:
    """Tasks waiting for the next :meth:`wake_all` (a broadcast a synchronous method can send, unlike
    ``asyncio.Condition``, which needs its lock): each re-checks its own condition when woken."""

    def __init__(self) -> None:
        self._futures: list[asyncio.Future[None]] = []

    async def wait(self) -> None:
        """Wait until the next :meth:`wake_all` (a cancelled wait leaves nothing behind)."""
        waiter = asyncio.get_running_loop().create_future()
        self._futures.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._futures:
                self._futures.remove(waiter)

    def wake_all(self) -> None:
        """Wake every task waiting now (later waits wait for the next call)."""
        futures, self._futures = self._futures, []
        for waiter in futures:
            if not waiter.done():
                waiter.set_result(None)
