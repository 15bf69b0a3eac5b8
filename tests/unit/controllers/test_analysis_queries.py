"""The analysis' built-in checks take the PrometheusRule's own expressions (one source, per metrics
dialect), for the candidate and the stable model by their component label; promtool evaluates them
on the synthetic series of the alert tests; custom queries get their variables."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.unit.controllers import test_alerts

from mlops_platform import promapi, promclient
from mlops_platform.api import internal
from mlops_platform.api.analysis_status import AnalysisStatus
from mlops_platform.controllers.inferenceservice import (
    alert_queries,
    alert_settings,
    alerts,
    analysis,
    analysis_queries,
)
from mlops_platform.controllers.inferenceservice import analysis_checks as checks
from mlops_platform.devcluster import binaries

NS, NAME = "ml", "bert"
DIALECTS = tuple(sorted(alert_queries.SERVERS))
STEP = internal.AnalysisStep(25, "5m", 300)  # the rule's window: the same text
SETTINGS = alert_settings.AlertSettings()
FULL = internal.Analysis(
    steps=(STEP,),
    min_requests=10,
    error_ratio=internal.ErrorRatioCheck(0.01, 0.01),
    latency=internal.LatencyCheck(SETTINGS.latency_quantile, 1.0, 1.2),
    spec_hash="h",
)


def queries(
    a: internal.Analysis = FULL, dialect: str = "seldon", step: internal.AnalysisStep = STEP
) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for q in analysis_queries.step_queries(a, step, namespace=NS, name=NAME, dialect=dialect):
        out.setdefault((q.check, q.side), []).append(q.expr)
    return out


def rules(dialect: str) -> dict[str, dict[str, Any]]:
    groups = alerts.rule_groups(
        name=NAME,
        namespace=NS,
        framework=dialect,
        deployment=f"{NAME}-predictor",
        min_replicas=1,
        settings=SETTINGS,
        canary_model_uri="s3://models/bert/8",
    )
    return {r["alert"]: r for g in groups for r in g["rules"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_error_ratio_and_requests_are_the_canary_alerts_own_expressions(dialect: str) -> None:
    q = queries(dialect=dialect)
    canary_alert = rules(dialect)[alert_settings.CANARY_ERROR_RATIO]["expr"]
    [candidate] = q[(checks.ERROR_RATIO, checks.CANDIDATE)]
    [stable] = q[(checks.ERROR_RATIO, checks.STABLE)]
    [requests] = q[(checks.REQUESTS, checks.CANDIDATE)]
    server = alert_queries.SERVERS[dialect]
    whole = alerts.request_query(NS, NAME, STEP.interval).component(alert_settings.CANARY_COMPONENT)
    assert candidate == server.served_error_ratio(whole)  # the alert's ratio, 0 without failure series
    assert f"({server.errors(whole)} > ({stable}) + 0.01)" in canary_alert
    assert f"and ({requests} > 0)" in canary_alert
    assert (
        'mlops_platform_component="canary"' in candidate and 'mlops_platform_component="predictor"' in stable
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_latency_values_are_the_latency_alerts_own_expressions_by_component(dialect: str) -> None:
    alert = rules(dialect)[alert_settings.HIGH_LATENCY]["expr"]
    q = queries(dialect=dialect)
    for side, component in ((checks.CANDIDATE, "canary"), (checks.STABLE, "predictor")):
        values = q[(checks.LATENCY, side)]
        assert values, side
        for value in values:  # the alert's value of the whole service, restricted to one component
            whole = value.replace(f', {alert_settings.COMPONENT_LABEL}="{component}"', "")
            assert whole != value and whole in alert, (side, value)
    server = alert_queries.SERVERS[dialect]
    service = alerts.request_query(NS, NAME, SETTINGS.rate_window)
    assert alert == server.latency(service, SETTINGS.latency_seconds, SETTINGS.latency_quantile)
    assert len(server.latencies(service, 0.5)) == (2 if dialect == "seldon" else 1)


def test_the_window_is_the_steps_interval_and_only_what_is_checked_is_asked() -> None:
    a = internal.Analysis(steps=(internal.AnalysisStep(10, "1m30s", 90),), min_requests=0,
                          error_ratio=internal.ErrorRatioCheck(max=0.05), spec_hash="h")  # fmt: skip
    q = queries(a, step=a.steps[0])
    assert list(q) == [(checks.ERROR_RATIO, checks.CANDIDATE)]
    assert "[1m30s]" in q[(checks.ERROR_RATIO, checks.CANDIDATE)][0]
    a = internal.Analysis(steps=a.steps, latency=internal.LatencyCheck(0.9, max_seconds=1), spec_hash="h")
    assert sorted(queries(a, step=a.steps[0])) == [
        (checks.LATENCY, checks.CANDIDATE),
        (checks.REQUESTS, checks.CANDIDATE),
    ]
    assert "histogram_quantile(0.9," in queries(a, step=a.steps[0])[(checks.LATENCY, checks.CANDIDATE)][0]


def test_custom_queries_get_their_variables() -> None:
    a = internal.Analysis(
        steps=(STEP,),
        min_requests=0,
        queries=(
            internal.QueryCheck(
                "depth",
                "max(q{$(selector)}[$(window)]) / max(q{$(stableSelector)}) + on() "
                'up{namespace="$(namespace)", job="$(name)"} + $(unknown)',
                "LessThan",
                2,
            ),
        ),
        spec_hash="h",
    )
    [expr] = queries(a)[("depth", checks.QUERY)]
    candidate = 'namespace="ml", mlops_platform_inferenceservice="bert", mlops_platform_component="canary"'
    stable = candidate.replace('"canary"', '"predictor"')
    assert expr == (
        f'max(q{{{candidate}}}[5m]) / max(q{{{stable}}}) + on() up{{namespace="ml", job="bert"}} + $(unknown)'
    )


def test_a_runtime_without_request_metrics_has_only_custom_checks() -> None:
    with pytest.raises(analysis_queries.Unavailable, match="'none' has no request metrics"):
        queries(dialect=alert_queries.NO_REQUEST_METRICS)
    custom = (internal.QueryCheck("x", "vector(1)", "LessThan", 2),)
    a = internal.Analysis(steps=(STEP,), min_requests=0, queries=custom, spec_hash="h")
    assert queries(a, dialect=alert_queries.NO_REQUEST_METRICS) == {("x", checks.QUERY): ["vector(1)"]}
    with pytest.raises(analysis_queries.Unavailable):  # a request minimum needs the request metrics
        queries(internal.Analysis(steps=(STEP,), queries=a.queries, spec_hash="h"), dialect="none")


@pytest.fixture(scope="module")
def promtool() -> Path:
    return binaries.promtool()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_promtool_evaluates_them_per_component(promtool: Path, tmp_path: Path, dialect: str) -> None:
    """Candidate: 6 of 60 requests failed every 30 s scrape, answered in 0.25 s; stable: 1 of 60,
    in 0.125 s. The candidate's ratio is 0.1, the stable's 0.01/0.0167, 2 requests a second."""
    step = internal.AnalysisStep(10, "1m", 60)
    a = internal.Analysis(
        steps=(step,),
        error_ratio=internal.ErrorRatioCheck(max_above_stable=0.01),
        latency=internal.LatencyCheck(0.5, max_times_stable=1.2),
        spec_hash="h",
    )
    series = [
        *test_alerts.traffic(dialect, ok=54, failed=6, seconds=0.25, labels=test_alerts.target("canary")),
        *test_alerts.traffic(dialect, ok=59, failed=1, seconds=0.125, labels=test_alerts.target("predictor")),
        # another InferenceService's canary, failing everything: never selected
        *test_alerts.traffic(
            dialect, ok=0, failed=60, seconds=9, labels=test_alerts.target("canary", "other")
        ),
    ]
    stable_ratio = 1 / 60
    # TorchServe's latency counter adds up answered requests only, over all requests
    means = {"candidate": 54 * 0.25 / 60, "stable": 59 * 0.125 / 60} if dialect == "torchserve" else {
        "candidate": 0.25, "stable": 0.125}  # fmt: skip
    expected: dict[tuple[str, str], list[float]] = {
        (checks.REQUESTS, checks.CANDIDATE): [2.0],
        (checks.ERROR_RATIO, checks.CANDIDATE): [0.1],
        (checks.ERROR_RATIO, checks.STABLE): [stable_ratio],
        # MLServer: the REST p50 (all requests in the (0.1, 0.5] bucket: 0.3) and the mean
        (checks.LATENCY, checks.CANDIDATE): [0.3, means["candidate"]]
        if dialect == "seldon"
        else [means["candidate"]],
        (checks.LATENCY, checks.STABLE): [0.3, means["stable"]] if dialect == "seldon" else [means["stable"]],
    }
    tests = [  # each value within 1e-9 (promtool compares exactly; rate() extrapolates in floats)
        {
            "expr": f"abs(({q.expr}) - {value!r}) < bool 1e-9",
            "eval_time": "10m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for q, value in zip(
            analysis_queries.step_queries(a, step, namespace=NS, name=NAME, dialect=dialect),
            [v for key in expected for v in expected[key]],
            strict=True,
        )
    ]
    test_alerts.promql_tests(promtool, tmp_path, [(series, tests)])


@pytest.mark.parametrize("dialect", ["seldon", "torchserve"])
def test_a_candidate_without_failure_series_has_a_ratio_of_0_once_it_served_and_none_before(
    promtool: Path, tmp_path: Path, dialect: str
) -> None:
    """MLServer and TorchServe create their failure counter with the first failure: a healthy
    candidate has none, and its ratio is 0 (else the check would have no data for ever); a
    candidate that served nothing in the window has no ratio."""
    step = internal.AnalysisStep(10, "1m", 60)
    ratio = internal.ErrorRatioCheck(0.05)
    a = internal.Analysis(steps=(step,), min_requests=0, error_ratio=ratio, spec_hash="h")
    [q] = analysis_queries.step_queries(a, step, namespace=NS, name=NAME, dialect=dialect)
    healthy = test_alerts.traffic(dialect, ok=60, failed=0, seconds=0.1, labels=test_alerts.target("canary"),
                                  failure_series=False)  # fmt: skip
    idle = test_alerts.traffic(dialect, ok=0, failed=0, seconds=0.1, labels=test_alerts.target("canary"),
                               failure_series=False)  # fmt: skip
    test_alerts.promql_tests(
        promtool,
        tmp_path,
        [
            (series, [{"expr": q.expr, "eval_time": "10m", "exp_samples": expected}])
            for series, expected in ((healthy, [{"labels": "{}", "value": 0}]), (idle, []))
        ],
    )


# -- measuring a step ---------------------------------------------------------------------------------


class FakeClient:
    """Answers each query by the first matching key found in it (an exception is raised)."""

    def __init__(self, answers: dict[str, list[promapi.Sample] | Exception]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def query(self, promql: str) -> list[promapi.Sample]:
        self.asked.append(promql)
        for key, answer in self.answers.items():
            if key in promql:
                if isinstance(answer, Exception):
                    raise answer
                return answer
        return []


def one(value: float) -> list[promapi.Sample]:
    return [promapi.Sample({}, value)]


CHECKED = internal.Analysis(
    steps=(STEP,),
    min_requests=10,
    error_ratio=internal.ErrorRatioCheck(0.05),
    latency=internal.LatencyCheck(0.99, max_seconds=1.0),
    queries=(internal.QueryCheck("depth", "max(queue_depth{$(selector)})", "LessThan", 5),),
    spec_hash="h",
)


async def measured(answers: dict[str, list[promapi.Sample] | Exception], dialect: str = "seldon") -> Any:
    client = FakeClient(answers)
    out = await analysis_queries.measure(client, CHECKED, STEP, namespace=NS, name=NAME, dialect=dialect)
    return out, client


async def test_a_step_is_measured_with_every_query_at_once() -> None:
    sample, client = await measured({
        "model_infer_request_failure_total{namespace=\"ml\", mlops_platform_inferenceservice=\"bert\", "
        "mlops_platform_component=\"canary\"}[5m])) / ": one(0.01),
        "histogram_quantile": one(0.4),
        "model_infer_request_duration_sum": one(float("nan")),  # 0/0: no request: no value
        "queue_depth": one(3),
        "success_total": one(2.0),  # the request rate (the ratio's key came first)
    })  # fmt: skip
    assert isinstance(sample, checks.Sample) and not sample.invalid and not sample.failed
    assert sample.values == {
        (checks.REQUESTS, checks.CANDIDATE): (2.0,),
        (checks.ERROR_RATIO, checks.CANDIDATE): (0.01,),
        (checks.LATENCY, checks.CANDIDATE): (0.4,),
        ("depth", checks.QUERY): (3.0,),
    }
    assert len(client.asked) == 5
    verdict = checks.judge(CHECKED, STEP, sample)
    assert verdict.outcome is checks.Outcome.PASSED, verdict.message


async def test_one_unanswered_query_means_nothing_was_measured() -> None:
    down = promclient.QueryError(
        "unreachable", "Prometheus monitoring/prometheus-operated:9090: no answer within 5s"
    )
    sample, _ = await measured({"queue_depth": down})
    assert sample == checks.Unreachable(str(down))


async def test_a_refused_or_failed_query_and_several_series_are_said() -> None:
    sample, _ = await measured({
        "histogram_quantile": promclient.QueryError("failed", "Prometheus p: execution: too many samples"),
        "queue_depth": [promapi.Sample({"pod": "a"}, 1), promapi.Sample({"pod": "b"}, 2)],
    })  # fmt: skip
    assert sample.failed == {checks.LATENCY: "Prometheus p: execution: too many samples"}
    assert sample.invalid == {"depth": "gives 2 series, not one value: aggregate them (sum, max, ...)"}
    sample, _ = await measured({"queue_depth": promclient.QueryError("invalid", "bad_data: parse error")})
    assert sample.invalid == {"depth": "bad_data: parse error"}


async def test_a_runtime_without_request_metrics_cannot_be_measured() -> None:
    sample, client = await measured({}, dialect=alert_queries.NO_REQUEST_METRICS)
    assert not client.asked and "no request metrics" in sample.invalid[checks.REQUESTS]
    assert checks.judge(CHECKED, STEP, sample).outcome is checks.Outcome.INVALID


async def test_the_loop_the_reconciler_will_run_decide_measure_decide() -> None:
    """At the end of a step's interval: decide asks for a measurement, measure asks Prometheus, decide
    judges it (what the wiring will do in a reconcile; nothing else is needed from it)."""
    a = dataclasses.replace(CHECKED, steps=(internal.AnalysisStep(10, "1m", 60), STEP))
    start = datetime.datetime(2026, 12, 24, tzinfo=datetime.UTC)
    status = AnalysisStatus(
        "Progressing", "h", step_index=0, weight=10, step_start_time="2026-12-24T00:00:00Z"
    )
    inp = analysis.Inputs(a, status, start + datetime.timedelta(seconds=61), settled=True)
    first = analysis.decide(inp)
    assert first.measure and not first.changed
    ratio = 'mlops_platform_component="canary"}[1m])) / '  # the ratio; the request rate has no " / "
    client = FakeClient({ratio: one(0.0), "success_total": one(1.0), "depth": one(1), "quantile": one(0.2)})
    sample = await analysis_queries.measure(client, a, a.steps[0], namespace=NS, name=NAME, dialect="seldon")
    assert all("[1m]" in q for q in client.asked if "rate(" in q)  # the step's own window
    second = analysis.decide(dataclasses.replace(inp, measurement=sample))
    assert second.transition is not None and second.transition.reason == "StepPassed"
    assert (second.status.step_index, second.weight, second.changed) == (1, 25, True)
