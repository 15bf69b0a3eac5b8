"""The analysis benchmark's readings and their arithmetic (``bench.analysis``): what one reading of
the operator and Prometheus holds (:class:`Reading`), the figures of the span between two
(:func:`window`), the analyses' progress as their status says (:func:`progress`, :func:`advanced`),
and the extra load of the analyses over the baseline (:func:`figures`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench import _common as common

QUERY_HANDLER = "/api/v1/query"


@dataclasses.dataclass(frozen=True)
class Reading:
    """One reading of everything a window is the difference of."""

    at: float  # time.monotonic()
    cpu_seconds: float  # the operator's
    rss: int  # the operator's, bytes
    reconciles: int  # the operator's, all results
    queries: float  # prometheus_http_requests_total{handler="/api/v1/query"}
    query_seconds: float  # ..._duration_seconds_sum of that handler
    query_count: float  # ..._duration_seconds_count
    query_buckets: tuple[tuple[float, float], ...]  # (le, cumulative count)
    machine_busy: float  # every CPU, every process


def prometheus_readings(text: str) -> dict[str, Any]:
    """What a :class:`Reading` takes from Prometheus' own /metrics."""
    from bench import scale

    def handler(metric: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for lab, v in scale.samples(text, metric) if lab.get("handler") == QUERY_HANDLER]

    buckets: dict[float, float] = {}
    for lab, v in handler("prometheus_http_request_duration_seconds_bucket"):
        le = float(lab["le"])
        buckets[le] = buckets.get(le, 0.0) + v
    return {
        "queries": sum(v for _, v in handler("prometheus_http_requests_total")),
        "query_seconds": sum(v for _, v in handler("prometheus_http_request_duration_seconds_sum")),
        "query_count": sum(v for _, v in handler("prometheus_http_request_duration_seconds_count")),
        "query_buckets": tuple(sorted(buckets.items())),
    }


def bucket_bound(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The upper bound of the bucket of cumulative ``buckets`` (le, count) that holds the ``q``
    quantile: the quantile is at most that (None without observations). Prometheus' own request
    histogram is coarse (its first bucket ends at 0.1 s): an interpolated value would be invented."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    return next(le for le, count in buckets if count >= q * buckets[-1][1])


def window(before: Reading, after: Reading) -> dict[str, Any]:
    """The figures of the span between two readings."""
    seconds = after.at - before.at
    n = after.query_count - before.query_count
    diff = tuple((le, c - dict(before.query_buckets).get(le, 0.0)) for le, c in after.query_buckets)
    p99 = bucket_bound(0.99, diff)
    return {
        "seconds": round(seconds, 1),
        "queries": after.queries - before.queries,
        "queries_per_second": (after.queries - before.queries) / seconds,
        "cpu_per_second": (after.cpu_seconds - before.cpu_seconds) / seconds,
        "machine_busy_per_second": (after.machine_busy - before.machine_busy) / seconds,
        "rss_mib": after.rss / common.MIB,
        "reconciles_per_second": (after.reconciles - before.reconciles) / seconds,
        "query_mean_ms": 1000 * (after.query_seconds - before.query_seconds) / n if n else None,
        "query_p99_at_most_ms": 1000 * p99 if p99 is not None else None,
    }


@dataclasses.dataclass(frozen=True)
class Progress:
    """One analysis as its status says."""

    phase: str | None
    step: int
    hold: str | None
    started: bool = False  # a step's interval has begun (the route carries its weight)


def progress(items: Sequence[Mapping[str, Any]]) -> dict[str, Progress]:
    out = {}
    for o in items:
        s = (o.get("status") or {}).get("analysis") or {}
        out[o["metadata"]["name"]] = Progress(
            s.get("phase"),
            int(s.get("stepIndex") or 0),
            (s.get("hold") or {}).get("reason"),
            bool(s.get("stepStartTime")),
        )
    return out


ENDED = ("Promoting", "Promoted")


def advanced(before: Mapping[str, Progress], after: Mapping[str, Progress]) -> dict[str, Any]:
    """Steps passed between two :func:`progress` readings (the last step's pass is the move to
    ``Promoting``), analyses that reached ``Promoting``/``Promoted``, and the phases and holds at the end."""
    steps = promoted = 0
    for name, end in after.items():
        start = before.get(name, Progress(None, 0, None))
        steps += max(0, end.step - start.step)
        if end.phase in ENDED and start.phase not in ENDED:
            steps += 1
            promoted += 1
    return {
        "steps_passed": steps,
        "promoted": promoted,
        "phases_at_end": dict(Counter(str(p.phase) for p in after.values())),
        "holds_at_end": dict(Counter(p.hold for p in after.values() if p.hold)),
    }


def figures(r: Mapping[str, Any]) -> dict[str, Any]:
    """The extra load of the analyses over the baseline."""
    base, an = r["baseline"], r["analysis"]
    return {
        "queries_per_second": an["queries_per_second"],
        "extra_cpu_per_second": an["cpu_per_second"] - base["cpu_per_second"],
        "extra_rss_mib": an["rss_mib"] - base["rss_mib"],
        "measurements_per_second": an["queries_per_second"] / r["queries_per_measurement"],
        "steps_passed": an["steps_passed"],
        "promoted": an["promoted"],
    }
