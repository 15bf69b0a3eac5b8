"""Work queue layers (queue -> delaying -> rate limiting), clocks and metrics.

Synchronisation is by FakeClock.step and asyncio.Event; ``asyncio.sleep(0)`` is only used to
let already-runnable tasks run (a scheduler yield, never a wait for time to pass).
"""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from prometheus_client import CollectorRegistry

from mlops_platform.runtime.clock import FakeClock, RealClock, rfc3339
from mlops_platform.runtime.queue.delaying_queue import DelayingQueue
from mlops_platform.runtime.queue.rate_limiting_queue import RateLimitingQueue
from mlops_platform.runtime.queue.ratelimiter import ItemExponentialFailureRateLimiter
from mlops_platform.runtime.queue.workqueue import LOW, Queue, ShutDown
from mlops_platform.runtime.queue.workqueue_metrics import DURATION_BUCKETS, WorkqueueMetricsProvider


async def _yield_to_tasks(times: int = 3) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


# -- FakeClock -------------------------------------------------------------------------


def test_fake_clock_fires_timers_in_deadline_order_with_now_at_deadline() -> None:
    clock = FakeClock(start=10.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(2.0, lambda: fired.append(("b", clock.now())))
    clock.call_later(1.0, lambda: fired.append(("a", clock.now())))
    cancelled = clock.call_later(1.5, lambda: fired.append(("x", clock.now())))
    cancelled.cancel()
    clock.step(1.0)
    assert fired == [("a", 11.0)]
    clock.step(5.0)
    assert fired == [("a", 11.0), ("b", 12.0)]
    assert clock.now() == 16.0
    assert clock.pending_timers() == 0
    with pytest.raises(ValueError, match="backwards"):
        clock.step(-1)


async def test_fake_clock_sleep_wakes_only_when_stepped() -> None:
    clock = FakeClock()
    woke = asyncio.Event()

    async def sleeper() -> None:
        await clock.sleep(5.0)
        woke.set()

    task = asyncio.create_task(sleeper())
    await _yield_to_tasks()
    assert clock.next_deadline() == 5.0
    clock.step(4.9)
    await _yield_to_tasks()
    assert not woke.is_set()
    clock.step(0.1)
    await woke.wait()
    await task


async def test_fake_clock_cancelled_sleep_releases_its_timer() -> None:
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep(1.0))
    await _yield_to_tasks()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.pending_timers() == 0


@pytest.mark.parametrize(
    ("digits", "text"),
    [(0, "2026-03-01T01:02:03Z"), (3, "2026-03-01T01:02:03.999Z"), (6, "2026-03-01T01:02:03.999999Z")],
    ids=["metav1.Time", "log-line", "metav1.MicroTime"],
)
def test_rfc3339_is_utc_and_truncates_to_the_digits(digits: int, text: str) -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    t = datetime.datetime(2026, 3, 1, 3, 2, 3, 999999, tzinfo=plus_two)
    assert rfc3339(t, digits) == text
    with pytest.raises(ValueError, match=r"0\.\.6"):
        rfc3339(t, 7)


# -- Queue -----------------------------------------------------------------------------


async def test_fifo_order() -> None:
    q: Queue[str] = Queue()
    for item in "abc":
        q.add(item)
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_dedup_while_queued() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    q.add("b")
    q.add("a")
    assert q.len() == len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert q.len() == 0


async def test_added_while_processing_is_requeued_once_after_done() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")
    q.add("a")
    assert q.len() == 0  # not handed out while processing
    q.done("a")
    assert q.len() == 1
    assert await q.get() == "a"
    q.done("a")
    assert q.len() == 0


async def test_item_is_never_handed_to_two_workers() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    first = await q.get()
    q.add("a")
    q.add("b")
    assert await q.get() == "b"  # the dirty "a" is skipped while processing
    second_worker = asyncio.create_task(q.get())
    await _yield_to_tasks()
    assert not second_worker.done()
    q.done(first)
    assert await second_worker == "a"


