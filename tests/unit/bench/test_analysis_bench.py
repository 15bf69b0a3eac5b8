"""bench.analysis' pure parts (bench.analysis_series, analysis_figures, analysis_proxy and
analysis_report): the synthetic exporter's series (the names and labels the operator's own analysis
queries select), the step weights, the figures of a window, and the steps counted."""

from __future__ import annotations

import re

import pytest
from bench import analysis_figures, analysis_proxy, analysis_report, analysis_series
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import analysis_queries


def exposed(elapsed: float) -> dict[tuple[str, str, str], float]:
    """(sample name, InferenceService, component) -> value, for the samples without ``le``, and the
    ``le="+Inf"`` bucket."""
    exporter = analysis_series.Exporter("ns", ["a", "b"], elapsed=lambda: elapsed)
    text = generate_latest(analysis_series.exporter_registry(exporter)).decode()
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
    isvc = api.decode(analysis_series.inference_service(3, analysis_series.analysis_spec(4, 30)))
    assert isvc.traffic is not None and isvc.traffic.analysis is not None
    a = isvc.traffic.analysis
    queries = analysis_queries.step_queries(a, a.steps[0], namespace="ns", name="a", dialect="seldon")
    assert len(queries) == analysis_series.queries_per_measurement(4, 30) == 7
    names = {n for n, _, _ in exposed(10.0)} | {"rest_server_request_duration_seconds_bucket"}
    for q in queries:
        for metric, selector in re.findall(r"([a-z_]+)\{([^}]*)\}", q.expr):
            assert metric in names, (metric, q.expr)
            assert 'namespace="ns"' in selector and 'mlops_platform_inferenceservice="a"' in selector
            assert 'mlops_platform_component="canary"' in selector or q.side == "stable"


def test_weights_rise_from_10_to_90() -> None:
    assert analysis_series.weights(1) == [10]
    assert analysis_series.weights(4) == [10, 37, 63, 90]
    assert analysis_series.analysis_spec(3, 30)["steps"] == [{"weight": 10}, {"weight": 50}, {"weight": 90}]


def test_bucket_bound_is_the_upper_bound_of_the_quantiles_bucket() -> None:
    buckets = [(0.1, 98.0), (0.2, 99.0), (0.4, 100.0), (float("inf"), 100.0)]
    assert analysis_figures.bucket_bound(0.99, buckets) == 0.2
    assert analysis_figures.bucket_bound(0.5, buckets) == 0.1
    assert analysis_figures.bucket_bound(0.99, [(0.1, 0.0), (float("inf"), 10.0)]) == float("inf")
    assert analysis_figures.bucket_bound(0.99, [(0.1, 0.0)]) is None


def reading(at: float, cpu: float, queries: float, busy: float = 0.0) -> analysis_figures.Reading:
    buckets = ((0.1, queries), (float("inf"), queries))
    rss = 64 * 2**20
    return analysis_figures.Reading(at, cpu, rss, int(at), queries, queries * 0.004, queries, buckets, busy)


def test_window_figures() -> None:
    w = analysis_figures.window(reading(10.0, 5.0, 100.0), reading(70.0, 8.0, 1300.0, busy=30.0))
    assert w["seconds"] == 60.0
    assert w["queries"] == 1200.0
    assert w["queries_per_second"] == pytest.approx(20.0)
    assert w["cpu_per_second"] == pytest.approx(0.05)
    assert w["machine_busy_per_second"] == pytest.approx(0.5)
    assert w["rss_mib"] == 64.0
    assert w["reconciles_per_second"] == 1.0
    assert w["query_mean_ms"] == pytest.approx(4.0)
    assert w["query_p99_at_most_ms"] == pytest.approx(100.0)
    idle = analysis_figures.window(reading(0.0, 1.0, 5.0), reading(60.0, 1.0, 5.0))
    assert (
        idle["queries_per_second"] == 0
        and idle["query_mean_ms"] is None
        and idle["query_p99_at_most_ms"] is None
    )


def test_steps_passed_and_promotions() -> None:
    P = analysis_figures.Progress
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
    assert analysis_figures.advanced(before, after) == {
        "steps_passed": 2 + 2,
        "promoted": 1,
        "phases_at_end": {"Progressing": 1, "Promoting": 1, "Promoted": 1},
        "holds_at_end": {"NotEnoughRequests": 1},
    }


