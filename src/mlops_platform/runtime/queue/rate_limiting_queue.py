"""Rate-limiting work queue (client-go ``workqueue.TypedRateLimitingInterface``).

:meth:`RateLimitingQueue.add_rate_limited` asks the :class:`RateLimiter` how long the item
should wait and delegates to ``add_after``. A reconciler calls ``add_rate_limited`` on
failure and ``forget`` on success (so the item's backoff starts over next time);
``num_requeues`` exposes the limiter's failure count. ``forget`` only clears the limiter's
history: it does not remove the item from the queue or from the waiting heap.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from mlops_platform.runtime.clock import Clock
from mlops_platform.runtime.queue.delaying_queue import DelayingQueue
from mlops_platform.runtime.queue.ratelimiter import RateLimiter, default_controller_rate_limiter
from mlops_platform.runtime.queue.workqueue import QueueMetrics

__all__ = ["RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """A :class:`DelayingQueue` whose re-adds are delayed by a :class:`RateLimiter`.

    ``rate_limiter`` defaults to :func:`default_controller_rate_limiter` on the same clock.
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics: QueueMetrics[T] | None = None,
    ) -> None:
        super().__init__(name, clock=clock, metrics=metrics)
        self.rate_limiter: RateLimiter[T] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=self._clock)
        )

    def add_rate_limited(self, item: T) -> None:
        """``add_after(item, rate_limiter.when(item))``; counts as a retry in the metrics."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Clear the limiter's failure history of ``item`` (call it when processing succeeded)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many times ``item`` has been rate-limited since it was last forgotten."""
        return self.rate_limiter.num_requeues(item)
