"""The garbage collector measured, and kept off the cache: ``gc.freeze`` after the first sync.

CPython's full (generation 2) collection walks every container object not frozen: in an operator
that is mostly the informer cache (one full collection over 5,000 InferenceServices' objects took
0.3 s), a pause any reconcile or watch event lands in. ``gc.freeze()`` moves every object alive
into a permanent generation that collections skip. Frozen objects are still freed by their
reference counts when the cache replaces them (decoded JSON has no cycles); only cycles among the
objects alive at the freeze are never collected (a one-off, bounded amount).

:class:`HeapKeeper` times every collection: ``python_gc_duration_seconds{generation}`` (a
histogram; Go's ``go_gc_duration_seconds`` is the Go runtime's pause summary), so a latency tail can
be checked against the collector.
Freezing again as the cache grows was tried and measured: during 100 idle spec changes at N=1000
and N=5000 (started on an empty cluster, so the cache was not frozen) no full collection ran at
all, so it bought nothing there (docs/measurements.md).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

log = logging.getLogger("mlops_platform.runtime.heap")

GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class HeapKeeper:
    """``objects()``: the cache's object count (logged with a freeze)."""

    def __init__(self, registry: CollectorRegistry, objects: Callable[[], int]) -> None:
        self._objects = objects
        durations = Histogram(
            "python_gc_duration_seconds",
            "Pause of each garbage collection, by generation",
            ["generation"],
            buckets=GC_BUCKETS,
            registry=registry,
        )
        self._by_generation = [durations.labels(str(g)) for g in range(3)]
        self._started = 0.0
        self._installed = False

    # -- measuring every collection -----------------------------------------------------------------

    def install(self) -> None:
        """Start timing collections (``gc.callbacks`` is process-wide: :meth:`remove` when done)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def remove(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._by_generation[info["generation"]].observe(time.perf_counter() - self._started)

    # -- freezing -----------------------------------------------------------------------------------

    def freeze(self) -> None:
        """Collect once, then freeze every survivor; logged with the objects frozen and the time."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        log.info(
            "heap frozen",
            extra={
                "objects": gc.get_freeze_count(),
                "cached": self._objects(),
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
