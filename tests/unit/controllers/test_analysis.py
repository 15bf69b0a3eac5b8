"""The canary analysis' state machine (``analysis.decide``): one case per row of its decision table
(and a check that every row has one), resuming from status, and hypothesis properties over walks of
random inputs: it never promotes without every step judged passed on enough requests, a replay of
the same input decides the same, deciding again from its own status judges nothing twice and
settles without another write, missing data never moves it, a manual action always wins."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlops_platform.api import analysis_status, internal
from mlops_platform.api.analysis_status import AnalysisStatus, Hold
from mlops_platform.controllers.inferenceservice import analysis
from mlops_platform.controllers.inferenceservice import analysis_checks as checks

T0 = datetime.datetime(2026, 12, 24, 12, 0, 0, tzinfo=datetime.UTC)
A = internal.Analysis(
    steps=(
        internal.AnalysisStep(10, "1m", 60),
        internal.AnalysisStep(25, "2m", 120),
        internal.AnalysisStep(50, "1m", 60),
    ),
    min_requests=20,
    failure_limit=2,
    error_ratio=internal.ErrorRatioCheck(max=0.05),
    spec_hash="h1",
)
M = analysis.Manual


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def ts(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(
    phase: analysis_status.Phase = "Progressing", step: int = 0, start: float | None = None, **kw: Any
) -> AnalysisStatus:
    """A status at ``step`` whose interval began ``start`` seconds after T0 (None: not begun)."""
    weight = A.steps[step].weight if phase in ("Progressing", "Paused", "Promoting") else 0
    return AnalysisStatus(phase=phase, spec_hash=kw.pop("spec_hash", "h1"), step_index=step, weight=weight,
                          step_start_time=None if start is None else ts(start), **kw)  # fmt: skip


def good(rate: float = 1.0) -> checks.Sample:
    return checks.Sample(
        {(checks.REQUESTS, checks.CANDIDATE): (rate,), (checks.ERROR_RATIO, checks.CANDIDATE): (0.0,)}
    )


BAD = checks.Sample(
    {(checks.REQUESTS, checks.CANDIDATE): (1.0,), (checks.ERROR_RATIO, checks.CANDIDATE): (0.2,)}
)
NO_RATIO = checks.Sample({(checks.REQUESTS, checks.CANDIDATE): (1.0,)})
INVALID = checks.Sample({}, invalid={"x": "bad_data"})
DOWN = checks.Unreachable("Prometheus monitoring/prometheus-operated:9090: no answer within 5s")


def inputs(s: AnalysisStatus | None, now: float = 0, **kw: Any) -> analysis.Inputs:
    a = kw.pop("analysis", A)
    if kw.pop("paused", False):
        a = dataclasses.replace(a, paused=True)
    return analysis.Inputs(analysis=a, status=s, now=at(now), settled=kw.pop("settled", True), **kw)


#: (row, inputs, the phase it goes to, the step, the weight, the reason of the transition or None)
CASES: list[tuple[str, analysis.Inputs, str, int, int, str | None]] = [
    ("manual-rollback", inputs(status(step=1, start=0), manual=M.ROLLBACK), "RollingBack", 1, 0,
     "ManualRollback"),
    ("manual-promote", inputs(status(step=1), manual=M.PROMOTE), "Promoting", 1, 25, "ManualPromote"),
    ("start-paused", inputs(None, paused=True), "Paused", 0, 10, "Started"),
    ("start", inputs(None), "Progressing", 0, 10, "Started"),
    ("restart-paused", inputs(status(step=2, spec_hash="h0"), paused=True), "Paused", 0, 10, "SpecChanged"),
    ("restart", inputs(status("Promoted", step=2, spec_hash="h0")), "Progressing", 0, 10, "SpecChanged"),
    ("finished", inputs(status("RolledBack", step=1)), "RolledBack", 1, 0, None),
    ("promoted", inputs(status("Promoting", step=2)), "Promoted", 2, 0, "Promoted"),
    ("promoting", inputs(status("Promoting", step=2), settled=False), "Promoting", 2, 50, None),
    ("rolled-back", inputs(status("RollingBack", step=1)), "RolledBack", 1, 0, "RolledBack"),
    ("rolling-back", inputs(status("RollingBack", step=1), settled=False), "RollingBack", 1, 0, None),
    ("pause", inputs(status(step=1, start=0), 30, paused=True), "Paused", 1, 25, "Paused"),
    ("paused", inputs(status("Paused", step=1), paused=True), "Paused", 1, 25, None),
    ("resume", inputs(status("Paused", step=1)), "Progressing", 1, 25, "Resumed"),
    ("wait-route", inputs(status(step=1), settled=False), "Progressing", 1, 25, None),
    ("start-interval", inputs(status(step=1), 5), "Progressing", 1, 25, None),
    ("wait-interval", inputs(status(step=1, start=0), 100), "Progressing", 1, 25, None),
    ("measure", inputs(status(step=1, start=0), 120), "Progressing", 1, 25, None),
    ("hold-unreachable", inputs(status(start=0), 60, measurement=DOWN), "Progressing", 0, 10, None),
    ("invalid", inputs(status(start=0), 60, measurement=INVALID), "Failed", 0, 0, "ChecksInvalid"),
    ("hold-requests", inputs(status(start=0), 60, measurement=good(0.1)), "Progressing", 0, 10, None),
    ("roll-back", inputs(status(failed_checks=1, start=0), 60, measurement=BAD), "RollingBack", 0, 0,
     "ChecksFailed"),
    ("check-failed", inputs(status(start=0), 60, measurement=BAD), "Progressing", 0, 10, "CheckFailed"),
    ("hold-no-data", inputs(status(start=0), 60, measurement=NO_RATIO), "Progressing", 0, 10, None),
    ("promote", inputs(status(step=2, start=0), 60, measurement=good()), "Promoting", 2, 50,
     "AllStepsPassed"),
    ("next-step", inputs(status(start=0), 60, measurement=good()), "Progressing", 1, 25, "StepPassed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("inp", "phase", "step", "weight", "reason"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_each_row_of_the_decision_table(
    request: pytest.FixtureRequest,
    inp: analysis.Inputs,
    phase: str,
    step: int,
    weight: int,
    reason: str | None,
) -> None:
    d = analysis.decide(inp)
    assert d.row == request.node.callspec.id
    assert (d.status.phase, d.status.step_index, d.weight) == (phase, step, weight)
    assert d.weight == d.status.weight
    assert (d.transition.reason if d.transition else None) == reason
    if d.transition is not None:
        assert d.status.history[-1] == d.transition and d.changed
        assert (d.transition.phase, d.transition.step_index, d.transition.weight) == (phase, step, weight)


def test_every_row_has_a_case() -> None:
    assert [c[0] for c in CASES] == [r.name for r in analysis.TABLE]


def test_a_step_is_judged_once_its_interval_is_over_with_the_values_that_decided() -> None:
    s = status(start=0)
    assert analysis.decide(inputs(s, 59)).row == "wait-interval"
    assert analysis.decide(inputs(s, 59)).requeue_after == 1.0
    d = analysis.decide(inputs(s, 60))
    assert (d.measure, d.changed, d.status) == (True, False, s)
    d = analysis.decide(inputs(s, 61, measurement=good()))
    assert d.status.step_start_time is None and d.status.measurements[0].candidate == 60.0
    assert d.transition is not None and "requests 60; errorRatio 0 <= 0.05: passed" in d.transition.message


def test_a_failed_check_restarts_the_interval_and_counts_once() -> None:
    d = analysis.decide(inputs(status(start=0), 75, measurement=BAD))
    assert (d.status.failed_checks, d.status.step_start_time) == (1, ts(75))
    assert d.transition is not None and analysis.event_type(d.transition) == "Warning"
    assert "errorRatio 0.2 <= 0.05, " not in d.transition.message  # no stable: no stable value said
    assert "errorRatio 0.2 <= 0.05: failed" in d.transition.message
    again = analysis.decide(dataclasses.replace(inputs(d.status, 75, measurement=BAD)))
    assert (again.row, again.changed, again.status.failed_checks) == ("wait-interval", False, 1)
    later = analysis.decide(inputs(d.status, 75 + 60, measurement=BAD))
    assert (later.row, later.status.phase, later.status.failed_checks) == ("roll-back", "RollingBack", 2)


def test_an_operator_restarted_mid_step_resumes_the_same_interval() -> None:
    """The status the last operator wrote is all the new one knows: same step, same interval end."""
    s = status(step=1, start=0, failed_checks=1)
    d = analysis.decide(inputs(s, 90))
    assert (d.row, d.changed, d.requeue_after) == ("wait-interval", False, 30.0)


def test_a_hold_says_why_and_holding_again_for_the_same_reason_writes_nothing() -> None:
    d = analysis.decide(inputs(status(start=0), 60, measurement=DOWN))
    assert d.status.hold == Hold("PrometheusUnreachable", f"step 1 of 3 holds: {DOWN.message}", ts(60))
    assert d.changed and d.transition is None and d.requeue_after == 30.0
    assert d.message == d.status.hold.message
    again = analysis.decide(inputs(d.status, 95, measurement=DOWN))
    assert not again.changed and again.status.hold == d.status.hold
    few = analysis.decide(inputs(d.status, 125, measurement=good(0.2)))
    assert few.changed and few.status.hold is not None and few.status.hold.reason == "NotEnoughRequests"
    assert few.status.hold.since == ts(125)
    assert "fewer than minRequests (20) requests to the candidate in the last 1m" in few.status.hold.message
    passed = analysis.decide(inputs(few.status, 130, measurement=good()))
    assert passed.status.hold is None and passed.row == "next-step"


def test_pausing_keeps_the_weight_and_resuming_starts_the_step_again() -> None:
    d = analysis.decide(inputs(status(step=1, start=0), 100, paused=True))
    assert d.status.step_start_time is None and d.weight == 25
    assert analysis.decide(inputs(d.status, 500, paused=True, measurement=BAD)).changed is False
    resumed = analysis.decide(inputs(d.status, 600))
    assert resumed.row == "resume" and resumed.status.step_start_time is None
    started = analysis.decide(inputs(resumed.status, 601))
    assert started.row == "start-interval" and started.status.step_start_time == ts(601)


def test_a_spec_change_restarts_at_the_first_step_and_forgets_the_failures() -> None:
    s = status(step=2, failed_checks=1, start=0)
    d = analysis.decide(inputs(s, 10, analysis=dataclasses.replace(A, spec_hash="h2")))
    assert (d.status.step_index, d.status.failed_checks, d.status.spec_hash, d.weight) == (0, 0, "h2", 10)
    assert d.transition is not None and d.transition.from_ == "Progressing"


def test_the_history_keeps_the_last_transitions() -> None:
    s: AnalysisStatus | None = None
    for i in range(3 * analysis_status.HISTORY_LIMIT):
        s = analysis.decide(inputs(s, i, paused=i % 2 == 1)).status
    assert s is not None and len(s.history) == analysis_status.HISTORY_LIMIT
    assert [t.reason for t in s.history[-2:]] == ["Paused", "Resumed"]


# -- properties over walks of random inputs ---------------------------------------------------------


@st.composite
def measurements(draw: st.DrawFn) -> checks.Sample | checks.Unreachable:
    """Mostly values (mostly good ones: walks must reach promotions), sometimes no answer or errors."""
    kind = draw(st.sampled_from(["values"] * 17 + ["unreachable", "failed", "invalid"]))
    if kind == "unreachable":
        return DOWN
    if kind == "failed":
        return checks.Sample({}, failed={checks.ERROR_RATIO: "execution"})
    if kind == "invalid" and draw(st.booleans()):
        return INVALID
    values: dict[tuple[str, str], tuple[float, ...]] = {}
    if draw(st.integers(0, 5)):
        values[(checks.REQUESTS, checks.CANDIDATE)] = (
            draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.0, 20.0])),
        )
    if draw(st.integers(0, 5)):
        ratios = [0.0, 0.0, 0.0, 0.01, 0.05, 0.06, 1.0]
        values[(checks.ERROR_RATIO, checks.CANDIDATE)] = (draw(st.sampled_from(ratios)),)
    return checks.Sample(values)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "advance": draw(st.sampled_from([0, 1, 5, 30, 59, 60, 61, 120, 600])),
        "settled": draw(st.integers(0, 3)) > 0,
        "measurement": draw(measurements()),
        "paused": draw(st.integers(0, 19)) == 0,
        "manual": draw(st.sampled_from([None] * 60 + [M.PROMOTE, M.ROLLBACK])),
        "hash": draw(st.sampled_from(["h1"] * 40 + ["h2"])),
    }


ANALYSES = st.sampled_from([A, dataclasses.replace(A, failure_limit=1, min_requests=0),
                            dataclasses.replace(A, steps=A.steps[:1], failure_limit=3)])  # fmt: skip
PROPERTIES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JUDGED = {"StepPassed", "AllStepsPassed", "CheckFailed", "ChecksFailed", "ChecksInvalid"}


def walk(a: internal.Analysis, evs: list[dict[str, Any]]) -> list[tuple[analysis.Inputs, analysis.Decision]]:
    """The operator's loop: decide; when asked, measure and decide again; write what changed."""
    out = []
    s: AnalysisStatus | None = None
    now = 0.0
    for e in evs:
        now += e["advance"]
        spec = dataclasses.replace(a, paused=e["paused"], spec_hash=e["hash"])
        inp = analysis.Inputs(spec, s, at(now), e["settled"], None, e["manual"])
        d = analysis.decide(inp)
        if d.measure:
            inp = dataclasses.replace(inp, measurement=e["measurement"])
            d = analysis.decide(inp)
        out.append((inp, d))
        s = d.status
    return out


