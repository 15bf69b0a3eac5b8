"""``why``'s Monitoring part: what Prometheus answered, as the report holds and shows it; and the
Prometheus reads' addressing (``promapi``)."""

from __future__ import annotations

import datetime
import json

import pytest

from mlops_platform import promapi, why
from mlops_platform.testing.isvc import manifest
from mlops_platform.why import health

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
GROUP = "mlops-platform.ml.bert"


def _rule(name: str, state: str, severity: str = "critical", value: str = "") -> dict[str, object]:
    alerts = []
    if state != "inactive":
        alerts = [
            {
                "activeAt": "2026-03-01T11:58:00.123456789Z",
                "value": value,
                "annotations": {"summary": f"{name} summary"},
                "state": state,
            }
        ]
    return {"name": name, "state": state, "labels": {"severity": severity}, "alerts": alerts, "health": "ok"}


def _target(pod: str, up: bool) -> dict[str, object]:
    return {
        "labels": {"pod": pod, "mlops_platform_component": "predictor"},
        "health": "up" if up else "down",
        "lastError": "" if up else 'Get "http://10.0.0.9:8082/metrics": connection refused',
        "lastScrape": "2026-03-01T11:59:50Z",
        "scrapePool": "serviceMonitor/ml/bert/0",
    }


RULES = [
    _rule("InferenceServiceHighLatency", "pending", "warning", "2.5"),
    _rule("InferenceServiceNoReadyReplica", "inactive"),
    _rule("InferenceServiceHighErrorRatio", "firing", value="0.4"),
]
TARGETS = [_target("bert-predictor-b", False), _target("bert-predictor-a", True)]


def test_firing_alerts_come_first_then_pending_then_inactive_and_targets_by_pod() -> None:
    h = health.to_report("monitoring/prometheus-operated:9090", GROUP, RULES, TARGETS)
    assert h.loaded and not h.error
    assert [(a.name, a.state) for a in h.alerts] == [
        ("InferenceServiceHighErrorRatio", "firing"),
        ("InferenceServiceHighLatency", "pending"),
        ("InferenceServiceNoReadyReplica", "inactive"),
    ]
    first = h.alerts[0]
    assert (first.severity, first.value, first.summary) == (
        "critical",
        "0.4",
        "InferenceServiceHighErrorRatio summary",
    )
    assert first.since.startswith("2026-03-01T11:58:00")
    assert [a.name for a in h.firing] == ["InferenceServiceHighErrorRatio"]
    assert [(t.pod, t.health, t.component) for t in h.targets] == [
        ("bert-predictor-a", "up", "predictor"),
        ("bert-predictor-b", "down", "predictor"),
    ]
    assert "connection refused" in h.targets[1].last_error


def test_a_group_prometheus_has_not_loaded_is_said() -> None:
    h = health.to_report("monitoring/prometheus-operated:9090", GROUP, None, [])
    assert not h.loaded and h.alerts == () and h.targets == ()


def _report(h: why.report.HealthReport | None) -> why.Report:
    snap = why.Snapshot(raw=manifest("bert", namespace="ml"))
    return why.analyze(snap, now=NOW, health=h)


def test_the_text_shows_the_firing_alert_and_each_target() -> None:
    text = why.render_text(
        _report(health.to_report("monitoring/prometheus-operated:9090", GROUP, RULES, TARGETS))
    )
    part = text[text.index("Monitoring") :]
    assert f"(Prometheus monitoring/prometheus-operated:9090, rule group {GROUP})" in part
    assert "InferenceServiceHighErrorRatio  firing" in part
    assert "targets: 1 of 2 up" in part
    assert "bert-predictor-b  down" in part and "connection refused" in part


def test_an_unreadable_prometheus_is_said_and_a_report_without_monitoring_has_no_part() -> None:
    unreadable = why.report.HealthReport(
        "monitoring/prometheus-operated:9090",
        GROUP,
        loaded=False,
        error="503 ServiceUnavailable: no endpoints",
    )
    assert "Prometheus not readable: 503 ServiceUnavailable: no endpoints" in why.render_text(
        _report(unreadable)
    )
    assert "Monitoring" not in why.render_text(_report(None))
    assert why.to_json(_report(None))["health"] is None


def test_the_json_holds_every_alert_and_target() -> None:
    out = why.to_json(_report(health.to_report("monitoring/prometheus-operated:9090", GROUP, RULES, TARGETS)))
    assert json.loads(json.dumps(out)) == out
    h = out["health"]
    assert (h["group"], h["loaded"], h["error"]) == (GROUP, True, None)
    assert [a["state"] for a in h["alerts"]] == ["firing", "pending", "inactive"]
    assert set(h["targets"][0]) == {"pod", "component", "health", "lastError", "lastScrape"}


def test_a_prometheus_is_named_namespace_service_port() -> None:
    assert promapi.parse("obs/prom:9091") == promapi.Server("obs", "prom", 9091)
    for bad in ("prom:9090", "obs/prom", "obs/prom:0", "obs/prom:70000", "Obs/prom:9090"):
        with pytest.raises(ValueError, match="NAMESPACE/SERVICE:PORT"):
            promapi.parse(bad)
    path = promapi.DEFAULT.path("/api/v1/query", query='up{job="a b"}')
    assert path == (
        "/api/v1/namespaces/monitoring/services/http:prometheus-operated:9090/proxy/api/v1/query"
        "?query=up%7Bjob%3D%22a+b%22%7D"
    )
    assert promapi.read_rule()["resourceNames"] == ["http:prometheus-operated:9090"]
