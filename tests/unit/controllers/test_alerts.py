"""The InferenceService alert rules, proven with the pinned promtool on synthetic series.

Each alert is shown to fire (labels and rendered annotations) once its condition has held for its
``for`` duration, not one evaluation earlier, and to stay silent on healthy series. promtool comes
from ``binaries.promtool()`` (built when missing): when it cannot be had the tests fail, never skip.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import (
    alert_queries,
    alert_settings,
    alerts,
    children,
    labels,
    servers,
)
from mlops_platform.controllers.inferenceservice.children import base, monitoring
from mlops_platform.devcluster import binaries
from mlops_platform.testing.isvc import manifest

NS, NAME, DEP = "ml", "bert", "bert-predictor"
CANARY_URI = "s3://models/bert/8"
FRAMEWORKS = ("triton", "seldon", "torchserve")
STEPS = 40  # samples per series, one a minute
DEFAULTS = alert_settings.AlertSettings()
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def promtool() -> Path:
    return binaries.promtool()


def groups_for(
    framework: str,
    min_replicas: int = 2,
    settings: alert_settings.AlertSettings = DEFAULTS,
    canary: str | None = None,
    dialect: str | None = None,
) -> list[Obj]:
    return alerts.rule_groups(
        name=NAME,
        namespace=NS,
        framework=framework,
        deployment=DEP,
        min_replicas=min_replicas,
        settings=settings,
        canary_model_uri=canary,
        dialect=dialect,
    )


def rules_of(groups: list[Obj]) -> dict[str, Obj]:
    return {r["alert"]: r for g in groups for r in g["rules"]}


# -- synthetic series ------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:.12g}"


def series(metric: str, values: str, **labels: str) -> Obj:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def counter(per_minute: float) -> str:
    return f"0+{_num(per_minute)}x{STEPS}"


def gauge(value: float) -> str:
    return f"{_num(value)}x{STEPS}"


def target(component: str = "predictor", isvc: str = NAME, namespace: str = NS) -> dict[str, str]:
    """The labels a scraped model-server series carries (ServiceMonitor podTargetLabels + target)."""
    return {
        "namespace": namespace,
        alert_settings.ISVC_LABEL: isvc,
        alert_settings.COMPONENT_LABEL: component,
        "pod": f"{isvc}-{component}-7d9f-abcde",
        "job": f"{isvc}-{component}",
        "endpoint": "metrics",
    }


MLSERVER_BUCKETS = ("0.1", "0.5", "1.0", "2.5", "5.0", "+Inf")


def traffic(
    framework: str,
    *,
    ok: float,
    failed: float,
    seconds: float,
    labels: Mapping[str, str] | None = None,
    success_series: bool = True,
    failure_series: bool = True,
    rest: bool = True,
) -> list[Obj]:
    """Per-minute request counts and latency as the pinned server exports them (``docs/monitoring.md``).
    ``success_series``/``failure_series`` False: that counter does not exist (yet)."""
    t = dict(labels or target())
    if framework == "triton":
        m = {**t, "model": "bert", "version": "1"}
        out = [
            series("nv_inference_request_duration_us", counter(ok * seconds * 1e6), **m),
            series("nv_inference_count", counter(ok), **m),
        ]
        if failure_series:
            out.append(series("nv_inference_request_failure", counter(failed), **m, reason="BACKEND"))
        if success_series:
            out.append(series("nv_inference_request_success", counter(ok), **m))
        return out
    if framework == "seldon":
        m = {**t, "model": "bert", "version": "v1"}
        total = ok + failed
        out = [
            series("model_infer_request_duration_sum", counter(total * seconds), **m),
            series("model_infer_request_duration_count", counter(total), **m),
        ]
        if failure_series:
            out.append(series("model_infer_request_failure_total", counter(failed), **m))
        if success_series:
            out.append(series("model_infer_request_success_total", counter(ok), **m))
        if rest:
            r = {**t, "method": "POST", "path": "/v2/models/{model_name}/infer", "app_name": "mlserver"}
            out += [
                series(
                    "rest_server_request_duration_seconds_bucket",
                    counter(total if seconds <= float(le) else 0),
                    **r,
                    status_code="200",
                    le=le,
                )
                for le in MLSERVER_BUCKETS
            ]
        return out
    if framework == "torchserve":
        m = {**t, "model_name": "bert", "model_version": "default", "hostname": "bert-predictor-7d9f-abcde"}
        host = {**t, "Level": "Host", "Hostname": "bert-predictor-7d9f-abcde"}
        out = [
            series("ts_inference_requests_total", counter(ok + failed), **m),
            series("ts_inference_latency_microseconds", counter(ok * seconds * 1e6), **m),
        ]
        if failure_series:
            out.append(series("Requests5XX", counter(failed), **host))
        if success_series:
            out.append(series("Requests2XX", counter(ok), **host))
        return out
    raise AssertionError(framework)


def replicas(available: float, wanted: float, deployment: str = DEP) -> list[Obj]:
    """kube-state-metrics gauges, scraped from two kube-state-metrics replicas (HA)."""
    out = []
    for i in range(2):
        ksm = {
            "namespace": NS,
            "deployment": deployment,
            "job": "kube-state-metrics",
            "instance": f"10.0.0.{i + 9}:8080",
            "pod": f"kube-state-metrics-{i}",
        }
        out += [
            series("kube_deployment_status_replicas_available", gauge(available), **ksm),
            series("kube_deployment_spec_replicas", gauge(wanted), **ksm),
        ]
    return out


# -- expectations and the promtool run -------------------------------------------------------------

_VALUE = re.compile(r"\{\{ \$value[^}]*\}\}")


def fired(groups: list[Obj], alert: str, value: str) -> Obj:
    """The firing alert as promtool must report it: the rule's labels (+ the series labels kept
    by the expression) and its annotations with ``{{ $value ... }}`` rendered as ``value``."""
    rule = rules_of(groups)[alert]
    labels = dict(rule["labels"])
    if alert in (alert_settings.NO_READY_REPLICA, alert_settings.BELOW_MIN_REPLICAS):
        labels["deployment"] = DEP
    annotations = {k: _VALUE.sub(value, v) for k, v in rule["annotations"].items()}
    assert annotations != rule["annotations"] or "{{" not in str(rule["annotations"])
    return {"exp_labels": labels, "exp_annotations": annotations}


def at(time: str, groups: list[Obj], firing: Mapping[str, Obj] | None = None) -> list[Obj]:
    """Checks at ``time``: the alerts in ``firing`` fire as given, every other alert is silent."""
    firing = firing or {}
    unknown = set(firing) - set(rules_of(groups))
    assert not unknown, f"no such rule: {unknown}"
    return [
        {"eval_time": time, "alertname": alert, "exp_alerts": [firing[alert]] if alert in firing else []}
        for alert in rules_of(groups)
    ]


def fires_between(
    groups: list[Obj], silent: str, firing: str, alert: str, expected: Obj, still: str | None = None
) -> list[Obj]:
    """Checks that every alert is silent at ``silent`` and only ``alert`` fires (as ``expected``) at
    ``firing``, one evaluation later: it fires once held for its ``for``, not earlier (and, with
    ``still``, is still the only one firing at that time)."""
    later = at(still, groups, {alert: expected}) if still else []
    return [*at(silent, groups), *at(firing, groups, {alert: expected}), *later]


def run(
    promtool: Path, tmp_path: Path, groups: list[Obj], input_series: list[Obj], checks: list[Obj]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    check = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    test = tmp_path / "test.yaml"
    doc = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": checks}],
    }
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run([str(promtool), "test", "rules", str(test)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# -- request alerts --------------------------------------------------------------------------------

HEALTHY_REPLICAS = replicas(available=2, wanted=2)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_rules_pass_promtool_check(promtool: Path, tmp_path: Path, framework: str) -> None:
    settings = alert_settings.AlertSettings(
        error_ratio=0.5, latency_seconds=0.25, for_="1m", runbook_base_url="https://docs.example/monitoring"
    )
    for min_replicas in (0, 1, 3):
        for canary in (None, CANARY_URI, 's3://models/{{ "x" }}/"quoted"\\'):
            path = tmp_path / f"rules-{min_replicas}-{canary is not None}.yaml"
            groups = groups_for(framework, min_replicas, settings, canary)
            assert (alert_settings.CANARY_ERROR_RATIO in rules_of(groups)) == (canary is not None)
            path.write_text(yaml.safe_dump({"groups": groups}))
            out = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
            assert out.returncode == 0, out.stdout + out.stderr
            assert "SUCCESS" in out.stdout


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_high_error_ratio_fires_once_held_for_its_for(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework)
    # 10% of requests fail from minute 0; rate() has two samples at 1m, so it holds from 1m
    series_ = traffic(framework, ok=90, failed=10, seconds=0.1) + HEALTHY_REPLICAS
    error = fired(groups, alert_settings.HIGH_ERROR_RATIO, "10%")
    checks = fires_between(groups, "5m", "6m", alert_settings.HIGH_ERROR_RATIO, error, still="20m")
    run(promtool, tmp_path, groups, series_, checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_error_ratio_is_over_all_components(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework)
    series_ = [
        *traffic(framework, ok=90, failed=0, seconds=0.1, labels=target("predictor")),
        *traffic(framework, ok=0, failed=10, seconds=0.1, labels=target("canary"), success_series=False),
        *HEALTHY_REPLICAS,
    ]
    error = fired(groups, alert_settings.HIGH_ERROR_RATIO, "10%")
    run(promtool, tmp_path, groups, series_, at("10m", groups, {alert_settings.HIGH_ERROR_RATIO: error}))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_all_requests_failing_fires_before_any_success_is_counted(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    # MLServer creates its success series at the first success only: 100% failures must still fire
    groups = groups_for(framework)
    series_ = traffic(framework, ok=0, failed=20, seconds=0.1, success_series=False) + HEALTHY_REPLICAS
    error = fired(groups, alert_settings.HIGH_ERROR_RATIO, "100%")
    checks = fires_between(groups, "5m", "6m", alert_settings.HIGH_ERROR_RATIO, error)
    run(promtool, tmp_path, groups, series_, checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_high_latency_fires_once_held_for_its_for(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework)
    series_ = traffic(framework, ok=60, failed=0, seconds=2.0) + HEALTHY_REPLICAS
    # Triton and TorchServe: the mean (2s); MLServer: the REST p95 interpolated in (1, 2.5]
    value = "2.425s" if framework == "seldon" else "2s"
    slow = fired(groups, alert_settings.HIGH_LATENCY, value)
    checks = fires_between(groups, "5m", "6m", alert_settings.HIGH_LATENCY, slow)
    run(promtool, tmp_path, groups, series_, checks)


def test_mlserver_latency_fires_on_the_rest_p95_when_the_mean_is_fine(promtool: Path, tmp_path: Path) -> None:
    groups = groups_for("seldon")
    fast = traffic("seldon", ok=54, failed=0, seconds=0.05)
    slow = traffic("seldon", ok=6, failed=0, seconds=2.0, labels=target("predictor") | {"pod": "b"})
    # mean (54 x 0.05s + 6 x 2s) / 60 = 0.245s; p95: rank 57 of 60, 3 into (1, 2.5] of 6 -> 1.75s
    high = fired(groups, alert_settings.HIGH_LATENCY, "1.75s")
    run(
        promtool,
        tmp_path,
        groups,
        fast + slow + HEALTHY_REPLICAS,
        at("10m", groups, {alert_settings.HIGH_LATENCY: high}),
    )


def test_mlserver_latency_of_grpc_only_traffic_is_the_mean(promtool: Path, tmp_path: Path) -> None:
    groups = groups_for("seldon")
    series_ = traffic("seldon", ok=60, failed=0, seconds=2.0, rest=False) + HEALTHY_REPLICAS
    high = fired(groups, alert_settings.HIGH_LATENCY, "2s")
    checks = fires_between(groups, "5m", "6m", alert_settings.HIGH_LATENCY, high)
    run(promtool, tmp_path, groups, series_, checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_healthy_service_is_silent_and_other_services_do_not_count(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    groups = groups_for(framework)
    series_ = [
        *traffic(framework, ok=100, failed=1, seconds=0.2),  # 1% errors, 200 ms
        # failing and slow, but another InferenceService (same namespace) and another namespace
        *traffic(framework, ok=1, failed=50, seconds=9.0, labels=target(isvc="other")),
        *traffic(framework, ok=1, failed=50, seconds=9.0, labels=target(namespace="elsewhere")),
        *replicas(available=0, wanted=3, deployment="other-predictor"),
        *HEALTHY_REPLICAS,
    ]
    run(promtool, tmp_path, groups, series_, [*at("10m", groups), *at("30m", groups)])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_traffic_is_silent(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework)
    run(
        promtool,
        tmp_path,
        groups,
        traffic(framework, ok=0, failed=0, seconds=0) + HEALTHY_REPLICAS,
        at("20m", groups),
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_thresholds_and_for_come_from_the_settings(promtool: Path, tmp_path: Path, framework: str) -> None:
    settings = alert_settings.AlertSettings(error_ratio=0.2, latency_seconds=3.0, for_="10m")
    groups = groups_for(framework, settings=settings)
    below = traffic(framework, ok=90, failed=10, seconds=2.0) + HEALTHY_REPLICAS  # 10% < 20%, 2s < 3s
    (tmp_path / "below").mkdir()
    run(promtool, tmp_path / "below", groups, below, at("30m", groups))
    worse = traffic(framework, ok=70, failed=30, seconds=0.1) + HEALTHY_REPLICAS  # 30% > 20%
    error = fired(groups, alert_settings.HIGH_ERROR_RATIO, "30%")
    checks = fires_between(groups, "10m", "11m", alert_settings.HIGH_ERROR_RATIO, error)
    run(promtool, tmp_path, groups, worse, checks)


# -- canary alert ----------------------------------------------------------------------------------


def canary_traffic(
    framework: str, *, stable: tuple[float, float], canary: tuple[float, float] | None, **kw: Any
) -> list[Obj]:
    """(ok, failed) per minute of the stable predictor and the canary (None: no canary series)."""
    out = traffic(framework, ok=stable[0], failed=stable[1], seconds=0.1, labels=target("predictor"))
    if canary is not None:
        out += traffic(framework, ok=canary[0], failed=canary[1], seconds=0.1, labels=target("canary"), **kw)
    return out + HEALTHY_REPLICAS


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_alert_fires_once_the_canary_errors_more_than_stable_for_its_for(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    groups = groups_for(framework, canary=CANARY_URI)
    # stable 1%, canary 10% (whole service 2/110 = 1.8%: HighErrorRatio stays silent)
    series_ = canary_traffic(framework, stable=(99, 1), canary=(9, 1))
    worse = fired(groups, alert_settings.CANARY_ERROR_RATIO, "10%")
    assert CANARY_URI in worse["exp_annotations"]["summary"]
    checks = fires_between(groups, "5m", "6m", alert_settings.CANARY_ERROR_RATIO, worse, still="30m")
    run(promtool, tmp_path, groups, series_, checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_alert_fires_against_a_stable_without_failure_series(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    # MLServer and TorchServe create their failure series at the first failure: a stable that never
    # failed has no ratio, which must count as 0% rather than silence the comparison
    groups = groups_for(framework, canary=CANARY_URI)
    stable = traffic(
        framework, ok=90, failed=0, seconds=0.1, labels=target("predictor"), failure_series=False
    )
    canary = traffic(framework, ok=9, failed=1, seconds=0.1, labels=target("canary"))
    worse = fired(groups, alert_settings.CANARY_ERROR_RATIO, "10%")
    run(
        promtool,
        tmp_path,
        groups,
        stable + canary + HEALTHY_REPLICAS,
        at("10m", groups, {alert_settings.CANARY_ERROR_RATIO: worse}),
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_alert_fires_when_the_stable_gets_no_requests(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    # all traffic on the canary (the stable's ratio is 0/0): the canary is held to the margin alone
    groups = groups_for(framework, canary=CANARY_URI)
    series_ = canary_traffic(framework, stable=(0, 0), canary=(9, 1))
    firing = {
        alert_settings.CANARY_ERROR_RATIO: fired(groups, alert_settings.CANARY_ERROR_RATIO, "10%"),
        alert_settings.HIGH_ERROR_RATIO: fired(groups, alert_settings.HIGH_ERROR_RATIO, "10%"),
    }
    run(promtool, tmp_path, groups, series_, at("10m", groups, firing))


@pytest.mark.parametrize(
    ("stable", "canary", "kw"),
    [
        pytest.param((97, 3), (97, 3), {}, id="equal"),
        pytest.param((97, 3), (193, 7), {}, id="within-margin"),  # 3.5% vs 3%: under 1 point above
        pytest.param((90, 10), (99, 1), {}, id="canary-better"),
        pytest.param((99, 1), (0, 0), {}, id="canary-no-requests"),
        pytest.param((99, 1), None, {}, id="canary-no-series"),
        pytest.param((99, 1), (99, 0), {"failure_series": False}, id="canary-never-failed"),
    ],
)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_alert_is_silent_unless_the_canary_errors_more(
    promtool: Path,
    tmp_path: Path,
    framework: str,
    stable: tuple[float, float],
    canary: tuple[float, float] | None,
    kw: dict[str, Any],
) -> None:
    groups = groups_for(framework, canary=CANARY_URI)
    # "canary-better": the whole service fails 11/200 = 5.5%, so HighErrorRatio fires (and only it)
    firing = {}
    if stable == (90, 10):
        firing[alert_settings.HIGH_ERROR_RATIO] = fired(groups, alert_settings.HIGH_ERROR_RATIO, "5.5%")
    series_ = canary_traffic(framework, stable=stable, canary=canary, **kw)
    run(promtool, tmp_path, groups, series_, [*at("10m", groups, firing), *at("30m", groups, firing)])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_margin_and_for_come_from_the_settings(promtool: Path, tmp_path: Path, framework: str) -> None:
    settings = alert_settings.AlertSettings(canary_error_margin=0.2, error_ratio=1.0, for_="10m")
    groups = groups_for(framework, settings=settings, canary=CANARY_URI)
    (tmp_path / "below").mkdir()
    below = canary_traffic(framework, stable=(99, 1), canary=(85, 15))  # 15% < 1% + 20 points
    run(promtool, tmp_path / "below", groups, below, at("30m", groups))
    worse = canary_traffic(framework, stable=(99, 1), canary=(70, 30))  # 30% > 21%
    expected = fired(groups, alert_settings.CANARY_ERROR_RATIO, "30%")
    assert "20 percentage points" in expected["exp_annotations"]["description"]
    checks = fires_between(groups, "10m", "11m", alert_settings.CANARY_ERROR_RATIO, expected)
    run(promtool, tmp_path, groups, worse, checks)


def test_canary_model_uri_is_literal_text_in_the_annotations(promtool: Path, tmp_path: Path) -> None:
    uri = "s3://models/{{ .Labels }}/8"
    groups = groups_for("triton", canary=uri)
    worse = fired(groups, alert_settings.CANARY_ERROR_RATIO, "10%")
    rendered = {k: v.replace('{{ "{{" }}', "{{") for k, v in worse["exp_annotations"].items()}
    assert uri in rendered["summary"] and uri in rendered["description"]
    expected = {**worse, "exp_annotations": rendered}
    series_ = canary_traffic("triton", stable=(99, 1), canary=(9, 1))
    run(promtool, tmp_path, groups, series_, at("10m", groups, {alert_settings.CANARY_ERROR_RATIO: expected}))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_canary_alert_exists_only_with_a_canary(framework: str) -> None:
    plain = groups_for(framework)
    with_canary = groups_for(framework, canary=CANARY_URI)
    assert list(rules_of(plain)) == list(alert_settings.ALERTS)
    assert list(rules_of(with_canary)) == [*alert_settings.ALERTS, *alert_settings.CANARY_ALERTS]
    # the alerts of the predictor are untouched by the canary
    assert with_canary[0]["rules"][: len(alert_settings.ALERTS)] == plain[0]["rules"]
    rule = rules_of(with_canary)[alert_settings.CANARY_ERROR_RATIO]
    assert rule["for"] == DEFAULTS.for_
    assert rule["labels"] == {
        "severity": "warning",
        "namespace": NS,
        "inferenceservice": NAME,
        "framework": framework,
    }
    assert set(rule["annotations"]) == {"summary", "description"}
    assert CANARY_URI in rule["annotations"]["summary"] and CANARY_URI in rule["annotations"]["description"]
    for component in ("canary", "predictor"):
        assert f'{alert_settings.COMPONENT_LABEL}="{component}"' in rule["expr"]
    assert rule["expr"].endswith(" > 0)") and "+ 0.01)" in rule["expr"]


def isvc_target(framework: str, canary_uri: str | None, **spec: Any) -> base.Target:
    """The PrometheusRule's target of ``ml/bert``, with a running canary serving ``canary_uri``."""
    obj = manifest(NAME, namespace=NS, modelUri="s3://models/bert/7", framework=framework, **spec)
    isvc = api.decode(obj)
    comps = base.components(isvc)
    if canary_uri is not None:
        comps += (base.Component(labels.CANARY, canary_uri, "Canary"),)
    [slot] = [s for s in base.slots(isvc, children.CHILDREN, comps) if s.child is monitoring.RULE]
    return slot.target


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_prometheus_rule_has_the_canary_alert_only_while_a_canary_runs(framework: str) -> None:
    ctx = base.BuildContext()
    plain = monitoring.build_rule(isvc_target(framework, None), ctx)
    with_canary = monitoring.build_rule(isvc_target(framework, CANARY_URI), ctx)
    assert plain is not None and with_canary is not None
    [plain_group], [canary_group] = plain["spec"]["groups"], with_canary["spec"]["groups"]
    names = [r["alert"] for r in canary_group["rules"]]
    assert alert_settings.CANARY_ERROR_RATIO not in [r["alert"] for r in plain_group["rules"]]
    assert (
        names[-1] == alert_settings.CANARY_ERROR_RATIO and names.count(alert_settings.CANARY_ERROR_RATIO) == 1
    )
    assert canary_group["rules"][:-1] == plain_group["rules"]
    assert CANARY_URI in canary_group["rules"][-1]["annotations"]["summary"]
    assert with_canary["metadata"] == plain["metadata"]


