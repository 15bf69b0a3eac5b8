"""Measuring a canary analysis' step off the reconcile workers (issue 42).

A reconcile never waits for Prometheus: at the end of a step's interval it asks :meth:`Measurer.take`
for the measurement of that interval (``ident``: the InferenceService, the spec hash, the step and
when its interval began). The first ask starts one task (:func:`~.analysis_queries.measure`: the
step's queries at once, each within the query client's deadline and bounded retries) and answers
None; the reconcile requeues, and the task's end enqueues the InferenceService (``wake``) so the
next reconcile decides with its result. A result is kept for ``reuse_seconds`` (a step that holds is
decided again from it, not measured again at every reconcile; at most half the step's interval, as
the state machine's hold retry), then measured afresh.

Contract:

- at most one measurement in flight per InferenceService (a new interval's ask cancels an older one);
- a task that failed unexpectedly or was cancelled counts as Prometheus unreachable (the step holds);
- no Prometheus configured (``client`` None): every measurement is unreachable, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from mlops_platform import promapi
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import analysis_checks as checks
from mlops_platform.controllers.inferenceservice import analysis_queries
from mlops_platform.runtime import rbac

RBAC = (
    rbac.requires(
        "",
        "services/proxy",
        ["get"],
        why="the canary analysis asks Prometheus through the API server's service proxy (--prometheus: "
        "the default Service's name; a namespaced install that does not watch Prometheus' namespace "
        "grants it there, promapi.read_rule, or uses --prometheus-url)",
        resource_names=[promapi.read_rule()["resourceNames"][0]],
    ),
)
log = logging.getLogger("mlops_platform.controllers.inferenceservice")
Key = tuple[str, str]
#: (the InferenceService, spec hash, step index, the interval's start)
Ident = tuple[Key, str, int, str]
Result = checks.Sample | checks.Unreachable


class Measurer:
    def __init__(
        self,
        client: analysis_queries.Querier | None,
        *,
        wake: Callable[[Key], None] | None = None,
        fallback_seconds: float = 15.0,
        reuse_seconds: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        #: enqueue an InferenceService (the controller sets it); None: the fallback requeue only
        self.wake = wake
        #: when a reconcile whose measurement is in flight looks again if ``wake`` never comes
        self.fallback_seconds = fallback_seconds
        self.reuse_seconds = reuse_seconds
        self._monotonic = monotonic
        self._tasks: dict[Key, tuple[Ident, asyncio.Task[Result]]] = {}
        self._results: dict[Key, tuple[Ident, float, Result]] = {}

    def take(
        self, ident: Ident, spec: internal.Analysis, step: internal.AnalysisStep, dialect: str
    ) -> Result | None:
        """The measurement of ``ident``'s interval, or None while it is in flight (started now)."""
        key = ident[0]
        kept = self._results.get(key)
        reuse = min(self.reuse_seconds, step.seconds / 2)  # as often as a held step retries
        if kept is not None and kept[0] == ident and self._monotonic() - kept[1] < reuse:
            return kept[2]
        if self.client is None:
            return checks.Unreachable("no Prometheus is configured for the canary analysis")
        running = self._tasks.get(key)
        if running is not None and running[0] == ident:
            if not running[1].done():
                return None
            del self._tasks[key]
            result = _outcome(running[1])
            self._results[key] = (ident, self._monotonic(), result)
            return result
        if running is not None:
            running[1].cancel()
        namespace, name = key
        task = asyncio.get_running_loop().create_task(
            analysis_queries.measure(self.client, spec, step, namespace=namespace, name=name, dialect=dialect)
        )
        task.add_done_callback(lambda _: self.wake(key) if self.wake is not None else None)
        self._tasks[key] = (ident, task)
        return None

    def forget(self, key: Key) -> None:
        """The InferenceService is gone: its measurement too."""
        running = self._tasks.pop(key, None)
        if running is not None:
            running[1].cancel()
        self._results.pop(key, None)

    async def drain(self) -> None:
        """Wait for every measurement in flight (tests; shutdown after :meth:`close`)."""
        await asyncio.gather(*(t for _, t in self._tasks.values()), return_exceptions=True)

    def close(self) -> None:
        for _, task in self._tasks.values():
            task.cancel()


def _outcome(task: asyncio.Task[Result]) -> Result:
    if task.cancelled():
        return checks.Unreachable("the measurement was cancelled")
    error = task.exception()
    if error is not None:
        log.warning("canary analysis measurement failed", exc_info=error)
        return checks.Unreachable(f"the measurement failed: {type(error).__name__}: {error}")
    return task.result()
