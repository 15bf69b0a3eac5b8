"""Work queue with client-go ``util/workqueue`` semantics, for asyncio.

Guarantees (as in client-go's ``workqueue/doc.go``):

- Fair: items processed in the order they are added, within a priority: an item added with a
  higher ``priority`` is handed out before every item of a lower one (controller-runtime's
  priority queue: objects of an informer's initial list and of resyncs go in at :data:`LOW`, so
  a user's change never waits behind thousands of them). Re-adding a queued item with a higher
  priority moves it up; never down.
- Stingy: a single item will not be processed multiple times concurrently, and if an item
  is added multiple times before it can be processed, it will only be processed once.
- Multiple consumers and producers. In particular, it is allowed for an item to be
  re-enqueued while it is being processed.
- Shutdown notifications.

Layers, as in client-go: :class:`Queue` (this module) → ``DelayingQueue``
(:mod:`mlops_platform.runtime.queue.delaying_queue`, adds ``add_after``) → ``RateLimitingQueue``
(:mod:`mlops_platform.runtime.queue.rate_limiting_queue`, adds ``add_rate_limited``/``forget``).

Usage contract: every item returned by :meth:`Queue.get` must be passed to
:meth:`Queue.done` when its processing ends. ``get`` raises :class:`ShutDown` (instead of
client-go's ``shutdown bool``) once the queue is shut down *and* empty. The queue belongs to
one event loop and is not thread-safe; no method but ``get``/``shutdown_with_drain`` awaits.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from mlops_platform.runtime import wait

__all__ = ["HIGH", "LOW", "NORMAL", "NoopQueueMetrics", "Queue", "QueueMetrics", "ShutDown"]

#: controller-runtime's ``handler.LowPriority`` (-100) and the default priority (0); HIGH has no
#: name there (priorities are plain ints): what a controller puts first (e.g. its users' changes)
LOW, NORMAL, HIGH = -100, 0, 100

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class ShutDown(Exception):
    """Raised by :meth:`Queue.get` when the queue is shut down and has no items left."""


class QueueMetrics(Protocol[T_contra]):
    """Hook notified of queue events (client-go's ``queueMetrics``).

    ``add`` is called when an item becomes dirty (a de-duplicated add is not reported),
    ``get`` when a worker takes it, ``done`` when the worker finishes it, and ``retry``
    on every ``add_after``/``add_rate_limited`` of a delaying queue.
    """

    def add(self, item: T_contra) -> None: ...

    def get(self, item: T_contra) -> None: ...

    def done(self, item: T_contra) -> None: ...

    def retry(self) -> None: ...


class NoopQueueMetrics:
    """The default :class:`QueueMetrics`: records nothing."""

    def add(self, item: object) -> None:
        return None

    def get(self, item: object) -> None:
        return None

    def done(self, item: object) -> None:
        return None

    def retry(self) -> None:
        return None


class Queue(Generic[T]):
    """FIFO, de-duplicating, "stingy" work queue (client-go ``workqueue.Typed``).

    - ``add(x)`` while ``x`` is queued is a no-op (dedup).
    - ``add(x)`` while ``x`` is being processed marks it dirty; it is not handed to another
      worker, but re-queued (once, however many adds) when ``done(x)`` is called.
    - After ``shutdown()``, ``add`` is ignored; ``get`` keeps returning queued items and then
      raises :class:`ShutDown`.
    """

    def __init__(self, name: str = "", *, metrics: QueueMetrics[T] | None = None) -> None:
        self.name = name
        self._metrics: QueueMetrics[T] = metrics if metrics is not None else NoopQueueMetrics()
        # Order in which items will be handed out: one FIFO per priority, the highest first.
        # Invariant: every element is in ``_dirty`` and not in ``_processing``, and appears once
        # in all of them; as sets, queued == dirty - processing.
        self._queues: dict[int, collections.deque[T]] = {}
        # The priority of every dirty item (the highest it was added with since it last was got).
        self._priority: dict[T, int] = {}
        self._len = 0
        # Every item that needs processing: queued items, plus items re-added while being
        # processed (those are queued again by ``done``).
        self._dirty: set[T] = set()
        # Items handed out by ``get`` and not yet ``done``. An item may also be in ``_dirty``.
        self._processing: set[T] = set()
        self._shutting_down = False
        self._drain = False
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._drainers = wait.Waiters()  # shutdown_with_drain, until nothing is processed
        self._last_done = time.monotonic()  # when the last item being processed was done

    # -- producers -------------------------------------------------------------------

    def add(self, item: T, priority: int = NORMAL) -> None:
        """Mark ``item`` as needing processing at ``priority`` (ignored after shutdown)."""
        if self._shutting_down:
            return
        if item in self._dirty:
            old = self._priority[item]
            if priority > old:  # move it up (if it waits; a processing one is re-queued by done)
                self._priority[item] = priority
                if item not in self._processing:
                    self._queues[old].remove(item)
                    self._queues.setdefault(priority, collections.deque()).append(item)
            return
        self._metrics.add(item)
        self._dirty.add(item)
        self._priority[item] = priority
        if item in self._processing:
            return  # re-queued by done()
        self._push(item)
        self._wake_one_getter()

    def _push(self, item: T) -> None:
        self._queues.setdefault(self._priority[item], collections.deque()).append(item)
        self._len += 1

    def _pop(self) -> T:
        for p in sorted(self._queues, reverse=True):
            q = self._queues[p]
            if q:
                self._len -= 1
                return q.popleft()
        raise IndexError("pop from an empty queue")

    # -- consumers -------------------------------------------------------------------

    async def get(self) -> T:
        """Wait for and return the next item; raise :class:`ShutDown` when shut down and empty.

        The caller owns the item until it calls :meth:`done`. Waiting getters are served in
        FIFO order. Cancelling a waiting ``get`` loses no item.
        """
        while not self._len and not self._shutting_down:
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._getters:
                    self._getters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake_one_getter()  # pass on the wake-up we were given
                raise
        if not self._len:
            raise ShutDown
        item = self._pop()
        self._metrics.get(item)
        self._processing.add(item)
        self._dirty.discard(item)
        del self._priority[item]
        return item

    def done(self, item: T) -> None:
        """Finish processing ``item``; re-queue it if it was added meanwhile.

        Calling ``done`` for an item that is not being processed is a no-op (client-go would
        push a dirty item a second time, duplicating it in the queue).
        """
        if item not in self._processing:
            return
        self._metrics.done(item)
        self._processing.discard(item)
        if item in self._dirty:
            self._push(item)
            self._wake_one_getter()
        if not self._processing:
            self._last_done = time.monotonic()
            self._drainers.wake_all()

    # -- introspection ---------------------------------------------------------------

    def len(self) -> int:
        """Number of items waiting to be handed out (informational only)."""
        return self._len

    def __len__(self) -> int:
        return self._len

    def idle_for(self) -> float:
        """Seconds since the queue last had work (since the last item was done), 0 while it has:
        for work that must not meet a reconcile (a refreeze of the heap)."""
        if self._len or self._processing:
            return 0.0
        return time.monotonic() - self._last_done

    def idle(self) -> bool:
        """Nothing waits and nothing is being processed (``len() == 0`` alone is also true while a
        worker still processes the last item): what a test waits on before a quiet window."""
        return not self._len and not self._processing

    def queued(self) -> list[T]:
        """The waiting items in the order they will be handed out (informational, O(n))."""
        return [item for p in sorted(self._queues, reverse=True) for item in self._queues[p]]

    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- shutdown --------------------------------------------------------------------

    def shutdown(self) -> None:
        """Ignore further adds and let workers exit once the queue is empty.

        Also makes a pending :meth:`shutdown_with_drain` return without waiting further.
        Idempotent.
        """
        self._drain = False
        self._begin_shutdown()
        self._drainers.wake_all()

    async def shutdown_with_drain(self) -> None:
        """Shut down, then wait until every item handed out by ``get`` has been ``done``.

        Workers must keep calling ``done``, or this waits forever; a concurrent
        :meth:`shutdown` ends the wait early.
        """
        self._drain = True
        self._begin_shutdown()
        while self._processing and self._drain:
            await self._drainers.wait()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        self._on_shutdown()
        while self._getters:  # broadcast: every waiting get re-checks and raises ShutDown
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _on_shutdown(self) -> None:
        """Hook for subclasses (e.g. to stop timers); called on every shutdown call."""

    # -- helpers ---------------------------------------------------------------------

    def _wake_one_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
