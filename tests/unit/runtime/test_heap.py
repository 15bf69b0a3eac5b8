"""HeapKeeper: every garbage collection timed by generation; the cache frozen out of full walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from mlops_platform.runtime.control import heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """gc.freeze is process-wide: leave the test process as it was."""
    yield
    gc.unfreeze()


def test_a_freeze_moves_the_cache_out_of_the_collected_generations(unfrozen: None) -> None:
    cache = [{"metadata": {"name": str(i)}} for i in range(5000)]
    k = heap.HeapKeeper(CollectorRegistry(), lambda: len(cache))
    before = gc.get_freeze_count()
    k.freeze()
    assert gc.get_freeze_count() >= before + len(cache)


def test_every_collection_is_timed_by_generation_and_the_callback_removed() -> None:
    registry = CollectorRegistry()
    k = heap.HeapKeeper(registry, lambda: 0)
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