async def test_get_waits_for_add_and_waiters_are_served_in_order() -> None:
    q: Queue[str] = Queue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await _yield_to_tasks()
    assert not any(t.done() for t in getters)
    for item in "xyz":
        q.add(item)
    assert await asyncio.gather(*getters) == ["x", "y", "z"]


async def test_cancelled_getter_passes_on_its_wakeup() -> None:
    q: Queue[str] = Queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await _yield_to_tasks()
    q.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it can take the item
    assert await second == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_done_of_an_item_not_processing_is_a_noop() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    q.done("a")
    assert q.queued() == ["a"]


async def test_shutdown_ignores_adds_and_get_raises_once_empty() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    q.shutdown()
    assert q.shutting_down()
    q.add("b")
    assert await q.get() == "a"  # queued items are still handed out
    with pytest.raises(ShutDown):
        await q.get()
    q.shutdown()  # idempotent


async def test_shutdown_wakes_all_waiting_getters() -> None:
    q: Queue[str] = Queue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await _yield_to_tasks()
    q.shutdown()
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(r, ShutDown) for r in results)


async def test_dirty_item_is_requeued_by_done_after_shutdown() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    item = await q.get()
    q.add("a")  # dirtied before shutdown
    q.shutdown()
    q.done(item)
    assert await q.get() == "a"


async def test_shutdown_with_drain_waits_for_in_flight_items() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    log: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def worker() -> None:
        item = await q.get()
        started.set()
        await release.wait()
        log.append("done")
        q.done(item)

    async def drain() -> None:
        await q.shutdown_with_drain()
        log.append("drained")

    worker_task = asyncio.create_task(worker())
    await started.wait()
    drain_task = asyncio.create_task(drain())  # scheduled before the worker is released
    release.set()
    await asyncio.gather(drain_task, worker_task)
    assert log == ["done", "drained"]
    assert not q._processing
    assert not q._dirty


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    q: Queue[str] = Queue()
    await q.shutdown_with_drain()
    assert q.shutting_down()


async def test_shutdown_ends_a_pending_drain() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    await q.get()  # never done
    drain_task = asyncio.create_task(q.shutdown_with_drain())
    await _yield_to_tasks()
    assert not drain_task.done()
    q.shutdown()
    await drain_task
    assert q._processing == {"a"}


# -- DelayingQueue ---------------------------------------------------------------------


def test_add_after_adds_when_the_delay_has_passed() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 1.0)
    assert q.len() == 0
    assert q.waiting_len() == 1
    clock.step(0.999)
    assert q.len() == 0
    clock.step(0.001)
    assert q.len() == 1
    assert q.waiting_len() == 0


def test_waiting_lists_the_items_soonest_first_and_nothing_due_ignores_them() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("late", 30.0)
    q.add_after("soon", 5.0)
    q.add_after("late", 10.0)  # the earlier ready time wins
    assert q.waiting() == ["soon", "late"]
    assert q.nothing_due() and not q.idle()
    clock.step(5.0)
    assert q.waiting() == ["late"] and not q.nothing_due()


async def test_idle_means_nothing_queued_processing_or_waiting_for_its_time() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    assert q.idle()
    q.add("a")
    assert not q.idle()
    item = await q.get()
    assert q.len() == 0 and not q.idle()  # a worker still processes it
    q.done(item)
    assert q.idle()
    q.add_after("b", 1.0)  # a retry's backoff
    assert q.len() == 0 and not q.idle()
    clock.step(1.0)
    q.done(await q.get())
    assert q.idle()


async def test_idle_for_counts_from_the_last_item_done_and_is_zero_while_work_is_due() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add("a")
    assert q.idle_for() == 0.0  # queued
    item = await q.get()
    assert q.idle_for() == 0.0  # being processed
    q.done(item)
    first = q.idle_for()
    assert 0.0 < first < 5.0  # idle since that moment (the process clock)
    q.add_after("b", 1.0)
    assert q.idle_for() == 0.0  # a retry's backoff: work is due
    clock.step(1.0)
    item = await q.get()
    before = time.monotonic()
    q.done(item)
    assert 0.0 < q.idle_for() <= time.monotonic() - before  # counted again from this done