@PROPERTIES
@given(ANALYSES, st.lists(events(), min_size=10, max_size=60))
def test_it_never_promotes_without_every_step_passed_on_enough_requests(
    a: internal.Analysis, evs: list[dict[str, Any]]
) -> None:
    passed: set[int] = set()
    for inp, d in walk(a, evs):
        t = d.transition
        if t is None:
            continue
        if t.reason in ("Started", "SpecChanged"):
            passed = set()
        if t.reason in ("StepPassed", "AllStepsPassed"):
            judged = inp.status.step_index if inp.status is not None else -1
            assert judged not in passed  # each step passes once, in order
            assert judged == len(passed)
            passed.add(judged)
            counted = [m for m in d.status.measurements if m.check == checks.REQUESTS]
            if a.min_requests:  # counted, and enough
                assert [(m.candidate or 0) >= a.min_requests for m in counted] == [True]
            else:  # nothing counted, and no "requests 0" said
                assert counted == [] and "requests" not in t.message
            assert all(m.passed for m in d.status.measurements if m.check != checks.REQUESTS)
        if t.reason == "AllStepsPassed":
            assert passed == set(range(len(a.steps)))
        if t.phase == "Promoting":
            assert t.reason in ("AllStepsPassed", "ManualPromote")


@PROPERTIES
@given(ANALYSES, st.lists(events(), min_size=1, max_size=40))
def test_the_same_input_decides_the_same_and_deciding_again_judges_nothing_twice(
    a: internal.Analysis, evs: list[dict[str, Any]]
) -> None:
    for inp, d in walk(a, evs):
        assert analysis.decide(inp) == d  # a replay
        # deciding again from the status it returned, same time, same everything: within a few
        # rounds nothing changes any more, and nothing was judged (counted) a second time
        s, judged = d.status, 0
        for _ in range(4):
            again = analysis.decide(dataclasses.replace(inp, status=s))
            judged += again.transition is not None and again.transition.reason in JUDGED
            assert again.status.failed_checks in (s.failed_checks,) or again.row == "restart"
            if not again.changed:
                break
            s = again.status
        else:
            raise AssertionError(f"no fixed point from {d.row}")
        assert judged == 0


@PROPERTIES
@given(ANALYSES, st.lists(events(), min_size=1, max_size=40))
def test_the_invariants_of_every_decision(a: internal.Analysis, evs: list[dict[str, Any]]) -> None:
    for inp, d in walk(a, evs):
        s, before = d.status, inp.status
        weights = {"Progressing": a.steps[s.step_index].weight, "Paused": a.steps[s.step_index].weight}
        if s.phase in weights:
            assert d.weight == weights[s.phase]
        elif s.phase != "Promoting":
            assert d.weight == 0
        assert s.failed_checks <= a.failure_limit
        if inp.manual is analysis.Manual.PROMOTE:
            assert s.phase in ("Promoting", "Promoted")
        if inp.manual is analysis.Manual.ROLLBACK:
            assert s.phase in ("RollingBack", "RolledBack")
        held = isinstance(inp.measurement, checks.Unreachable) or d.row.startswith("hold-")
        if held and before is not None:  # no data: nothing moves, nothing is counted
            assert (s.phase, s.step_index, s.failed_checks, s.step_start_time) == (
                before.phase, before.step_index, before.failed_checks, before.step_start_time)  # fmt: skip
        if not d.changed:
            assert d.transition is None and s == before
