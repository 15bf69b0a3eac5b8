"""``spec.canary.analysis`` of v1 and v1beta1: progressive delivery on live metrics (issue 42,
``docs/progressive-delivery.md``).

The candidate walks ``steps`` of traffic weights (10 -> 25 -> 50, then it is promoted); each step
lasts its ``interval`` (or the analysis' ``interval``), at whose end the checks are evaluated over
that step's window: the candidate's error ratio and latency, each against an absolute bound and/or
relative to the stable model, and custom PromQL ``queries``. No decision is taken on fewer than
``minRequests`` requests to the candidate in the window; ``failureLimit`` failed evaluations roll
it back.

This module holds the types (the CRD schema is generated from them, so their ``Meta`` descriptions
are what ``kubectl explain`` shows), their CEL rules, and :func:`validate`, which says the same as
the CEL rules in Python (and what CEL cannot: the variables of a query), each error naming the
field. :func:`to_internal` gives the operator's model, :func:`spec_hash` the identity of a canary
spec (a change restarts the analysis; ``paused`` is not part of it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from mlops_platform.api import internal
from mlops_platform.runtime import diff

#: a step interval: hours, minutes, seconds in that order (both Go's ``time.ParseDuration``, which
#: CEL's ``duration()`` uses, and PromQL's range selectors read it)
INTERVAL_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
MIN_INTERVAL_SECONDS = 10
MAX_INTERVAL_SECONDS = 86400
#: a custom check's name: a DNS-1123 label (it names the check in status and Events)
CHECK_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_STEPS = 20
MAX_QUERIES = 5
#: ``$(variable)`` of a custom query, expanded by the operator (Kubernetes' ``$(VAR)`` syntax)
QUERY_VARIABLES = ("namespace", "name", "selector", "stableSelector", "window")
_VARIABLE = re.compile(r"\$\(([^)]*)\)")
COMPARISONS = ("LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual")

_INTERVAL_RULES = [
    {
        "rule": f"duration(self) >= duration('{MIN_INTERVAL_SECONDS}s') && "
        f"duration(self) <= duration('{MAX_INTERVAL_SECONDS}s')",
        "message": "an analysis interval must be between 10s and 24h",
        "reason": "FieldValueInvalid",
    }
]
Interval = Annotated[
    str,
    Meta(
        pattern=INTERVAL_PATTERN,
        min_length=2,
        max_length=16,
        extra_json_schema={"x-kubernetes-validations": _INTERVAL_RULES},
    ),
]

#: CEL rules of ``spec.canary`` (mirrored by :func:`validate_canary`)
CANARY_RULES = [
    {
        "rule": "!has(self.analysis) || !has(self.trafficPercent) || self.trafficPercent == 0",
        "message": "spec.canary.trafficPercent: with spec.canary.analysis the analysis sets the "
        "candidate's share step by step; leave trafficPercent 0",
        "fieldPath": ".trafficPercent",
        "reason": "FieldValueInvalid",
    }
]
#: CEL rules of ``spec.canary.analysis`` (mirrored by :func:`validate`)
ANALYSIS_RULES = [
    {
        "rule": "self.steps.map(s, s.weight).isSorted()",
        "message": "spec.canary.analysis.steps: the weights must not decrease (for example 10, 25, 50)",
        "fieldPath": ".steps",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "has(self.errorRatio) || has(self.latency) || (has(self.queries) && size(self.queries) > 0)",
        "message": "spec.canary.analysis needs at least one check: errorRatio, latency or queries",
        "reason": "FieldValueRequired",
    },
]
ERROR_RATIO_RULES = [
    {
        "rule": "has(self.max) || has(self.maxAboveStable)",
        "message": "spec.canary.analysis.errorRatio needs max, maxAboveStable or both",
        "reason": "FieldValueRequired",
    }
]
LATENCY_RULES = [
    {
        "rule": "has(self.maxSeconds) || has(self.maxTimesStable)",
        "message": "spec.canary.analysis.latency needs maxSeconds, maxTimesStable or both",
        "reason": "FieldValueRequired",
    }
]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class AnalysisStep(_Base):
    """One step: the candidate's share of requests, held for an interval, then judged."""

    weight: Annotated[
        int, Meta(ge=1, le=99, description="Percent of requests (1-99) to the candidate during this step.")
    ]
    interval: Annotated[
        Interval | None,
        Meta(
            description="How long this step lasts before its checks are evaluated over it (10s-24h, "
            "e.g. 2m, 1h30m); default: the analysis' interval."
        ),
    ] = None


