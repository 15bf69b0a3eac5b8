"""A coroutine that runs beside a block (an informer's resync timer, a webhook server beside the
manager, a test's watch or sampler): ``async with background.task(coro) as task:``. When the block
ends, the task is cancelled and awaited, so nothing of it outlives the block; an exception it ended
with before (other than its cancellation) is raised there, so a broken task is not left unseen."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

__all__ = ["task"]

T = TypeVar("T")


@contextlib.asynccontextmanager
async def task(coro: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """``coro`` as a task for the block; cancelled and awaited on exit."""
    running = asyncio.create_task(coro)
    try:
        yield running
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
