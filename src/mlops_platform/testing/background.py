"""A coroutine that runs beside a test's block (a watch, a sampler, a supervisor loop):
``async with background.task(coro) as task:``, cancelled and awaited when the block ends, an
exception it ended with raised there (so a broken watch fails the test instead of going unseen).
It is the runtime's :func:`mlops_platform.runtime.background.task`, under the name tests know."""

from __future__ import annotations

from mlops_platform.runtime.background import task as task

__all__ = ["task"]