# --- --proxy-queries: the API server's service proxy --------------------------------------------------


def test_proxy_queries_are_the_operators_measurements_in_turn() -> None:
    per = analysis_series.queries_per_measurement(8, 30)
    exprs = analysis_proxy.proxy_queries(3 * per + 2, count=3, steps=8, interval=30)
    assert len(exprs) == 3 * per + 2
    isvc = api.decode(analysis_series.inference_service(1, analysis_series.analysis_spec(8, 30)))
    assert isvc.traffic is not None and isvc.traffic.analysis is not None
    a = isvc.traffic.analysis
    second = analysis_queries.step_queries(
        a, a.steps[0], namespace=analysis_series.NAMESPACE, name=analysis_series.name_of(1), dialect="seldon"
    )
    assert exprs[per : 2 * per] == [q.expr for q in second]
    assert exprs[3 * per :] == exprs[:2]  # over and over
    assert len(set(exprs[: 3 * per])) == 3 * per


def test_send_times_are_steady() -> None:
    assert analysis_proxy.send_times(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert analysis_proxy.send_times(0, 22.2) == []


def cpu(at: float, apiserver: float, client: float = 0.0, busy: float = 0.0) -> analysis_proxy.CpuReading:
    return analysis_proxy.CpuReading(at=at, apiserver=apiserver, client=client, machine_busy=busy)


def test_cpu_window_and_pooled_idle() -> None:
    w = analysis_proxy.cpu_window(cpu(10, 5.0, 1.0, 20.0), cpu(110, 8.0, 1.5, 120.0))
    assert w == pytest.approx(
        {"seconds": 100, "apiserver_cpu_per_second": 0.03, "client_cpu_per_second": 0.005,
         "machine_busy_per_second": 1.0}
    )  # fmt: skip
    short = analysis_proxy.cpu_window(cpu(0, 0.0), cpu(50, 3.0))
    both = analysis_proxy.pooled(w, short)
    assert both["seconds"] == 150
    assert both["apiserver_cpu_per_second"] == pytest.approx((3.0 + 3.0) / 150)
    assert both["client_cpu_per_second"] == pytest.approx(0.5 / 150)


def test_proxy_figures_per_query_and_at_n100() -> None:
    idle = {"seconds": 240.0, "apiserver_cpu_per_second": 0.03, "client_cpu_per_second": 0.0}
    load = {"seconds": 120.0, "apiserver_cpu_per_second": 0.10, "client_cpu_per_second": 0.04}
    latencies = [float(i) for i in range(1, 101)]
    f = analysis_proxy.proxy_figures(idle, load, 2400, latencies, at_rate=22.2)
    assert f["queries_per_second"] == pytest.approx(20.0)
    assert f["apiserver_extra_cpu_per_second"] == pytest.approx(0.07)
    assert f["apiserver_cpu_ms_per_query"] == pytest.approx(3.5)  # 0.07 s/s over 20 queries/s
    assert f["client_cpu_ms_per_query"] == pytest.approx(2.0)
    assert f["apiserver_extra_cpu_per_second_at_rate"] == pytest.approx(0.0035 * 22.2)
    assert (f["latency_p50_ms"], f["latency_p99_ms"], f["latency_max_ms"]) == (50.0, 99.0, 100.0)


def test_the_proxy_section_renders() -> None:
    idle = {"seconds": 240.0, "apiserver_cpu_per_second": 0.03, "client_cpu_per_second": 0.0,
            "machine_busy_per_second": 1.0}  # fmt: skip
    load = idle | {"seconds": 120.0, "apiserver_cpu_per_second": 0.1}
    proxy = {
        "idle_before": idle, "idle_after": idle, "idle": idle, "load": load,
        "outcomes": {"ok": 2400}, "endpoint": "monitoring/prometheus-operated:9090",
        "query_shapes": 700, "queries_per_measurement": 7, "command": "python -m bench.analysis",
        "machine": {"cpus": 2}, "arguments": {"proxy_rate": 22.2, "proxy_idle": 120, "count": 100},
        "figures": analysis_proxy.proxy_figures(idle, load, 2400, [8.0, 9.0]),
    }  # fmt: skip
    text = "\n".join(analysis_report.render_proxy(proxy))
    assert "**3.50 ms of CPU per query**" in text
    assert "failures none" in text
