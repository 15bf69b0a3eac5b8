"""The measurer of the canary analysis (:mod:`~mlops_platform.controllers.inferenceservice.analysis_measure`):
one task per InferenceService off the workers, its end enqueues it, a result reused for a while, a
new interval cancels an older measurement, a task that fails or is cancelled is Prometheus
unreachable."""

from __future__ import annotations

import asyncio

from mlops_platform import promapi
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import analysis_checks as checks
from mlops_platform.controllers.inferenceservice import analysis_measure

KEY = ("ml", "bert")
STEP = internal.AnalysisStep(10, "1m", 60)
SPEC = internal.Analysis(
    steps=(STEP,), min_requests=0, queries=(internal.QueryCheck("q", "up", "LessThan", 1),)
)


class Prom:
    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.asked = 0
        self.error: BaseException | None = None

    async def query(self, promql: str) -> list[promapi.Sample]:
        self.asked += 1
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return [promapi.Sample({}, 0.5)]


def ident(start: str = "t0") -> analysis_measure.Ident:
    return (KEY, "hash", 0, start)


async def test_one_task_per_interval_its_end_wakes_the_service_and_its_result_is_reused() -> None:
    prom, woken, now = Prom(), [], [0.0]
    m = analysis_measure.Measurer(prom, wake=woken.append, monotonic=lambda: now[0])
    assert m.take(ident(), SPEC, STEP, "triton") is None
    assert m.take(ident(), SPEC, STEP, "triton") is None  # in flight: not started twice
    prom.gate.set()
    await m.drain()
    assert woken == [KEY] and prom.asked == 1
    first = m.take(ident(), SPEC, STEP, "triton")
    assert isinstance(first, checks.Sample) and first.values[("q", checks.QUERY)] == (0.5,)
    now[0] = 29.0
    assert m.take(ident(), SPEC, STEP, "triton") is first and prom.asked == 1  # reused
    now[0] = 30.0  # half the step's interval: measured afresh
    assert m.take(ident(), SPEC, STEP, "triton") is None


async def test_a_new_interval_cancels_the_older_measurement() -> None:
    prom = Prom()
    m = analysis_measure.Measurer(prom)
    assert m.take(ident("t0"), SPEC, STEP, "triton") is None
    [(_, older)] = m._tasks.values()
    assert m.take(ident("t1"), SPEC, STEP, "triton") is None
    await asyncio.sleep(0)
    assert older.cancelled()
    m.close()
    await m.drain()


async def test_an_unexpected_failure_is_unreachable_and_no_client_says_so() -> None:
    prom = Prom()
    prom.error = RuntimeError("boom")
    prom.gate.set()
    m = analysis_measure.Measurer(prom)
    assert m.take(ident(), SPEC, STEP, "triton") is None
    await m.drain()
    got = m.take(ident(), SPEC, STEP, "triton")
    assert isinstance(got, checks.Unreachable) and "RuntimeError: boom" in got.message
    none = analysis_measure.Measurer(None).take(ident(), SPEC, STEP, "triton")
    assert isinstance(none, checks.Unreachable) and "no Prometheus is configured" in none.message
