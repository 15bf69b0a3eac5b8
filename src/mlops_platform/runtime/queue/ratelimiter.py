"""Rate limiters for work-queue retries, after client-go ``workqueue/default_rate_limiters.go``.

A :class:`RateLimiter` answers "how long should this item wait before it is re-queued?".
Every call to ``when(item)`` counts as one more failure of ``item``; ``forget(item)`` is
called when the item succeeded, so that its history is cleared; ``num_requeues(item)``
reports how many failures are being remembered.

Limiters are plain objects for a single asyncio event loop; they are not thread-safe.
Delays are floats in seconds.

:class:`Exponential` is the project's one exponential backoff formula: the per-item limiter, the
informer's list/watch :class:`Backoff` and the event recorder's write retries all use it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from mlops_platform.runtime.clock import Clock, RealClock

__all__ = [
    "Backoff",
    "BucketRateLimiter",
    "Exponential",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "TokenBucket",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    """Strategy deciding the re-queue delay of an item (client-go ``TypedRateLimiter``)."""

    def when(self, item: T_contra) -> float:
        """Record one more failure of ``item`` and return how many seconds it should wait."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking ``item`` (it succeeded): its next ``when`` starts from scratch."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures of ``item`` are currently being tracked."""
        ...


class Exponential:
    """The exponential backoff formula: failure ``n`` (0-based) waits ``base * 2**n`` seconds, at most
    ``cap``. With ``jitter`` j, a random share (``rand()``, 0..1) of j times that is added, still
    capped at ``cap`` (client-go ``wait.Jitter``). Very large ``n`` cannot overflow (gives ``cap``).
    """

    def __init__(
        self, base: float, cap: float, *, jitter: float = 0.0, rand: Callable[[], float] = random.random
    ) -> None:
        if base < 0 or cap < 0 or jitter < 0:
            raise ValueError("base and max delays (and jitter) must be >= 0")
        self.base, self.cap, self.jitter = base, cap, jitter
        self._rand = rand

    def delay(self, n: int) -> float:
        """The wait after failure ``n`` (0-based)."""
        try:
            delay = min(math.ldexp(self.base, n), self.cap)  # base * 2**n, exact and overflow-checked
        except OverflowError:
            delay = self.cap
        if self.jitter:
            delay = min(delay + self._rand() * self.jitter * delay, self.cap)
        return delay


class Backoff:
    """The backoff of one retrying loop (client-go's reflector ``BackoffManager``), on ``clock``.

    Each :meth:`next_delay` is one more consecutive failure (:class:`Exponential` from ``initial`` to
    ``cap``, with ``jitter``); a failure more than ``reset_after`` seconds after the previous one
    (a healthy period in between) starts from ``initial`` again.
    """

    def __init__(
        self,
        initial: float,
        cap: float,
        *,
        jitter: float = 0.0,
        reset_after: float,
        clock: Clock | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._exponential = Exponential(initial, cap, jitter=jitter, rand=rand)
        self.reset_after = reset_after
        self._clock: Clock = clock if clock is not None else RealClock()
        self._failures = 0
        self._last_failure: float | None = None

    def next_delay(self) -> float:
        """Record one more failure and return how many seconds to wait before retrying."""
        now = self._clock.now()
        if self._last_failure is not None and now - self._last_failure > self.reset_after:
            self._failures = 0
        self._last_failure = now
        self._failures += 1
        return self._exponential.delay(self._failures - 1)


class ItemExponentialFailureRateLimiter(Generic[T]):
    """Per-item exponential backoff: the n-th failure (0-based) of an item waits
    ``base * 2**n`` seconds, at most ``max`` (:class:`Exponential`).
    """

    def __init__(self, base: float = 0.005, max: float = 1000.0) -> None:
        self._exponential = Exponential(base, max)
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        return self._exponential.delay(exp)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``burst``; the caller passes the time (any clock)."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, float(burst), now

    def _advance(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, now: float) -> bool:
        """Take a token if one is there (a spam filter: drop when empty)."""
        self._advance(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def reserve(self, now: float) -> float:
        """Take a token even if not yet there; return how long until it is (``Reserve().Delay()``)."""
        self._advance(now)
        self.tokens -= 1.0
        return -self.tokens / self.rate if self.tokens < 0 else 0.0

    def delay(self, now: float) -> float:
        """How long until a token is available."""
        self._advance(now)
        return max(0.0, (1.0 - self.tokens) / self.rate)


class BucketRateLimiter(Generic[T]):
    """Overall (not per-item) token bucket, like ``golang.org/x/time/rate`` ``Reserve().Delay()``.

    The bucket holds up to ``burst`` tokens and refills at ``qps`` tokens per second. Each
    ``when`` reserves one token, even one not yet available: the bucket may go negative, so
    successive calls in a burst return increasing delays (``burst`` calls return 0, then
    ``1/qps``, ``2/qps``, ...). ``forget`` is a no-op and ``num_requeues`` is always 0.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        if qps <= 0:
            raise ValueError("qps must be > 0")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        self.qps = qps
        self.burst = burst
        self._clock: Clock = clock if clock is not None else RealClock()
        self._bucket = TokenBucket(qps, burst, self._clock.now())

    def when(self, item: T) -> float:
        return self._bucket.reserve(self._clock.now())

    def forget(self, item: T) -> None:
        return None

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """Combines limiters: the delay is the maximum of theirs.

    ``when`` consults every limiter (each records the failure); ``forget`` forgets in all;
    ``num_requeues`` is the maximum over all.
    """

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters: tuple[RateLimiter[T], ...] = limiters

    def when(self, item: T) -> float:
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: T) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(*, clock: Clock | None = None) -> MaxOfRateLimiter[Hashable]:
    """client-go's ``DefaultControllerRateLimiter``.

    Per-item exponential backoff from 5 ms to 1000 s, combined with an overall token bucket
    of 10 qps and burst 100 (the bucket only matters for bursts of fresh failures).
    """
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )
