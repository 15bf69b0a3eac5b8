"""``wait.Waiters``: the broadcast the work queue's drain and the controller's in-flight requests
wait on. Synchronisation by scheduler yields only (``asyncio.sleep(0)``), never by time."""

from __future__ import annotations

import asyncio

from mlops_platform.runtime import wait


async def _yield_to_tasks(times: int = 3) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_wake_all_wakes_every_waiter_and_later_waits_wait_for_the_next() -> None:
    waiters = wait.Waiters()
    first = [asyncio.create_task(waiters.wait()) for _ in range(3)]
    await _yield_to_tasks()
    waiters.wake_all()
    await asyncio.gather(*first)
    later = asyncio.create_task(waiters.wait())
    await _yield_to_tasks()
    assert not later.done()
    waiters.wake_all()
    await later


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    waiters = wait.Waiters()
    task = asyncio.create_task(waiters.wait())
    await _yield_to_tasks()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert not waiters._futures
    waiters.wake_all()  # nothing to wake: no error
