"""Prometheus :class:`~mlops_platform.runtime.workqueue.QueueMetrics`, as exported by controller-runtime.

Metric families (labels ``name`` and ``controller``; controller-runtime sets both to the
queue name, which is also our default):

- ``workqueue_depth`` (gauge): items added and not yet handed out (the dirty set).
- ``workqueue_adds_total`` (counter): adds that were not de-duplicated.
- ``workqueue_queue_duration_seconds`` (histogram): time from add to get.
- ``workqueue_work_duration_seconds`` (histogram): time from get to done.
- ``workqueue_unfinished_work_seconds`` (gauge): summed age of in-flight items.
- ``workqueue_longest_running_processor_seconds`` (gauge): age of the oldest in-flight item.
- ``workqueue_retries_total`` (counter): ``add_after``/``add_rate_limited`` calls.

The two "unfinished" gauges are computed when the registry is collected (client-go
refreshes them every 500 ms from a goroutine instead). Histogram buckets are
``10e-9 * 10**k`` for ``k`` in ``0..9``. Times come from an injectable clock.
"""

from __future__ import annotations

from collections.abc import Hashable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from mlops_platform.runtime.clock import Clock, RealClock

__all__ = ["DURATION_BUCKETS", "PrometheusQueueMetrics", "WorkqueueMetricsProvider"]

#: Exponential buckets 10e-9 * 10**k, 10 buckets (1e-08 s ... 10 s), as written out exactly.
DURATION_BUCKETS: tuple[float, ...] = tuple(float(f"1e{k}") for k in range(-8, 2))

_LABELS = ("name", "controller")


class WorkqueueMetricsProvider:
    """Registers the workqueue metric families in ``registry`` (once) and makes per-queue hooks.

    Create one provider per registry; use one queue per name (queues sharing a name share
    their series).
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, clock: Clock | None = None) -> None:
        reg = registry if registry is not None else REGISTRY
        self._clock: Clock = clock if clock is not None else RealClock()
        self.depth = Gauge("workqueue_depth", "Current depth of workqueue", _LABELS, registry=reg)
        self.adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", _LABELS, registry=reg
        )
        self.latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed "
            "by work_duration. Large values indicate stuck threads. One can deduce the number of "
            "stuck threads by observing the rate at which this increases.",
            _LABELS,
            registry=reg,
        )
        self.longest_running_processor = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            _LABELS,
            registry=reg,
        )
        self.retries = Counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", _LABELS, registry=reg
        )

    def new_queue_metrics(self, name: str, *, controller: str | None = None) -> PrometheusQueueMetrics:
        """The hook to pass as ``metrics=`` to the queue called ``name``."""
        return PrometheusQueueMetrics(self, name, name if controller is None else controller, self._clock)


class PrometheusQueueMetrics:
    """Per-queue ``QueueMetrics`` hook (client-go ``defaultQueueMetrics``)."""

    def __init__(self, provider: WorkqueueMetricsProvider, name: str, controller: str, clock: Clock) -> None:
        labels = {"name": name, "controller": controller}
        self._clock = clock
        self._depth = provider.depth.labels(**labels)
        self._adds = provider.adds.labels(**labels)
        self._latency = provider.latency.labels(**labels)
        self._work_duration = provider.work_duration.labels(**labels)
        self._retries = provider.retries.labels(**labels)
        provider.unfinished_work.labels(**labels).set_function(self.unfinished_work_seconds)
        provider.longest_running_processor.labels(**labels).set_function(
            self.longest_running_processor_seconds
        )
        self._add_times: dict[Hashable, float] = {}
        self._processing_start_times: dict[Hashable, float] = {}

    def add(self, item: Hashable) -> None:
        self._adds.inc()
        self._depth.inc()
        self._add_times.setdefault(item, self._clock.now())

    def get(self, item: Hashable) -> None:
        now = self._clock.now()
        self._depth.dec()
        self._processing_start_times[item] = now
        added_at = self._add_times.pop(item, None)
        if added_at is not None:
            self._latency.observe(now - added_at)

    def done(self, item: Hashable) -> None:
        started_at = self._processing_start_times.pop(item, None)
        if started_at is not None:
            self._work_duration.observe(self._clock.now() - started_at)

    def retry(self) -> None:
        self._retries.inc()

    def unfinished_work_seconds(self) -> float:
        """Summed age of the items currently being processed."""
        now = self._clock.now()
        return sum(now - t for t in self._processing_start_times.values())

    def longest_running_processor_seconds(self) -> float:
        """Age of the oldest item currently being processed (0 if none)."""
        now = self._clock.now()
        return max((now - t for t in self._processing_start_times.values()), default=0.0)