@pytest.mark.parametrize("delay", [0.0, -1.0])
def test_add_after_non_positive_adds_immediately(delay: float) -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", delay)
    assert q.len() == 1
    assert clock.pending_timers() == 0


async def test_add_after_orders_by_ready_time_then_by_call_order() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("late", 3.0)
    q.add_after("early", 1.0)
    q.add_after("mid1", 2.0)
    q.add_after("mid2", 2.0)
    clock.step(3.0)
    assert [await q.get() for _ in range(4)] == ["early", "mid1", "mid2", "late"]


def test_add_after_earliest_ready_time_wins() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 5.0)
    q.add_after("a", 1.0)  # earlier: replaces
    q.add_after("a", 3.0)  # later: ignored
    assert q.waiting_len() == 1
    clock.step(1.0)
    assert q.queued() == ["a"]
    assert q.waiting_len() == 0
    clock.step(10.0)
    assert q.queued() == ["a"]  # the replaced entries never fire


async def test_replaced_entry_does_not_fire_for_a_later_add_after() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 5.0)
    q.add_after("a", 1.0)  # the 5 s entry is now stale
    q.add_after("b", 3.0)  # keeps the stale entry below the heap's head after "a" fires
    clock.step(1.0)
    q.done(await q.get())
    q.add_after("a", 10.0)  # ready at 11
    clock.step(3.0)
    assert await q.get() == "b"
    clock.step(1.0)  # t=5: the stale entry must not add "a" (nor drop the live one)
    assert q.len() == 0
    assert q.waiting_len() == 1
    clock.step(6.0)
    assert q.len() == 1


async def test_waiting_is_independent_of_queued_and_processing() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add("a")
    q.add_after("a", 1.0)
    assert q.len() == 1
    item = await q.get()
    clock.step(1.0)  # ready while processing: dirty, not handed out
    assert q.len() == 0
    q.done(item)
    assert await q.get() == "a"


def test_shutdown_drops_waiting_items_and_ignores_add_after() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 1.0)
    q.shutdown()
    assert clock.pending_timers() == 0
    q.add_after("b", 1.0)
    q.add_after("c", 0.0)
    clock.step(5.0)
    assert q.len() == 0
    assert q.waiting_len() == 0


async def test_add_after_with_the_real_clock() -> None:
    q: DelayingQueue[str] = DelayingQueue(clock=RealClock())
    q.add_after("a", 0.01)
    async with asyncio.timeout(5):  # a guard against hanging, not synchronisation
        assert await q.get() == "a"
    q.shutdown()


# -- RateLimitingQueue -----------------------------------------------------------------


def test_add_rate_limited_backs_off_and_forget_resets() -> None:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 100.0)
    q: RateLimitingQueue[str] = RateLimitingQueue(limiter, clock=clock)
    q.add_rate_limited("a")
    assert q.num_requeues("a") == 1
    clock.step(0.5)
    assert q.len() == 0
    clock.step(0.5)
    assert q.len() == 1
    q.add_rate_limited("a")  # second failure: 2 s
    assert q.num_requeues("a") == 2
    assert clock.next_deadline() == 3.0
    q.forget("a")
    assert q.num_requeues("a") == 0


def test_default_rate_limiter_uses_the_queue_clock() -> None:
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=clock)
    q.add_rate_limited("a")
    q.add_rate_limited("b")
    clock.step(0.004)
    assert q.len() == 0
    clock.step(0.001)
    assert q.queued() == ["a", "b"]


# -- metrics ---------------------------------------------------------------------------


def _value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    value = registry.get_sample_value(metric, {"name": "q", "controller": "q", **labels})
    assert value is not None, metric
    return value