def test_the_canary_alert_takes_the_operator_margin_and_the_per_object_for() -> None:
    ctx = base.BuildContext(alerts=alert_settings.AlertSettings(canary_error_margin=0.05))
    t = isvc_target("triton", CANARY_URI, extensions={"monitoring": {"alerts": {"for": "10m"}}})
    rule = monitoring.build_rule(t, ctx)
    assert rule is not None
    canary = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}[
        alert_settings.CANARY_ERROR_RATIO
    ]
    assert "+ 0.05)" in canary["expr"] and canary["for"] == "10m"


# -- replica alerts --------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_ready_replica_fires_once_held_for_its_for(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework, min_replicas=2)
    none = fired(groups, alert_settings.NO_READY_REPLICA, "0")
    checks = fires_between(groups, "4m", "5m", alert_settings.NO_READY_REPLICA, none)
    # below minReplicas but zero is the no-replica alert only, even after below_min_for
    checks += at("30m", groups, {alert_settings.NO_READY_REPLICA: none})
    run(promtool, tmp_path, groups, replicas(available=0, wanted=2), checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_ready_replica_is_silent_when_no_replica_is_wanted(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    groups = groups_for(framework, min_replicas=2)
    run(promtool, tmp_path, groups, replicas(available=0, wanted=0), at("30m", groups))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_below_min_replicas_fires_once_held_for_below_min_for(
    promtool: Path, tmp_path: Path, framework: str
) -> None:
    groups = groups_for(framework, min_replicas=3)
    below = fired(groups, alert_settings.BELOW_MIN_REPLICAS, "1")
    checks = fires_between(groups, "14m", "15m", alert_settings.BELOW_MIN_REPLICAS, below)
    run(promtool, tmp_path, groups, replicas(available=1, wanted=3), checks)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_replica_alerts_silent_at_min_replicas(promtool: Path, tmp_path: Path, framework: str) -> None:
    groups = groups_for(framework, min_replicas=2)
    run(promtool, tmp_path, groups, replicas(available=2, wanted=4), at("30m", groups))


@pytest.mark.parametrize(
    ("min_replicas", "expected"),
    [
        pytest.param(0, [alert_settings.HIGH_ERROR_RATIO, alert_settings.HIGH_LATENCY], id="scale-to-zero"),
        pytest.param(
            1,
            [alert_settings.NO_READY_REPLICA, alert_settings.HIGH_ERROR_RATIO, alert_settings.HIGH_LATENCY],
            id="one",
        ),
        pytest.param(2, list(alert_settings.ALERTS), id="two"),
    ],
)
def test_replica_alerts_depend_on_min_replicas(min_replicas: int, expected: list[str]) -> None:
    for framework in FRAMEWORKS:
        assert list(rules_of(groups_for(framework, min_replicas))) == expected


def test_group_shape_labels_and_runbook() -> None:
    settings = alert_settings.AlertSettings(runbook_base_url="https://docs.example/monitoring.md")
    [group] = groups_for("triton", settings=settings)
    assert group["name"] == f"mlops-platform.{NS}.{NAME}"
    for rule in group["rules"]:
        assert rule["alert"].startswith("InferenceService")
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["labels"]["namespace"] == NS and rule["labels"]["inferenceservice"] == NAME
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
        assert (
            rule["annotations"]["runbook_url"]
            == f"https://docs.example/monitoring.md#{rule['alert'].lower()}"
        )
        if rule["alert"] in (alert_settings.HIGH_ERROR_RATIO, alert_settings.HIGH_LATENCY):
            assert (
                f'{alert_settings.ISVC_LABEL}="{NAME}"' in rule["expr"]
                and f'namespace="{NS}"' in rule["expr"]
            )
    assert "runbook_url" not in rules_of(groups_for("triton"))[alert_settings.HIGH_LATENCY]["annotations"]


def test_rule_groups_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="dialect: unknown 'onnx'"):
        groups_for("onnx")
    with pytest.raises(ValueError, match="min_replicas: must be >= 0"):
        groups_for("triton", min_replicas=-1)


def test_the_metrics_dialects_are_the_runtime_tables() -> None:
    assert [*alert_queries.SERVERS, alert_queries.NO_REQUEST_METRICS] == list(servers.METRICS_DIALECTS)


def test_a_runtime_named_otherwise_takes_its_dialects_expressions_and_none_gives_replica_alerts_only() -> (
    None
):
    def rules(framework: str, dialect: str) -> dict[str, Obj]:
        return rules_of(groups_for(framework, canary=CANARY_URI, dialect=dialect))

    mirror, triton = rules("triton-mirror", "triton"), rules_of(groups_for("triton", canary=CANARY_URI))
    assert {a: r["expr"] for a, r in mirror.items()} == {a: r["expr"] for a, r in triton.items()}
    assert {r["labels"]["framework"] for r in mirror.values()} == {"triton-mirror"}
    assert list(rules("acme", "none")) == [alert_settings.NO_READY_REPLICA, alert_settings.BELOW_MIN_REPLICAS]


# -- settings --------------------------------------------------------------------------------------

FIELD = "spec.extensions.monitoring.alerts"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param({"errorRatio": 2}, "errorRatio", id="ratio>1"),
        pytest.param({"errorRatio": 0}, "errorRatio", id="ratio=0"),
        pytest.param({"errorRatio": "5%"}, "errorRatio", id="ratio-str"),
        pytest.param({"errorRatio": True}, "errorRatio", id="ratio-bool"),
        pytest.param({"latencySeconds": 0}, "latencySeconds", id="latency=0"),
        pytest.param({"for": "5"}, "for", id="for-unit"),
        pytest.param({"for": "1m1h"}, "for", id="for-order"),
        pytest.param({"for": 300}, "for", id="for-int"),
        pytest.param({"belowMinFor": ""}, "belowMinFor", id="below-empty"),
        pytest.param({"rateWindow": "1m"}, None, id="unknown"),
        pytest.param({"error_ratio": 0.1}, None, id="snake-case"),
        pytest.param(["errorRatio"], None, id="not-a-map"),
    ],
)
def test_bad_overrides_are_rejected_where_they_are_decoded_naming_the_field(
    raw: Any, field: str | None
) -> None:
    extensions = {"monitoring": {"alerts": raw}}
    obj = manifest("m", namespace="ml", modelUri="s3://m/1", framework="triton", extensions=extensions)
    with pytest.raises(api.ValidationError) as err:
        api.decode(obj)
    assert (f"{FIELD}.{field}" if field else FIELD) in str(err.value)


