"""bench.analysis's pure parts: the synthetic exporter's series (the names and labels the operator's
own analysis queries select), the step weights, the figures of a window, and the steps counted."""

from __future__ import annotations

import re

import pytest
from bench import analysis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import analysis_queries


def exposed(elapsed: float) -> dict[tuple[str, str, str], float]:
    """(sample name, InferenceService, component) -> value, for the samples without ``le``, and the
    ``le="+Inf"`` bucket."""
    exporter = analysis.Exporter("ns", ["a", "b"], elapsed=lambda: elapsed)
    text = generate_latest(analysis.exporter_registry(exporter)).decode()
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert s.labels["namespace"] == "ns"
            if s.labels.get("le", "+Inf") == "+Inf":
                key = (
                    s.name,
                    s.labels["mlops_platform_inferenceservice"],
                    s.labels["mlops_platform_component"],
                )
                out[key] = s.value
    return out


def test_series_grow_steadily_for_stable_and_candidate() -> None:
    at_100 = exposed(100.0)
    for name in ("a", "b"):
        assert at_100[("model_infer_request_success_total", name, "predictor")] == pytest.approx(1996.0)
        assert at_100[("model_infer_request_failure_total", name, "predictor")] == pytest.approx(4.0)
        assert at_100[("model_infer_request_success_total", name, "canary")] == pytest.approx(998.0)
        assert at_100[("model_infer_request_duration_count", name, "canary")] == 1000
        assert at_100[("model_infer_request_duration_sum", name, "canary")] == pytest.approx(40.0)
        assert at_100[("rest_server_request_duration_seconds_bucket", name, "canary")] == pytest.approx(
            1000.0
        )
    at_200 = exposed(200.0)
    assert at_200[("model_infer_request_success_total", "a", "canary")] == pytest.approx(1996.0)


def test_the_operators_queries_select_the_exported_series() -> None:
    """Every metric the analysis' queries name is exported, with the labels they match on."""
    isvc = api.decode(analysis.inference_service(3, analysis.analysis_spec(4, 30)))
    assert isvc.traffic is not None and isvc.traffic.analysis is not None
    a = isvc.traffic.analysis
    queries = analysis_queries.step_queries(a, a.steps[0], namespace="ns", name="a", dialect="seldon")
    assert len(queries) == analysis.queries_per_measurement(4, 30) == 7
    names = {n for n, _, _ in exposed(10.0)} | {"rest_server_request_duration_seconds_bucket"}
    for q in queries:
        for metric, selector in re.findall(r"([a-z_]+)\{([^}]*)\}", q.expr):
            assert metric in names, (metric, q.expr)
            assert 'namespace="ns"' in selector and 'mlops_platform_inferenceservice="a"' in selector
            assert 'mlops_platform_component="canary"' in selector or q.side == "stable"


def test_weights_rise_from_10_to_90() -> None:
    assert analysis.weights(1) == [10]
    assert analysis.weights(4) == [10, 37, 63, 90]
    assert analysis.analysis_spec(3, 30)["steps"] == [{"weight": 10}, {"weight": 50}, {"weight": 90}]


def test_bucket_bound_is_the_upper_bound_of_the_quantiles_bucket() -> None:
    buckets = [(0.1, 98.0), (0.2, 99.0), (0.4, 100.0), (float("inf"), 100.0)]
    assert analysis.bucket_bound(0.99, buckets) == 0.2
    assert analysis.bucket_bound(0.5, buckets) == 0.1
    assert analysis.bucket_bound(0.99, [(0.1, 0.0), (float("inf"), 10.0)]) == float("inf")
    assert analysis.bucket_bound(0.99, [(0.1, 0.0)]) is None


def reading(at: float, cpu: float, queries: float, busy: float = 0.0) -> analysis.Reading:
    buckets = ((0.1, queries), (float("inf"), queries))
    return analysis.Reading(at, cpu, 64 * 2**20, int(at), queries, queries * 0.004, queries, buckets, busy)


def test_window_figures() -> None:
    w = analysis.window(reading(10.0, 5.0, 100.0), reading(70.0, 8.0, 1300.0, busy=30.0))
    assert w["seconds"] == 60.0
    assert w["queries"] == 1200.0
    assert w["queries_per_second"] == pytest.approx(20.0)
    assert w["cpu_per_second"] == pytest.approx(0.05)
    assert w["machine_busy_per_second"] == pytest.approx(0.5)
    assert w["rss_mib"] == 64.0
    assert w["reconciles_per_second"] == 1.0
    assert w["query_mean_ms"] == pytest.approx(4.0)
    assert w["query_p99_at_most_ms"] == pytest.approx(100.0)
    idle = analysis.window(reading(0.0, 1.0, 5.0), reading(60.0, 1.0, 5.0))
    assert (
        idle["queries_per_second"] == 0
        and idle["query_mean_ms"] is None
        and idle["query_p99_at_most_ms"] is None
    )


def test_steps_passed_and_promotions() -> None:
    P = analysis.Progress
    before = {
        "a": P("Progressing", 0, None, True),
        "b": P("Progressing", 6, None, True),
        "c": P("Promoted", 7, None),
    }
    after = {
        "a": P("Progressing", 2, "NotEnoughRequests", True),
        "b": P("Promoting", 7, None, True),  # step 7 passed, then the last one: promoted
        "c": P("Promoted", 7, None),
    }
    assert analysis.advanced(before, after) == {
        "steps_passed": 2 + 2,
        "promoted": 1,
        "phases_at_end": {"Progressing": 1, "Promoting": 1, "Promoted": 1},
        "holds_at_end": {"NotEnoughRequests": 1},
    }
