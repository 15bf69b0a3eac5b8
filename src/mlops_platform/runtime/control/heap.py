"""The garbage collector measured, and kept off the cache: ``gc.freeze`` after the first sync.

CPython's full (generation 2) collection walks every container object not frozen: in an operator
that is mostly the informer cache (one full collection over 5,000 InferenceServices' objects took
0.3 s), a pause any reconcile or watch event lands in. ``gc.freeze()`` moves every object alive
into a permanent generation that collections skip. Frozen objects are still freed by their
reference counts when the cache replaces them (decoded JSON has no cycles); only cycles among the
objects alive at a freeze wait for the next refreeze to be collected (below).

:class:`HeapKeeper` times every collection: ``python_gc_duration_seconds{generation}`` (a
histogram; Go's ``go_gc_duration_seconds`` is the Go runtime's pause summary), so a latency tail can
be checked against the collector.

A freeze after the first sync keeps out only what was cached then: an operator started on an
empty cluster whose InferenceServices come later, or whose cache is replaced object by object as
watch events arrive, has all of its cache unfrozen again, and a full collection walks it (152 and
277 ms at N=1000, during a benchmark's idle spec changes). :meth:`HeapKeeper.refreeze_due` says
when the cache has taken in more objects since the last freeze than :data:`REFREEZE_MIN_WRITES`
and half the objects it held then (each object written into the cache is new to the collector;
counting them costs nothing, where counting generation 2 walks it: about 30 ms of CPU every
check at N=1000); :meth:`HeapKeeper.refreeze` then unfreezes, collects everything (cycles among objects
frozen earlier that died meanwhile are reclaimed: nothing leaks across refreezes) and freezes the
survivors. The manager does that only once its controllers have been quiet for a while, so the
one long pause meets no work; with the geometric threshold it happens a logarithmic number of times
as the cache grows.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

log = logging.getLogger("mlops_platform.runtime.heap")

#: fewer objects written into the cache since the last freeze never warrant a refreeze (a decoded
#: object is tens of containers for the collector: 500 are some 25,000)
REFREEZE_MIN_WRITES = 500
#: refreeze once the objects written since the last freeze reach this share of those cached then
REFREEZE_GROWTH = 0.5

GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class HeapKeeper:
    """``objects()``: the cache's object count; ``writes()``: the objects written into the cache so
    far (both read at a freeze and by :meth:`refreeze_due`)."""

    def __init__(
        self, registry: CollectorRegistry, objects: Callable[[], int], writes: Callable[[], int]
    ) -> None:
        self._objects = objects
        self._writes = writes
        self._frozen_at = (0, 0)  # (cached objects, cache writes) at the last freeze
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
        self._freeze("heap frozen")

    def _freeze(self, msg: str) -> None:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        cached, writes = self._objects(), self._writes()
        log.info(
            msg,
            extra={
                "objects": gc.get_freeze_count(),
                "cached": cached,
                "cache_writes_since": writes - self._frozen_at[1],
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        self._frozen_at = (cached, writes)

    def refreeze_due(self) -> bool:
        """Whether the cache has taken in more objects since the last freeze than
        :data:`REFREEZE_MIN_WRITES` and :data:`REFREEZE_GROWTH` of those it held then (reads two
        counters: cheap enough for a check every few seconds)."""
        cached, writes = self._frozen_at
        return self._writes() - writes >= max(REFREEZE_MIN_WRITES, REFREEZE_GROWTH * cached)

    def refreeze(self) -> None:
        """Unfreeze, collect everything, freeze the survivors (one pause over the whole heap: call
        it when idle)."""
        gc.unfreeze()
        self._freeze("heap frozen again")
