"""The reconciler contract (controller-runtime ``pkg/reconcile``).

A reconciler is one method, ``async def reconcile(request) -> Result``. It is level-based: it reads
the CURRENT state (from the cache) for ``request`` and drives the world towards the desired state,
never acting on what an event said. Requeue rules, applied by the controller after each call:

- returns ``Result()``: done; the item's failure history is forgotten.
- returns ``Result(requeue_after=s)``: forgotten, then re-queued after ``s`` seconds.
- returns ``Result(requeue=True)``: re-queued with the rate limiter's backoff (counts as a retry).
- raises :class:`TerminalError`: logged and counted as an error, NOT retried (bad input that only a
  spec change can fix; the next change of the object enqueues it again).
- raises any other exception: logged, counted, re-queued with per-item exponential backoff.

The same request is never reconciled by two workers at once (the work queue is stingy); different
requests run concurrently up to ``max_concurrent_reconciles``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Protocol

from mlops_platform.runtime import wait


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Request:
    """Which object to reconcile: ``namespace`` is None for cluster-scoped objects."""

    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    requeue: bool = False
    requeue_after: float | None = None


class TerminalError(Exception):
    """An error that retrying cannot fix; the controller does not requeue it."""


class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result: ...


class InFlight:
    """The requests a worker is processing now, and waiting until none that ``where`` accepts is
    (a shard's drain before it gives a partition up)."""

    def __init__(self) -> None:
        self._requests: set[Request] = set()
        self._waiters = wait.Waiters()

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)

    def add(self, req: Request) -> None:
        self._requests.add(req)

    def discard(self, req: Request) -> None:
        self._requests.discard(req)
        self._waiters.wake_all()

    async def wait_none(self, where: Callable[[Request], bool]) -> None:
        """Wait until no request that ``where`` accepts is in flight."""
        while any(where(r) for r in self._requests):
            await self._waiters.wait()
