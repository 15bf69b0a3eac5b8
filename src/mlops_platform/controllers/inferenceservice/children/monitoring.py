"""Monitoring children: a PrometheusRule with the alerts that matter for inference, and a
ServiceMonitor scraping the model server (both ``monitoring.coreos.com/v1``, optional kinds).

Contract (pure builders):
- desired when monitoring is on for the InferenceService (v1 ``spec.monitoring.enabled``; v1alpha1
  and v1beta1 ``spec.extensions.monitoring.enabled``; else the operator default, on) — and, for the
  ServiceMonitor, when the runtime exports metrics (a ``metrics`` port and a metrics path in the
  runtime table);
- one of each per InferenceService, named ``<name>``, labelled like every child plus the operator's
  ``monitoring_labels`` (what the Prometheus ``ruleSelector`` / ``serviceMonitorSelector`` need);
- the ServiceMonitor selects the Services of every component (``mlops.platform/inferenceservice``)
  in the InferenceService's namespace, scrapes their ``metrics`` port at the runtime's path, and
  copies the ``mlops.platform/inferenceservice`` and ``mlops.platform/component`` pod labels onto
  every series: the alert expressions (:mod:`..alerts`) select on them;
- while a canary runs (``target.component_named(labels.CANARY)``) the PrometheusRule also holds
  the canary alert (:data:`alert_settings.CANARY_ALERTS`, naming the candidate's model URI); without one
  it is exactly the rule of the predictor alone;
- the request alerts follow the runtime's ``metricsDialect``; a runtime of dialect ``none`` gets
  the replica alerts only, and the condition says so (``True/ReplicaAlertsOnly``);
- both report to ``MonitoringReady`` (not gating ``Ready``): True when present or turned off,
  False ``CRDNotInstalled`` while the Prometheus Operator's CRDs are absent (set by the reconciler).
"""

from __future__ import annotations

import dataclasses

from mlops_platform.controllers.inferenceservice import alert_queries, alert_settings, alerts, labels
from mlops_platform.controllers.inferenceservice.children import base, deployment, service
from mlops_platform.runtime.caching import kinds

CONDITION = "MonitoringReady"
GROUP = "monitoring.coreos.com"
PROMETHEUS_RULE = kinds.Kind(GROUP, "PrometheusRule", "prometheusrules", ("v1",), optional=True)
SERVICE_MONITOR = kinds.Kind(GROUP, "ServiceMonitor", "servicemonitors", ("v1",), optional=True)


name = base.service_name


def enabled(target: base.Target, ctx: base.BuildContext) -> bool:
    return base.enabled(target.isvc.monitoring.enabled, ctx.monitoring)


def settings(target: base.Target, ctx: base.BuildContext) -> alert_settings.AlertSettings:
    """The operator's alert defaults with this InferenceService's overrides."""
    o, d = target.isvc.monitoring.alerts, ctx.alerts
    return dataclasses.replace(
        d,
        error_ratio=d.error_ratio if o.error_ratio is None else o.error_ratio,
        latency_seconds=d.latency_seconds if o.latency_seconds is None else o.latency_seconds,
        for_=d.for_ if o.for_ is None else o.for_,
        below_min_for=d.below_min_for if o.below_min_for is None else o.below_min_for,
    )


def request_alerts(target: base.Target, ctx: base.BuildContext) -> bool:
    """Whether the runtime's metrics dialect gives request alerts (not ``none``)."""
    return ctx.server(target.isvc).metrics_dialect != alert_queries.NO_REQUEST_METRICS


def build_rule(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    if not enabled(target, ctx):
        return None
    isvc = target.isvc
    canary = target.component_named(labels.CANARY)
    groups = alerts.rule_groups(
        name=isvc.name,
        namespace=isvc.namespace,
        framework=isvc.framework,
        dialect=ctx.server(isvc).metrics_dialect,
        deployment=deployment.name(target),
        min_replicas=isvc.min_replicas,
        settings=settings(target, ctx),
        canary_model_uri=None if canary is None else canary.model_uri,
    )
    return {
        "apiVersion": PROMETHEUS_RULE.resource().api_version,
        "kind": PROMETHEUS_RULE.kind,
        "metadata": _metadata(target, ctx),
        "spec": {"groups": groups},
    }


def build_monitor(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    rt = ctx.server(target.isvc)
    if not enabled(target, ctx) or rt.metrics_path is None or service.METRICS_PORT not in rt.ports:
        return None
    isvc = target.isvc
    return {
        "apiVersion": SERVICE_MONITOR.resource().api_version,
        "kind": SERVICE_MONITOR.kind,
        "metadata": _metadata(target, ctx),
        "spec": {
            "selector": {
                "matchLabels": {**labels.service_selector(isvc), labels.K8S_MANAGED_BY: labels.MANAGER}
            },
            "namespaceSelector": {"matchNames": [isvc.namespace]},
            "endpoints": [
                {
                    "port": service.METRICS_PORT,
                    "path": rt.metrics_path,
                    "interval": ctx.scrape_interval,
                    "scheme": "http",
                }
            ],
            "podTargetLabels": [labels.INFERENCESERVICE, labels.COMPONENT],
        },
    }


def _metadata(target: base.Target, ctx: base.BuildContext) -> base.Obj:
    return base.metadata(target, ctx, name(target), extra_labels=ctx.monitoring_labels, per_component=False)


def _condition(kind: kinds.Kind) -> base.ConditionFn:
    def condition(
        target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
    ) -> base.ChildCondition:
        if desired is None:
            if target.isvc.monitoring.enabled is False:
                # the field as the stored version (v1) spells it, like every status message
                why = "monitoring is turned off for this InferenceService (spec.monitoring.enabled)"
            elif not enabled(target, ctx):
                why = "monitoring is turned off by the operator's default (--no-monitoring)"
            else:
                why = f"no {kind.kind}: the runtime exports no metrics"
            return base.ChildCondition(CONDITION, "True", "MonitoringDisabled", why)
        if live is None:
            return base.not_found(CONDITION, kind, name(target))
        if kind is PROMETHEUS_RULE and not request_alerts(target, ctx):
            why = (
                f"{kind.kind} {name(target)} applied with the replica alerts only: runtime "
                f"{target.isvc.framework!r} has metricsDialect {alert_queries.NO_REQUEST_METRICS} in the "
                "runtime table, so there are no request alerts (error ratio, latency, canary)"
            )
            return base.ChildCondition(CONDITION, "True", "ReplicaAlertsOnly", why)
        return base.ChildCondition(
            CONDITION, "True", "MonitoringConfigured", f"{kind.kind} {name(target)} applied"
        )

    return condition


RBAC = [
    base.child_rbac(
        kind, why=f"the {kind.kind}: watched (owns, while its CRD exists), applied, repaired, deleted"
    )
    for kind in (PROMETHEUS_RULE, SERVICE_MONITOR)
]
RULE = base.Child(
    "prometheusrule",
    PROMETHEUS_RULE,
    CONDITION,
    name,
    build_rule,
    _condition(PROMETHEUS_RULE),
    serving=False,
    per_component=False,
)
MONITOR = base.Child(
    "servicemonitor",
    SERVICE_MONITOR,
    CONDITION,
    name,
    build_monitor,
    _condition(SERVICE_MONITOR),
    serving=False,
    per_component=False,
)