class ErrorRatioCheck(_Base):
    """The candidate's failed / all inference requests over the step, by the expressions of the
    InferenceServiceHighErrorRatio alert (docs/monitoring.md)."""

    max: Annotated[
        Annotated[float, Meta(ge=0, le=1)] | None,
        Meta(description="Fails above this ratio (0-1, e.g. 0.01 = 1 %)."),
    ] = None
    max_above_stable: Annotated[
        Annotated[float, Meta(ge=0, le=1)] | None,
        Meta(
            description="Fails above the stable model's ratio plus this margin (0-1, additive: 0.01 = one "
            "percentage point; a stable without data counts as 0)."
        ),
    ] = None


class LatencyCheck(_Base):
    """The candidate's request latency over the step, by the expressions of the
    InferenceServiceHighLatency alert: the quantile where the server has a latency histogram
    (MLServer's REST requests; the mean of all requests too, whichever is higher), else the mean
    (Triton, TorchServe)."""

    quantile: Annotated[
        float, Meta(gt=0, lt=1, description="The quantile where the server exports a histogram (0.99 = p99).")
    ] = 0.99
    max_seconds: Annotated[
        Annotated[float, Meta(gt=0)] | None, Meta(description="Fails above this latency, in seconds.")
    ] = None
    max_times_stable: Annotated[
        Annotated[float, Meta(ge=1, le=100)] | None,
        Meta(
            description="Fails above the stable model's latency times this (1.2: no worse than 1.2x); "
            "no decision while the stable model has no latency data."
        ),
    ] = None


class QueryCheck(_Base):
    """A custom PromQL check: an instant query whose one value is compared with a threshold."""

    name: Annotated[
        str,
        Meta(pattern=CHECK_NAME_PATTERN, max_length=63, description="Names the check in status and Events."),
    ]
    query: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=4096,
            description="PromQL giving one value (no value: no decision). $(namespace), $(name), "
            "$(selector) (the candidate's series: namespace, InferenceService and component labels), "
            "$(stableSelector) and $(window) (the step's interval) are replaced.",
        ),
    ]
    comparison: Annotated[
        Literal["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual"],
        Meta(description="Passes when the value is LessThan (...) the threshold."),
    ]
    threshold: Annotated[float, Meta(description="What the value is compared with.")]


class Analysis(_Base):
    """Progressive delivery: the candidate's share grows step by step while its live metrics pass
    the checks; then it is promoted, and it is rolled back after failureLimit failed evaluations
    (docs/progressive-delivery.md)."""

    steps: Annotated[
        list[AnalysisStep],
        Meta(
            min_length=1,
            max_length=MAX_STEPS,
            description="The candidate's weights, in order (not decreasing); after the last step passes "
            "it is promoted.",
        ),
    ]
    interval: Annotated[
        Interval, Meta(description="How long each step lasts unless it says otherwise (10s-24h).")
    ] = "1m"
    min_requests: Annotated[
        int,
        Meta(
            ge=0,
            le=1_000_000,
            description="Requests to the candidate a step's window needs before it is judged (fewer: "
            "the step holds); 0: no minimum.",
        ),
    ] = 20
    failure_limit: Annotated[
        int,
        Meta(ge=1, le=100, description="Failed evaluations (one per interval at most) that roll it back."),
    ] = 1
    error_ratio: Annotated[
        ErrorRatioCheck | None, Meta(extra_json_schema={"x-kubernetes-validations": ERROR_RATIO_RULES})
    ] = None
    latency: Annotated[
        LatencyCheck | None, Meta(extra_json_schema={"x-kubernetes-validations": LATENCY_RULES})
    ] = None
    queries: Annotated[
        Annotated[list[QueryCheck], Meta(max_length=MAX_QUERIES)] | None,
        Meta(
            description="Custom PromQL checks, each named.",
            extra_json_schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    ] = None
    paused: Annotated[
        bool, Meta(description="Hold the current step: no evaluation, no failure counted, the weight kept.")
    ] = False


#: ``spec.canary.analysis`` with its cross-field rules
AnalysisField = Annotated[
    Analysis | None, Meta(extra_json_schema={"x-kubernetes-validations": ANALYSIS_RULES})
]


class AnalysisError(ValueError):
    """A bad analysis, the field named (``v1alpha1.ValidationError`` wraps it where it is raised)."""


def interval_seconds(text: str) -> int:
    """Seconds of an interval (``1h30m``); :class:`AnalysisError` when it is not one."""
    m = re.fullmatch(INTERVAL_PATTERN, text)
    if m is None or not text:
        raise AnalysisError(f"{text!r} is not an interval such as 30s, 5m or 1h30m")
    hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in m.groups())
    return hours * 3600 + minutes * 60 + seconds


