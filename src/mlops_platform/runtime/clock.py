"""Injectable clocks (the analogue of ``k8s.io/utils/clock``).

Contract of a :class:`Clock`:

- ``now()`` returns monotonic seconds. Only differences are meaningful.
- ``await sleep(seconds)`` returns once ``now()`` has advanced by at least ``seconds``.
- ``call_later(delay, callback)`` runs ``callback()`` once ``now()`` has advanced by ``delay``;
  the returned handle's ``cancel()`` prevents a pending call (it is a no-op afterwards).

:class:`RealClock` is backed by :func:`time.monotonic` and the running asyncio loop.
:class:`FakeClock` never advances by itself: tests call :meth:`FakeClock.step`, which moves
time forward and fires due timers synchronously, in deadline order, so no test needs a
real sleep to synchronise.

Wall-clock time (for API timestamps, never for durations) comes from :func:`utcnow` or an
injected ``Callable[[], datetime]``; :func:`rfc3339` is the one formatter of such timestamps.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock", "TimerHandle", "rfc3339", "utcnow"]


class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` is idempotent."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Source of monotonic time and timers (see the module docstring for the contract)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class RealClock:
    """Wall-clock implementation: :func:`time.monotonic` and the running event loop.

    ``call_later`` must be called from inside a running asyncio loop; the loop's clock is
    ``time.monotonic`` too, so deadlines computed from ``now()`` agree with its timers.
    """

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


@dataclass(order=True)
class _FakeTimer:
    deadline: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A manually driven clock for deterministic tests.

    Time only moves in :meth:`step`. Timers (and therefore sleepers) whose deadline is
    reached fire synchronously inside ``step``, ordered by deadline and then by
    registration order, with ``now()`` equal to their deadline while they run. Timers
    registered during ``step`` fire in the same ``step`` if they fall within its window.
    A timer with ``delay <= 0`` fires on the next ``step`` (``step(0)`` suffices).

    A sleeper's coroutine resumes when the event loop next runs after the ``step``.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[_FakeTimer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(self._now + max(0.0, delay), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = self.call_later(seconds, wake)
        try:
            await fut
        finally:
            handle.cancel()

    def step(self, seconds: float) -> None:
        """Advance time by ``seconds`` (>= 0), firing every timer that becomes due."""
        if seconds < 0:
            raise ValueError(f"cannot step a clock backwards ({seconds})")
        target = self._now + seconds
        while self._timers and self._timers[0].deadline <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.deadline)
            timer.cancelled = True
            timer.callback()
        self._now = target

    def pending_timers(self) -> int:
        """Number of scheduled, not yet cancelled or fired timers (including sleepers)."""
        return sum(1 for t in self._timers if not t.cancelled)

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or ``None`` if nothing is scheduled."""
        live = [t.deadline for t in self._timers if not t.cancelled]
        return min(live) if live else None


def utcnow() -> datetime.datetime:
    """The wall clock in UTC (for API timestamps; durations use :class:`Clock`)."""
    return datetime.datetime.now(datetime.UTC)


def rfc3339(t: datetime.datetime, digits: int = 0) -> str:
    """``t`` in UTC as RFC 3339 with ``digits`` (0-6) fractional digits, truncated (never rounded up).

    0 is ``metav1.Time`` (``2006-01-02T15:04:05Z``), 6 ``metav1.MicroTime``
    (``2006-01-02T15:04:05.000000Z``); the JSON log lines use 3.
    """
    if not 0 <= digits <= 6:
        raise ValueError(f"digits must be 0..6, not {digits}")
    u = t.astimezone(datetime.UTC)
    fraction = f".{u.microsecond:06d}"[: digits + 1] if digits else ""
    return f"{u:%Y-%m-%dT%H:%M:%S}{fraction}Z"
