"""bench.scale reads the operator's garbage collection pauses from its /metrics text."""

from __future__ import annotations

import gc

from bench import scale
from prometheus_client import CollectorRegistry, generate_latest

from mlops_platform.runtime.control import heap


def test_pauses_are_read_per_generation_and_the_slow_ones_counted() -> None:
    registry = CollectorRegistry()
    k = heap.HeapKeeper(registry, lambda: 0, lambda: 0)
    before = scale.gc_pauses(generate_latest(registry).decode())
    k._by_generation[2].observe(0.2)  # one slow full collection
    k.install()
    try:
        gc.collect()
    finally:
        k.remove()
    after = scale.gc_pauses(generate_latest(registry).decode())
    d = scale.gc_diff(after, before)
    assert d["2"]["count"] == 2
    assert d["2"]["slow"] >= 1  # the 0.2 s one; the real collection is fast here
    assert d["2"]["seconds"] >= 0.2
    assert d["0"] == {"count": 0, "seconds": 0, "slow": 0}


def test_the_table_shows_them() -> None:
    run = scale.Run("operator", 50, 16, gc_during_changes={"2": {"count": 3, "seconds": 0.4, "slow": 2}})
    assert "| operator | 50 | - / 0 / - | - / 0 / - | 3 / 400 / 2 |" in scale.render([run])