def test_every_accepted_override_is_a_valid_alert_setting() -> None:
    """What the API accepts, AlertSettings accepts too (one duration grammar)."""
    for value in ("0", "30s", "5m", "1h30m", "1d", "90s"):
        assert alert_settings.AlertSettings(for_=value).for_ == value
    with pytest.raises(ValueError, match="for_"):
        alert_settings.AlertSettings(for_="1m1h")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"error_ratio": 1.5}, "AlertSettings.error_ratio: must be a number in (0, 1]", id="ratio"
        ),
        pytest.param({"for_": "5 m"}, "AlertSettings.for_: must be a Prometheus duration", id="for"),
        pytest.param({"rate_window": "0s"}, "AlertSettings.rate_window: must be a duration > 0", id="window"),
        pytest.param(
            {"latency_quantile": 1}, "AlertSettings.latency_quantile: must be a number in (0, 1)", id="q"
        ),
        pytest.param(
            {"runbook_base_url": "docs"}, "AlertSettings.runbook_base_url: must be an http(s) URL", id="url"
        ),
        pytest.param(
            {"canary_error_margin": 0},
            "AlertSettings.canary_error_margin: must be a number in (0, 1]",
            id="canary-margin",
        ),
    ],
)
def test_alert_settings_validate_themselves(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        alert_settings.AlertSettings(**changes)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("1d", 86400),
        ("2w", 14 * 86400),
        ("1y", 365 * 86400),
        ("1s500ms", 1.5),
        ("250ms", 0.25),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert alert_settings.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1m1h", "1.5m", "-1m", "5M", "1h 30m", "1s1s", "5m\n"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="must be a Prometheus duration"):
        alert_settings.parse_duration(text)


# -- the request rate (what a KEDA trigger scales on) ----------------------------------------------


@pytest.mark.parametrize("framework", ["triton", "seldon"])
@pytest.mark.parametrize(
    ("success_series", "failure_series", "per_second"),
    [(True, True, 1.5), (True, False, 1.0), (False, True, 0.5), (False, False, None)],
)
def test_the_request_rate_counts_whichever_counters_exist(
    promtool: Path,
    tmp_path: Path,
    framework: str,
    success_series: bool,
    failure_series: bool,
    per_second: float | None,
) -> None:
    """30 answered and 15 failed requests every 30 s scrape (the ServiceMonitor's interval: the
    trigger's 1m window holds two samples). A server's labelled counter exists only once
    incremented (MLServer has no failure series until a request fails): the rate is what exists,
    and no value when neither does (no server pod: the trigger falls back to the mesh's count)."""
    expr = alert_queries.SERVERS[framework].requests(alerts.request_query(NS, NAME))
    series_ = traffic(
        framework, ok=30, failed=15, seconds=0.1, success_series=success_series, failure_series=failure_series
    )
    expected = [] if per_second is None else [{"labels": "{}", "value": per_second}]
    promql_tests(
        promtool, tmp_path, [(series_, [{"expr": expr, "eval_time": "10m", "exp_samples": expected}])]
    )


def promql_tests(promtool: Path, tmp_path: Path, cases: list[tuple[list[Obj], list[Obj]]]) -> None:
    """promtool evaluates each case's PromQL expression tests (``promql_expr_test`` items) over its
    input series (a sample every 30 s; no rules loaded); a mismatch fails with promtool's output."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": []}))
    doc = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "30s", "input_series": series_, "promql_expr_test": tests}
            for series_, tests in cases
        ],
    }
    test = tmp_path / "test.yaml"
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run([str(promtool), "test", "rules", str(test)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
