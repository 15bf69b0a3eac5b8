"""Property tests of the work queue under generated interleavings.

Each example runs on its own fresh event loop. The interleaving is driven by the generated
operations: adds, re-adds of an item a worker holds, releasing a worker, scheduler yields
(``asyncio.sleep(0)``: lets runnable tasks run, never waits for time) and settling (enough
yields for the loop to go quiescent). The asyncio scheduler is deterministic, so every
example is reproducible.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.queue.delaying_queue import DelayingQueue
from mlops_platform.runtime.queue.workqueue import LOW, NORMAL, Queue, ShutDown

MAX_WORKERS = 4
ITEMS = st.sampled_from(["a", "b", "c"])
WORKER = st.integers(0, MAX_WORKERS - 1)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), ITEMS),
        st.tuples(st.just("add_low"), ITEMS),
        st.tuples(st.just("add_held"), WORKER),
        st.tuples(st.just("release"), WORKER),
        st.tuples(st.just("yield"), st.integers(1, 3)),
        st.tuples(st.just("settle"), st.just(0)),
    ),
    max_size=60,
)
# Loop iterations after which the harness is quiescent. A released worker finishes (waking a
# getter), may yield, and calls get again; a woken worker runs on the very next iteration.
# Measured: the state stops changing after at most 2, so this leaves a wide margin.
SETTLE_STEPS = 3 * MAX_WORKERS


def _run(coro_factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        runner.run(coro_factory())


def _check_invariants(q: Queue[str]) -> None:
    queued = q.queued()
    assert q.len() >= 0
    assert len(queued) == len(set(queued)), "an item is queued twice"
    assert set(queued) == q._dirty - q._processing


def _check_no_lost_wakeup(q: Queue[str], in_get: int) -> None:
    """No queued item is left behind while a getter sleeps un-woken.

    ``in_get`` workers are suspended in ``get``: each either still waits (its future pending in
    ``q._getters``) or has been woken (future resolved and popped) and has yet to run. A woken
    worker needs another loop step to take an item, so a getter may wait beside queued items
    only while every one of them has a woken worker on its way (at quiescence: none may wait
    beside work). Holds after every step for a correct queue; a lost wake-up breaks it at once,
    before a worker that finishes and calls ``get`` again could hide it by taking the item.
    """
    waiting = _waiting(q)
    if waiting:
        woken = in_get - waiting
        assert q.len() <= woken, "a worker idles while items wait"


def _check_quiescent(q: Queue[str], in_get: int) -> None:
    """After settling no worker is still woken: each one in ``get`` waits in ``q._getters``."""
    assert in_get == _waiting(q), "a woken worker never ran (its wake-up was dropped)"
    _check_no_lost_wakeup(q, in_get)  # with none woken: no worker waits beside work


def _waiting(q: Queue[str]) -> int:
    return sum(not w.done() for w in q._getters)


@dataclass
class _Harness:
    """Workers that hold each item until released; records every processing start."""

    q: Queue[str]
    workers: int
    tick: itertools.count[int] = field(default_factory=itertools.count)
    last_add: dict[str, int] = field(default_factory=dict)
    starts: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    in_flight: set[str] = field(default_factory=set)
    held: list[str | None] = field(default_factory=list)
    gates: list[asyncio.Event] = field(default_factory=list)
    in_get: int = 0  # workers suspended in q.get()
    free_run: bool = False
    yield_after_done: bool = False

    def __post_init__(self) -> None:
        self.held = [None] * self.workers
        self.gates = [asyncio.Event() for _ in range(self.workers)]

    def add(self, item: str, priority: int = NORMAL) -> None:
        if not self.q.shutting_down():
            self.last_add[item] = next(self.tick)
        self.q.add(item, priority)

    def release(self, worker: int) -> None:
        if self.held[worker] is not None:
            self.gates[worker].set()

    def release_all(self) -> None:
        self.free_run = True
        for worker in range(self.workers):
            self.release(worker)

    async def worker(self, index: int) -> None:
        while True:
            self.in_get += 1
            try:
                item = await self.q.get()
            except ShutDown:
                return
            finally:
                self.in_get -= 1
            assert item not in self.in_flight, f"{item!r} handed to two workers"
            self.in_flight.add(item)
            self.held[index] = item
            self.starts[item].append(next(self.tick))
            if not self.free_run:
                await self.gates[index].wait()
                self.gates[index].clear()
            self.in_flight.discard(item)
            self.held[index] = None
            self.q.done(item)
            if self.yield_after_done:  # give other (woken) workers a chance first
                await asyncio.sleep(0)


@settings(max_examples=200, deadline=None)
@given(workers=st.integers(1, MAX_WORKERS), ops=OPS, drain=st.booleans(), yield_after_done=st.booleans())
# Pinned: an item re-queued by done() must wake a waiting worker, not wait for the finisher.
@example(
    workers=2,
    ops=[("add", "a"), ("yield", 1), ("add_held", 0), ("release", 0), ("yield", 1)],
    drain=True,
    yield_after_done=True,
)
# Pinned: a getter woken by done() runs one loop step later; until then another may still wait.
@example(
    workers=3,
    ops=[("add", "a"), ("yield", 1), ("add", "a"), ("release", 0), ("yield", 1)],
    drain=False,
    yield_after_done=True,
)
# Pinned: ... and once the loop settles, that woken getter must have run.
@example(
    workers=3,
    ops=[("add", "a"), ("yield", 1), ("add", "a"), ("release", 0), ("yield", 1), ("settle", 0)],
    drain=False,
    yield_after_done=True,
)
def test_concurrent_workers_never_share_an_item_and_lose_nothing(
    workers: int, ops: list[tuple[str, object]], drain: bool, yield_after_done: bool
) -> None:
    async def scenario() -> None:
        q: Queue[str] = Queue("prop")
        h = _Harness(q, workers, yield_after_done=yield_after_done)
        tasks = [asyncio.create_task(h.worker(i)) for i in range(workers)]
        for op, arg in ops:
            if op in ("add", "add_low"):
                assert isinstance(arg, str)
                h.add(arg, LOW if op == "add_low" else NORMAL)
            elif op == "add_held":
                assert isinstance(arg, int)
                held = h.held[arg % workers]
                if held is not None:
                    h.add(held)
            elif op == "release":
                assert isinstance(arg, int)
                h.release(arg % workers)
            elif op == "settle":
                for _ in range(SETTLE_STEPS):
                    await asyncio.sleep(0)
                    _check_no_lost_wakeup(q, h.in_get)
                _check_quiescent(q, h.in_get)
            else:
                assert isinstance(arg, int)
                for _ in range(arg):
                    await asyncio.sleep(0)
                    _check_no_lost_wakeup(q, h.in_get)
            _check_invariants(q)
            _check_no_lost_wakeup(q, h.in_get)
            assert q._processing == h.in_flight

        h.release_all()
        async with asyncio.timeout(5):  # guards against a hang; never needed to synchronise
            if drain:
                await q.shutdown_with_drain()
                assert not q._processing
            else:
                q.shutdown()
            await asyncio.gather(*tasks)

        _check_invariants(q)
        assert not q.queued()
        assert not q._dirty
        assert not q._processing
        assert not h.in_flight
        for item, added_at in h.last_add.items():
            assert h.starts[item], f"{item!r} was never processed"
            assert max(h.starts[item]) > added_at, f"{item!r} not processed after its last add"

    _run(scenario)


DELAY_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("after"), ITEMS, st.integers(-1, 6)),
        st.tuples(st.just("step"), st.just(""), st.integers(0, 4)),
        st.tuples(st.just("take"), st.just(""), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=DELAY_OPS)
def test_add_after_matches_an_earliest_wins_model(ops: list[tuple[str, str, int]]) -> None:
    """No item is added before its earliest ready time nor lost; ready items keep time order."""

    async def scenario() -> None:
        clock = FakeClock()
        q: DelayingQueue[str] = DelayingQueue(clock=clock)
        now = 0.0
        waiting: dict[str, tuple[float, int]] = {}  # item -> (ready_at, seq of the winning call)
        expected: list[str] = []  # the queue's content, in order
        for seq, (op, item, halves) in enumerate(ops):
            amount = halves * 0.5  # multiples of 0.5 keep float arithmetic exact
            if op == "after":
                q.add_after(item, amount)
                if amount <= 0:
                    if item not in expected:
                        expected.append(item)
                elif (now + amount) < waiting.get(item, (math.inf, 0))[0]:
                    waiting[item] = (now + amount, seq)
            elif op == "step":
                clock.step(amount)
                now += amount
                ready = sorted((entry, it) for it, entry in waiting.items() if entry[0] <= now)
                for _, it in ready:
                    del waiting[it]
                    if it not in expected:
                        expected.append(it)
            elif expected:  # take: process the head item to completion
                taken = await q.get()
                q.done(taken)
                assert taken == expected.pop(0)
            assert q.queued() == expected
            assert q._dirty == set(expected)
            assert q.waiting_len() == len(waiting)

    _run(scenario)
