"""HeapKeeper: every garbage collection timed by generation; the cache frozen out of full walks."""

from __future__ import annotations

import asyncio
import gc
import types
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from mlops_platform.runtime.control import heap
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.testing import fakes, wait


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """gc.freeze is process-wide: leave the test process as it was."""
    yield
    gc.unfreeze()


def test_a_freeze_moves_the_cache_out_of_the_collected_generations(unfrozen: None) -> None:
    cache = [{"metadata": {"name": str(i)}} for i in range(5000)]
    k = heap.HeapKeeper(CollectorRegistry(), lambda: len(cache), lambda: 0)
    before = gc.get_freeze_count()
    k.freeze()
    assert gc.get_freeze_count() >= before + len(cache)


def test_every_collection_is_timed_by_generation_and_the_callback_removed() -> None:
    registry = CollectorRegistry()
    k = heap.HeapKeeper(registry, lambda: 0, lambda: 0)
    k.install()
    k.install()  # once only
    try:
        gc.collect()
        gc.collect(0)
    finally:
        k.remove()
    assert k._on_gc not in gc.callbacks

    def count(generation: str) -> float:
        value = registry.get_sample_value("python_gc_duration_seconds_count", {"generation": generation})
        return value or 0.0

    assert count("2") == 1 and count("0") >= 1
    gc.collect()
    assert count("2") == 1  # removed: no longer timed


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_a_refreeze_is_due_once_the_cache_has_taken_in_half_as_many_objects_as_it_held(
    unfrozen: None,
) -> None:
    cache: dict[str, dict[str, object]] = {str(i): {"metadata": {"name": str(i)}} for i in range(2000)}
    writes = [len(cache)]
    k = heap.HeapKeeper(CollectorRegistry(), lambda: len(cache), lambda: writes[0])
    k.freeze()  # 2000 cached: due after 1000 writes (the minimum, 500, is lower)
    assert not k.refreeze_due()
    for i in range(999):  # watch events replacing cached objects: each new to the collector
        cache[str(i)] = {"metadata": {"name": str(i), "resourceVersion": "2"}}
        writes[0] += 1
    assert not k.refreeze_due()
    cache["new"] = {"metadata": {"name": "new"}}
    writes[0] += 1
    assert k.refreeze_due()
    new = cache["new"]
    assert any(o is new for o in gc.get_objects())  # written after the freeze: collections walk it
    k.refreeze()
    assert not k.refreeze_due()  # counted again from this freeze
    assert not any(o is new for o in gc.get_objects())  # frozen now: out of every generation


def test_a_small_cache_is_not_refrozen_below_the_minimum(unfrozen: None) -> None:
    writes = [0]
    k = heap.HeapKeeper(CollectorRegistry(), lambda: 10, lambda: writes[0])
    k.freeze()
    writes[0] += heap.REFREEZE_MIN_WRITES - 1  # fifty times the cache, but few objects in all
    assert not k.refreeze_due()
    writes[0] += 1
    assert k.refreeze_due()


def test_a_refreeze_reclaims_cycles_that_died_while_frozen(unfrozen: None) -> None:
    node = _Node()
    alive = weakref.ref(node)
    k = heap.HeapKeeper(CollectorRegistry(), lambda: 0, lambda: 0)
    k.freeze()  # the cycle is frozen: no collection would ever free it
    del node
    gc.collect()
    assert alive() is not None
    k.refreeze()  # unfreeze, collect, freeze: freed
    assert alive() is None


async def test_the_manager_refreezes_only_once_every_controller_has_been_quiet_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mgr = rmanager.Manager(
        fakes.FakeClient(),
        rmanager.Options(health_probe_address=None, metrics_address=None, heap_check_period=0.001),
    )
    checks = {"idle": 0, "refreezes": 0}
    busy = True

    def idle_for() -> float:
        checks["idle"] += 1
        return 0.0 if busy else 60.0

    def refreeze() -> None:
        checks["refreezes"] += 1

    mgr.controllers = [types.SimpleNamespace(queue=types.SimpleNamespace(idle_for=idle_for))]  # type: ignore[list-item]
    monkeypatch.setattr(mgr.heap, "refreeze_due", lambda: True)
    monkeypatch.setattr(mgr.heap, "refreeze", refreeze)
    keeper = asyncio.create_task(mgr._keep_heap())
    try:
        await wait.until(lambda: checks["idle"] >= 5, timeout=5, what="five checks while busy")
        assert checks["refreezes"] == 0  # a controller had work lately: no pause over the whole heap
        busy = False
        await wait.until(lambda: checks["refreezes"] >= 1, timeout=5, what="a refreeze once idle")
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
