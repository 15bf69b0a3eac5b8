"""The controller's handlers queue initial lists and resyncs behind real changes (priority queue)."""

from __future__ import annotations

import asyncio
from typing import Any

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.control import builder as rbuilder
from mlops_platform.runtime.control.reconcile import Request, Result
from mlops_platform.runtime.queue import workqueue
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes

CM = resources.CONFIG_MAP


class Noop:
    async def reconcile(self, request: Request) -> Result:
        return Result()


def cm(name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


async def test_initial_list_and_resyncs_go_behind_real_changes() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    informer = fakes.seed(cache, CM, synced=False)
    ctrl = rbuilder.Builder("cms", cache).for_(CM).build(Noop())
    for i in range(3):  # the initial LIST, before the informer has synced
        informer.store.upsert(cm(f"old-{i}"))
        for h in informer.handlers:
            h.on_add(cm(f"old-{i}"))
    informer._synced.set()
    for h in informer.handlers:
        h.on_add(cm("created"))  # a user creates one while the backlog waits
        h.on_update(cm("old-2"), cm("old-2", rv="2"))  # and changes one of the backlog
        resynced = cm("old-0")
        h.on_update(resynced, resynced)  # a resync of a waiting one: stays behind
    assert [r.name for r in ctrl.queue.queued()] == ["created", "old-2", "old-0", "old-1"]


async def test_a_worker_lets_the_watches_in_between_reconciles_of_a_backlog() -> None:
    """Reconciles that decide from the cache never await; a backlog of them must not keep an
    event (a user's change) from being queued, or its priority would not help."""
    order: list[str] = []
    done = asyncio.Event()

    class CpuOnly:
        async def reconcile(self, request: Request) -> Result:
            order.append(request.name)
            if len(order) == 201:
                done.set()
            return Result()

    cache = rcache.Cache(fakes.FakeClient())
    fakes.seed(cache, CM)
    ctrl = rbuilder.Builder("cms", cache).for_(CM).build(CpuOnly())
    for i in range(200):
        ctrl.queue.add(Request("ns", f"old-{i}"), workqueue.LOW)
    ctrl.start()

    async def user_change() -> None:
        ctrl.queue.add(Request("ns", "changed"))

    change = asyncio.create_task(user_change())  # runs as soon as the worker yields
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await ctrl.stop()
    await change
    assert order.index("changed") < 5, order[:10]


def owned_cm(name: str, owner: str, rv: str = "1") -> dict[str, Any]:
    obj = cm(name, rv)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": f"uid-{owner}", "controller": True}
    ]
    return obj


async def test_a_high_priority_primary_goes_before_the_children_events() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    primaries = fakes.seed(cache, CM)
    children = fakes.seed(cache, resources.SECRET)
    ctrl = (
        rbuilder.Builder("cms", cache).for_(CM, priority=workqueue.HIGH).owns(resources.SECRET).build(Noop())
    )
    for h in children.handlers:  # status changes of children of a and b
        h.on_update(owned_cm("a-child", "a"), owned_cm("a-child", "a", rv="2"))
        h.on_update(owned_cm("b-child", "b"), owned_cm("b-child", "b", rv="2"))
    for h in primaries.handlers:
        h.on_add(cm("new"))  # a new object: first, though it came last
        h.on_update(cm("b"), cm("b", rv="2"))  # a change of b moves b up (its child event was first)
        resynced = cm("c")
        h.on_update(resynced, resynced)  # a resync stays LOW, whatever the watch's priority
    assert [r.name for r in ctrl.queue.queued()] == ["new", "b", "a", "c"]
