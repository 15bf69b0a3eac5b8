"""What a canary analysis' checks say of one step's window (pure): :func:`judge` turns the values
Prometheus gave (a :class:`Sample`, measured by :mod:`.analysis_queries`) into a :class:`Verdict`, one
:class:`~mlops_platform.api.analysis_status.Measurement` per check and an :class:`Outcome`, which
the state machine (:mod:`.analysis`) acts on.

What each check means (``docs/progressive-delivery.md``):

- ``requests``: the candidate's requests in the window (its request rate times the window), at
  least ``minRequests``, else nothing is decided (``NOT_ENOUGH_REQUESTS``);
- ``errorRatio``: the candidate's error ratio at most ``max`` and at most the stable's plus
  ``maxAboveStable`` (a stable without a ratio counts as 0, as in the canary alert); the candidate
  without a ratio (no failure series and no success series) is no data;
- ``latency``: the candidate's latency (the highest of the server's latency values: the quantile
  and the mean for MLServer) at most ``maxSeconds`` and at most the stable's times
  ``maxTimesStable``; the stable without latency data leaves a relative bound undecided (no data);
- a custom query: its one value compared with its threshold; no value is no data.

The outcome, first match: a check that cannot be evaluated at all (``INVALID``); too few requests;
a check that failed (``FAILED``, even if another has no data: a failure is never held back); a check
without data or a query Prometheus could not run now (``NO_DATA``); else ``PASSED``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
from collections.abc import Callable, Mapping

from mlops_platform.api import internal
from mlops_platform.api.analysis_status import Measurement

ERROR_RATIO = "errorRatio"
LATENCY = "latency"
REQUESTS = "requests"
CANDIDATE = "candidate"
STABLE = "stable"
#: a custom query's side (it says itself what it selects)
QUERY = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """The values of one step's window. ``values``: (check, side) -> the values its queries gave
    (absent or empty: no data); ``invalid``: check -> why it cannot be evaluated at all (a query
    Prometheus refuses, a runtime without request metrics); ``failed``: check -> why Prometheus
    could not run its query now."""

    values: Mapping[tuple[str, str], tuple[float, ...]]
    invalid: Mapping[str, str] = dataclasses.field(default_factory=dict)
    failed: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Unreachable:
    """Prometheus did not answer (connection, timeout, its proxy): nothing was measured."""

    message: str


class Outcome(enum.Enum):
    INVALID = "Invalid"
    NOT_ENOUGH_REQUESTS = "NotEnoughRequests"
    FAILED = "Failed"
    NO_DATA = "NoData"
    PASSED = "Passed"


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    measurements: tuple[Measurement, ...]
    #: what decided, with the values (for a transition, an Event)
    message: str
    #: why nothing is decided, without the values (a hold's message: the same while it lasts)
    hold_message: str = ""


_COMPARE: Mapping[str, tuple[Callable[[float, float], bool], str]] = {
    "LessThan": (operator.lt, "<"),
    "LessThanOrEqual": (operator.le, "<="),
    "GreaterThan": (operator.gt, ">"),
    "GreaterThanOrEqual": (operator.ge, ">="),
}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _g(x: float | None) -> str:
    return "no data" if x is None else f"{x:.4g}"


def _lowest(*bounds: float | None) -> float | None:
    present = [b for b in bounds if b is not None]
    return min(present) if present else None


def _one(sample: Sample, check: str, side: str) -> float | None:
    values = sample.values.get((check, side)) or ()
    return max(values) if values else None


def _error_ratio(check: internal.ErrorRatioCheck, sample: Sample) -> Measurement:
    candidate = _one(sample, ERROR_RATIO, CANDIDATE)
    stable = _one(sample, ERROR_RATIO, STABLE) if check.max_above_stable is not None else None
    if check.max_above_stable is not None:
        stable = stable if stable is not None and stable >= 0 else 0.0  # no baseline: 0
    margin = None if check.max_above_stable is None or stable is None else stable + check.max_above_stable
    limit = _lowest(check.max, margin)
    passed = None if candidate is None or limit is None else candidate <= limit
    return Measurement(ERROR_RATIO, _finite(candidate), _finite(stable), _finite(limit), passed)


def _latency(check: internal.LatencyCheck, sample: Sample) -> Measurement:
    candidate = _one(sample, LATENCY, CANDIDATE)
    stable = _one(sample, LATENCY, STABLE) if check.max_times_stable is not None else None
    relative = None if stable is None or check.max_times_stable is None else stable * check.max_times_stable
    limit = _lowest(check.max_seconds, relative)
    if candidate is None or limit is None:
        passed = None
    elif candidate > limit:
        passed = False  # too slow for a bound that applies, whatever the other one says
    else:
        passed = None if check.max_times_stable is not None and stable is None else True
    return Measurement(LATENCY, _finite(candidate), _finite(stable), _finite(limit), passed)


def _query(check: internal.QueryCheck, sample: Sample) -> Measurement:
    value = _one(sample, check.name, QUERY)
    compare, _ = _COMPARE[check.comparison]
    passed = None if value is None else compare(value, check.threshold)
    return Measurement(check.name, _finite(value), None, check.threshold, passed)


def _describe(m: Measurement, comparison: str = "<=") -> str:
    if m.check == REQUESTS:
        return f"requests {_g(m.candidate)}"
    verdict = {True: "passed", False: "failed", None: "undecided"}[m.passed]
    stable = f", stable {_g(m.stable)}" if m.stable is not None else ""
    return f"{m.check} {_g(m.candidate)} {comparison} {_g(m.limit)}{stable}: {verdict}"


def judge(a: internal.Analysis, step: internal.AnalysisStep, sample: Sample) -> Verdict:
    """The verdict of the checks of ``a`` over ``step``'s window."""
    if sample.invalid:
        check, why = sorted(sample.invalid.items())[0]
        return Verdict(Outcome.INVALID, (), f"check {check} cannot be evaluated: {why}", "")
    rate = _one(sample, REQUESTS, CANDIDATE)
    requests = Measurement(REQUESTS, round((rate or 0.0) * step.seconds, 3))
    if a.min_requests and (requests.candidate or 0) < a.min_requests:
        why = (
            f"fewer than minRequests ({a.min_requests}) requests to the candidate in the last {step.interval}"
        )
        return Verdict(Outcome.NOT_ENOUGH_REQUESTS, (requests,), f"{why} ({_g(requests.candidate)})", why)
    checks: list[tuple[Measurement, str]] = []
    if a.error_ratio is not None:
        checks.append((_error_ratio(a.error_ratio, sample), "<="))
    if a.latency is not None:
        checks.append((_latency(a.latency, sample), "<="))
    checks += [(_query(q, sample), _COMPARE[q.comparison][1]) for q in a.queries]
    counted = (requests,) if a.min_requests else ()  # minRequests 0: no request query was sent
    measurements = (*counted, *(m for m, _ in checks))
    failed = [_describe(m, c) for m, c in checks if m.passed is False]
    if failed:
        return Verdict(Outcome.FAILED, measurements, "; ".join(failed))
    undecided = sorted({*(m.check for m, _ in checks if m.passed is None), *sample.failed})
    if undecided:
        reasons = [f"{c}: {sample.failed[c]}" if c in sample.failed else f"{c}: no data" for c in undecided]
        why = "; ".join(reasons)
        return Verdict(Outcome.NO_DATA, measurements, why, why)
    text = "; ".join([*(_describe(m) for m in counted), *(_describe(m, c) for m, c in checks)])
    return Verdict(Outcome.PASSED, measurements, text)
