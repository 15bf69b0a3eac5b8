"""What the analysis' checks say of a step's window (``analysis_checks.judge``), and the analysis
status types: their schema, their round trip and their size."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from mlops_platform.api import analysis_status, crd, internal
from mlops_platform.api.analysis_status import Measurement
from mlops_platform.controllers.inferenceservice import analysis_checks as checks

Out = checks.Outcome
STEP = internal.AnalysisStep(25, "1m", 60)


def analysis(**kw: Any) -> internal.Analysis:
    return internal.Analysis(steps=(STEP,), spec_hash="h", **kw)


def sample(rate: float | None = 1.0, **values: Any) -> checks.Sample:
    """``rate`` requests per second to the candidate; ``errorRatio=(candidate, stable)`` and so on."""
    out: dict[tuple[str, str], tuple[float, ...]] = {}
    if rate is not None:
        out[(checks.REQUESTS, checks.CANDIDATE)] = (rate,)
    for check, (candidate, stable) in values.items():
        for side, v in ((checks.CANDIDATE, candidate), (checks.STABLE, stable)):
            if v is not None:
                out[(check, side)] = v if isinstance(v, tuple) else (v,)
    return checks.Sample(out)


ERR = internal.ErrorRatioCheck(max=0.05, max_above_stable=0.01)
LAT = internal.LatencyCheck(0.99, max_seconds=1.0, max_times_stable=1.5)

E, L = analysis(error_ratio=ERR), analysis(latency=LAT)
Q = analysis(min_requests=0, queries=(internal.QueryCheck("x", "q", "LessThan", 1),))

CASES: list[tuple[str, internal.Analysis, checks.Sample, Out, str]] = [
    ("enough-requests", E, sample(0.5, errorRatio=(0.0, 0.0)), Out.PASSED, "requests 30"),
    ("too-few", E, sample(0.3, errorRatio=(0.0, 0.0)), Out.NOT_ENOUGH_REQUESTS, "than minRequests (20)"),
    ("no-request-series", E, sample(None), Out.NOT_ENOUGH_REQUESTS, "(0)"),
    ("no-minimum", analysis(min_requests=0, error_ratio=ERR), sample(None, errorRatio=(0.0, None)),
     Out.PASSED, ""),
    ("error-above-stable", E, sample(errorRatio=(0.03, 0.01)), Out.FAILED,
     "errorRatio 0.03 <= 0.02, stable 0.01: failed"),
    ("error-above-max", E, sample(errorRatio=(0.06, 0.2)), Out.FAILED, "<= 0.05"),
    ("stable-without-ratio-is-0", E, sample(errorRatio=(0.011, None)), Out.FAILED, "<= 0.01, stable 0"),
    ("stable-nan-is-0", E, sample(errorRatio=(0.009, float("nan"))), Out.PASSED, ""),
    ("candidate-without-ratio", E, sample(errorRatio=(None, 0.0)), Out.NO_DATA, "errorRatio: no data"),
    ("latency-slowest-value", L, sample(latency=((0.2, 0.9), (0.5,))), Out.FAILED, "latency 0.9 <= 0.75"),
    ("latency-within", L, sample(latency=((0.2, 0.7), (0.5,))), Out.PASSED, ""),
    ("latency-no-baseline", L, sample(latency=(0.2, None)), Out.NO_DATA, "latency: no data"),
    ("latency-absolute-without-baseline", L, sample(latency=(1.5, None)), Out.FAILED, "latency 1.5 <= 1"),
    ("a-failure-is-not-held-back", analysis(error_ratio=ERR, latency=LAT),
     sample(errorRatio=(0.5, 0.0), latency=(None, None)), Out.FAILED, "errorRatio"),
    ("invalid-first", E, checks.Sample({}, invalid={"x": "bad_data: parse error"}), Out.INVALID,
     "check x cannot be evaluated"),
    ("query-failed-now", Q, checks.Sample({}, failed={"x": "execution: too many samples"}), Out.NO_DATA,
     "x: execution"),
]  # fmt: skip


@pytest.mark.parametrize(("a", "s", "outcome", "words"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_the_verdict(a: internal.Analysis, s: checks.Sample, outcome: Out, words: str) -> None:
    v = checks.judge(a, STEP, s)
    assert v.outcome is outcome, v
    assert words in v.message, v.message


@pytest.mark.parametrize(
    ("comparison", "value", "passed"),
    [("LessThan", 2, False), ("LessThanOrEqual", 2, True), ("GreaterThan", 2, False),
     ("GreaterThanOrEqual", 2, True), ("LessThan", 1.5, True), ("GreaterThan", 3, True)],
)  # fmt: skip
def test_custom_queries_compare_their_value_with_the_threshold(
    comparison: str, value: float, passed: bool
) -> None:
    a = analysis(min_requests=0, queries=(internal.QueryCheck("depth", "q", comparison, 2),))
    v = checks.judge(a, STEP, checks.Sample({("depth", checks.QUERY): (value,)}))
    assert v.outcome is (Out.PASSED if passed else Out.FAILED)
    assert v.measurements[-1] == Measurement("depth", value, None, 2, passed)


def test_the_measurements_are_what_decided_and_a_hold_message_has_no_values() -> None:
    v = checks.judge(
        analysis(error_ratio=ERR, latency=LAT), STEP, sample(2, errorRatio=(0.0, 0.001), latency=(0.3, 0.25))
    )
    assert v.outcome is Out.PASSED and v.hold_message == ""
    assert v.measurements == (
        Measurement("requests", 120.0),
        Measurement("errorRatio", 0.0, 0.001, 0.011, True),
        Measurement("latency", 0.3, 0.25, 0.375, True),
    )
    few = checks.judge(analysis(error_ratio=ERR), STEP, sample(0.1))
    assert "6" not in few.hold_message and "(6)" in few.message  # the count changes, the hold does not


def test_infinite_values_are_not_written_but_still_judged() -> None:
    v = checks.judge(analysis(latency=LAT), STEP, sample(latency=(float("inf"), 0.1)))
    assert v.outcome is Out.FAILED
    assert v.measurements[-1] == Measurement("latency", None, 0.1, 0.15000000000000002, False)


# -- the status types -------------------------------------------------------------------------------


def worst_case() -> analysis_status.AnalysisStatus:
    m = Measurement("q" * 63, 1.2345678901234567e-05, -1.2345678901234567e-05, 1.2345678901234567e308, False)
    t = analysis_status.Transition(
        time="2026-12-31T23:59:59Z",
        phase="RollingBack",
        reason="ChecksFailed",
        from_="Progressing",
        step_index=19,
        weight=99,
        message="m" * analysis_status.MAX_MESSAGE,
    )
    return analysis_status.AnalysisStatus(
        phase="RollingBack",
        spec_hash="0" * 16,
        step_index=19,
        weight=99,
        step_start_time="2026-12-31T23:59:59Z",
        failed_checks=100,
        hold=analysis_status.Hold(
            "PrometheusUnreachable", "h" * analysis_status.MAX_MESSAGE, "2026-12-31T23:59:59Z"
        ),
        measurements=(m,) * analysis_status.MAX_MEASUREMENTS,
        history=(t,) * analysis_status.HISTORY_LIMIT,
    )


def test_the_status_has_a_bounded_size() -> None:
    """Under 4 KiB at worst: the whole status' budget (STATUS_BUDGET_BYTES) grew from 12 to 16 KiB
    when the analysis was attached to it (the reconciler's worst-case test includes one)."""
    size = len(msgspec.json.encode(analysis_status.encode(worst_case())))
    assert size < 4 * 1024, size


def test_the_status_round_trips_and_a_bad_one_reads_as_none() -> None:
    s = worst_case()
    assert analysis_status.decode(msgspec.json.decode(msgspec.json.encode(analysis_status.encode(s)))) == s
    # written as the API server returns it: the fields its schema defaults are written out
    assert analysis_status.encode(analysis_status.AnalysisStatus("Progressing", "h")) == {
        "phase": "Progressing",
        "specHash": "h",
        "stepIndex": 0,
        "weight": 0,
        "failedChecks": 0,
        "measurements": [],
        "history": [],
    }
    assert analysis_status.decode(None) is None
    assert analysis_status.decode({"phase": "Dancing", "specHash": "h"}) is None
    assert analysis_status.decode({"phase": "Paused", "specHash": "h", "history": [{"time": "t"}]}) is None


def test_the_status_types_make_a_structural_schema_with_descriptions() -> None:
    schema = crd.structural_schema(analysis_status.AnalysisStatus)
    props = schema["properties"]
    assert props["phase"]["enum"] == sorted(analysis_status.PHASES)
    assert props["history"]["maxItems"] == analysis_status.HISTORY_LIMIT
    assert props["history"]["items"]["properties"]["from"]["enum"] == sorted(analysis_status.PHASES)
    assert props["stepStartTime"]["format"] == "date-time"