async def test_metrics_follow_the_item_lifecycle() -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    provider = WorkqueueMetricsProvider(registry, clock=clock)
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 100.0)
    q: RateLimitingQueue[str] = RateLimitingQueue(
        limiter, "q", clock=clock, metrics=provider.new_queue_metrics("q")
    )
    q.add("a")
    q.add("a")  # de-duplicated: not an add
    assert _value(registry, "workqueue_adds_total") == 1
    assert _value(registry, "workqueue_depth") == 1

    clock.step(2.0)
    item = await q.get()
    assert _value(registry, "workqueue_depth") == 0
    assert _value(registry, "workqueue_queue_duration_seconds_count") == 1
    assert _value(registry, "workqueue_queue_duration_seconds_sum") == 2.0
    assert _value(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert _value(registry, "workqueue_queue_duration_seconds_bucket", le="10.0") == 1

    clock.step(3.0)
    assert _value(registry, "workqueue_unfinished_work_seconds") == 3.0
    assert _value(registry, "workqueue_longest_running_processor_seconds") == 3.0
    q.add("a")  # dirty while processing: counted in depth, as in client-go
    assert _value(registry, "workqueue_depth") == 1
    q.done(item)
    assert _value(registry, "workqueue_work_duration_seconds_sum") == 3.0
    assert _value(registry, "workqueue_work_duration_seconds_count") == 1
    assert _value(registry, "workqueue_unfinished_work_seconds") == 0
    assert _value(registry, "workqueue_longest_running_processor_seconds") == 0

    assert _value(registry, "workqueue_retries_total") == 0
    q.add_rate_limited("b")
    q.add_rate_limited("b")
    assert _value(registry, "workqueue_retries_total") == 2
    assert _value(registry, "workqueue_adds_total") == 2


async def test_unfinished_work_sums_and_longest_takes_the_oldest() -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    provider = WorkqueueMetricsProvider(registry, clock=clock)
    q: Queue[str] = Queue("q", metrics=provider.new_queue_metrics("q"))
    q.add("a")
    q.add("b")
    await q.get()
    clock.step(1.0)
    await q.get()
    clock.step(1.0)
    assert _value(registry, "workqueue_unfinished_work_seconds") == 3.0
    assert _value(registry, "workqueue_longest_running_processor_seconds") == 2.0


def test_metrics_labels_and_buckets() -> None:
    registry = CollectorRegistry()
    provider = WorkqueueMetricsProvider(registry, clock=FakeClock())
    q: Queue[str] = Queue("q", metrics=provider.new_queue_metrics("q", controller="ctl"))
    q.add("a")
    assert registry.get_sample_value("workqueue_adds_total", {"name": "q", "controller": "ctl"}) == 1
    assert DURATION_BUCKETS == (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    bucket_bounds = {
        s.labels["le"]
        for metric in registry.collect()
        if metric.name == "workqueue_work_duration_seconds"
        for s in metric.samples
        if s.name.endswith("_bucket")
    }
    assert bucket_bounds == {
        *("1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1.0", "10.0"),
        "+Inf",
    }
    names = {metric.name for metric in registry.collect()}
    assert {
        "workqueue_depth",
        "workqueue_adds",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries",
    } <= names


async def test_higher_priority_first_fifo_within_a_priority() -> None:
    q: Queue[str] = Queue()
    for item in ("l1", "l2"):
        q.add(item, LOW)  # an informer's initial list
    q.add("n1")
    q.add("l3", LOW)
    q.add("n2")  # a user's change
    assert q.queued() == ["n1", "n2", "l1", "l2", "l3"]
    assert [await q.get() for _ in range(5)] == ["n1", "n2", "l1", "l2", "l3"]


async def test_a_queued_item_moves_up_never_down_and_keeps_its_priority_while_processed() -> None:
    q: Queue[str] = Queue()
    q.add("a", LOW)
    q.add("b", LOW)
    q.add("c")
    q.add("b")  # changed by a user while it waits behind the backlog: moves up
    q.add("c", LOW)  # a resync of a waiting normal item: stays where it is
    assert q.queued() == ["c", "b", "a"]
    assert len(q) == 3
    item = await q.get()
    assert item == "c"
    q.add("c", LOW)
    q.add("c")  # re-added while processed: re-queued at the highest priority it was added with
    q.done("c")
    assert q.queued() == ["b", "c", "a"]
