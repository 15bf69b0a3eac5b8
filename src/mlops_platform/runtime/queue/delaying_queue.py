"""Delaying work queue: ``add_after`` (client-go ``workqueue.TypedDelayingInterface``).

Items scheduled with :meth:`DelayingQueue.add_after` wait in a min-heap keyed by their
ready time and are ``add``-ed to the underlying :class:`~mlops_platform.runtime.workqueue.Queue`
when that time comes. A single timer, obtained from the injected
:class:`~mlops_platform.runtime.clock.Clock`, is armed for the earliest ready time; there is
no background task. Contracts:

- ``add_after(item, d)`` with ``d <= 0`` is a plain ``add``.
- One waiting entry per item: a new ``add_after`` with an earlier ready time replaces the
  waiting one, a later one is ignored (earliest wins).
- Waiting is independent of the queue proper: an item may be queued (or processing) and
  waiting at once; when it becomes ready it is ``add``-ed with the usual dedup rules.
- Items becoming ready at the same time are added in ``add_after`` order.
- Shutdown cancels the timer and drops every waiting item; later ``add_after`` calls are
  ignored.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mlops_platform.runtime.clock import Clock, RealClock, TimerHandle
from mlops_platform.runtime.queue.workqueue import Queue, QueueMetrics

__all__ = ["DelayingQueue"]

T = TypeVar("T", bound=Hashable)


@dataclass(order=True)
class _WaitFor(Generic[T]):
    ready_at: float
    seq: int
    item: T = field(compare=False)


class DelayingQueue(Queue[T]):
    """A :class:`Queue` that can also add an item after a delay (see the module docstring)."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics: QueueMetrics[T] | None = None,
    ) -> None:
        super().__init__(name, metrics=metrics)
        self._clock: Clock = clock if clock is not None else RealClock()
        # Min-heap of waiting entries. Entries replaced by an earlier one stay in the heap
        # but are stale: only ``_waiting_by_item[item]`` is live (lazy deletion).
        self._waiting: list[_WaitFor[T]] = []
        self._waiting_by_item: dict[T, _WaitFor[T]] = {}
        self._seq = itertools.count()
        self._timer: TimerHandle | None = None
        self._timer_at: float | None = None

    def add_after(self, item: T, seconds: float) -> None:
        """Add ``item`` once ``seconds`` have passed on the clock (now if ``seconds <= 0``)."""
        if self.shutting_down():
            return
        self._metrics.retry()
        if seconds <= 0:
            self.add(item)
            return
        ready_at = self._clock.now() + seconds
        existing = self._waiting_by_item.get(item)
        if existing is not None and existing.ready_at <= ready_at:
            return  # the earlier ready time wins
        entry = _WaitFor(ready_at, next(self._seq), item)
        self._waiting_by_item[item] = entry
        heapq.heappush(self._waiting, entry)
        self._arm_timer()

    def waiting_len(self) -> int:
        """Number of items waiting for their ready time (informational only)."""
        return len(self._waiting_by_item)

    def waiting(self) -> list[T]:
        """The items waiting for their ready time, soonest first (informational, O(n log n))."""
        return [e.item for e in sorted(self._waiting_by_item.values())]

    def idle(self) -> bool:
        """Nothing waits, not even for its ready time (a retry's backoff), and nothing is processed."""
        return super().idle() and not self._waiting_by_item

    def nothing_due(self) -> bool:
        """Nothing is ready or processed: items may wait for a later ready time (:meth:`waiting`)."""
        return super().idle()

    def idle_for(self) -> float:
        """0 also while an item waits for its ready time (work is due)."""
        return 0.0 if self._waiting_by_item else super().idle_for()

    def _peek_live(self) -> _WaitFor[T] | None:
        while self._waiting:
            head = self._waiting[0]
            if self._waiting_by_item.get(head.item) is head:
                return head
            heapq.heappop(self._waiting)  # stale
        return None

    def _arm_timer(self) -> None:
        head = self._peek_live()
        if head is not None and head.ready_at == self._timer_at:
            return  # already armed for the right time
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        if head is not None:
            self._timer_at = head.ready_at
            self._timer = self._clock.call_later(head.ready_at - self._clock.now(), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self.shutting_down():
            return
        now = self._clock.now()
        while (head := self._peek_live()) is not None and head.ready_at <= now:
            heapq.heappop(self._waiting)
            del self._waiting_by_item[head.item]
            self.add(head.item)
        self._arm_timer()

    def _on_shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        self._waiting.clear()
        self._waiting_by_item.clear()
        super()._on_shutdown()