def _check_interval(text: str, where: str) -> None:
    seconds = interval_seconds(text)
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise AnalysisError(f"{where}: must be between 10s and 24h, got {text!r}")


def validate(a: Analysis, where: str = "spec.canary.analysis") -> None:
    """The CEL rules again, and the variables of each query (which CEL cannot check)."""
    _check_interval(a.interval, f"{where}.interval")
    for i, step in enumerate(a.steps):
        if step.interval is not None:
            _check_interval(step.interval, f"{where}.steps[{i}].interval")
        if i and step.weight < a.steps[i - 1].weight:
            raise AnalysisError(
                f"{where}.steps[{i}].weight: the weights must not decrease ({a.steps[i - 1].weight} "
                f"then {step.weight})"
            )
    if a.error_ratio is None and a.latency is None and not a.queries:
        raise AnalysisError(f"{where}: needs at least one check: errorRatio, latency or queries")
    if a.error_ratio is not None and a.error_ratio.max is None and a.error_ratio.max_above_stable is None:
        raise AnalysisError(f"{where}.errorRatio: needs max, maxAboveStable or both")
    if a.latency is not None and a.latency.max_seconds is None and a.latency.max_times_stable is None:
        raise AnalysisError(f"{where}.latency: needs maxSeconds, maxTimesStable or both")
    seen: set[str] = set()
    for i, q in enumerate(a.queries or ()):
        if q.name in seen:
            raise AnalysisError(f"{where}.queries[{i}].name: {q.name!r} is used by another query")
        seen.add(q.name)
        for variable in _VARIABLE.findall(q.query):
            if variable not in QUERY_VARIABLES:
                known = ", ".join(f"$({v})" for v in QUERY_VARIABLES)
                raise AnalysisError(
                    f"{where}.queries[{i}].query: $({variable}) is not a variable (known: {known})"
                )


def validate_canary(traffic_percent: int, analysis: Analysis | None, where: str = "spec.canary") -> None:
    """:data:`CANARY_RULES` and :func:`validate` of the canary's analysis."""
    if analysis is None:
        return
    if traffic_percent != 0:
        raise AnalysisError(
            f"{where}.trafficPercent: with {where}.analysis the analysis sets the candidate's share step "
            f"by step; leave trafficPercent 0 (it is {traffic_percent})"
        )
    validate(analysis, f"{where}.analysis")


def spec_hash(canary: msgspec.Struct) -> str:
    """The identity of a canary spec (a v1 ``Canary``): its wire form without ``analysis.paused``
    (pausing is not a new spec) and without fields equal to their defaults, so that neither the
    server's defaulting nor a field added later with a default changes the hash of what was written
    before (msgspec's ``omit_defaults`` compares some values by identity: not enough here)."""
    wire = _explicit(canary)
    analysis = wire.get("analysis")
    if isinstance(analysis, dict):
        analysis.pop("paused", None)
    return diff.desired_hash(wire)


def _explicit(value: Any) -> Any:
    """``value`` as builtins, every Struct field equal to its default left out."""
    if isinstance(value, msgspec.Struct):
        out: dict[str, Any] = {}
        for f in msgspec.structs.fields(value):
            v = getattr(value, f.name)
            if f.default is not msgspec.NODEFAULT and v == f.default:
                continue
            if f.default_factory is not msgspec.NODEFAULT and v == f.default_factory():
                continue
            out[f.encode_name] = _explicit(v)
        return out
    if isinstance(value, list | tuple):
        return [_explicit(v) for v in value]
    return value


def to_internal(a: Analysis, canary_hash: str) -> internal.Analysis:
    """The operator's model of a validated analysis (each step's interval resolved)."""
    steps = tuple(
        internal.AnalysisStep(s.weight, s.interval or a.interval, interval_seconds(s.interval or a.interval))
        for s in a.steps
    )
    er, lat = a.error_ratio, a.latency
    return internal.Analysis(
        steps=steps,
        min_requests=a.min_requests,
        failure_limit=a.failure_limit,
        error_ratio=None if er is None else internal.ErrorRatioCheck(er.max, er.max_above_stable),
        latency=None
        if lat is None
        else internal.LatencyCheck(lat.quantile, lat.max_seconds, lat.max_times_stable),
        queries=tuple(
            internal.QueryCheck(q.name, q.query, q.comparison, q.threshold) for q in a.queries or ()
        ),
        paused=a.paused,
        spec_hash=canary_hash,
    )
