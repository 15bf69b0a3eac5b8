"""The Prometheus alert rules of one InferenceService (pure: no I/O, no API types).

Contract:
- :func:`rule_groups` gives the ``spec.groups`` of the InferenceService's PrometheusRule: one group,
  ``mlops-platform.<namespace>.<name>``, with the alerts of :data:`ALERTS` (names are stable):

  ``InferenceServiceNoReadyReplica``
      no available replica while the Deployment wants some (omitted when ``minReplicas`` is 0);
  ``InferenceServiceBelowMinReplicas``
      some, but fewer than ``minReplicas``, available for ``below_min_for`` (omitted when
      ``minReplicas`` <= 1: below 1 is "no replica", the alert above);
  ``InferenceServiceHighErrorRatio``
      failed / all inference requests over ``rate_window`` above ``error_ratio``;
  ``InferenceServiceHighLatency``
      request latency above ``latency_seconds`` (the mean; for MLServer also the REST p95);
  ``InferenceServiceCanaryErrorRatioAboveStable``
      only while a canary runs (``canary_model_uri``): the canary's error ratio above the stable
      predictor's plus ``canary_error_margin``, while the canary receives requests (see
      :func:`_canary_rules`). Without a canary the group is exactly the four alerts above.

- The request alerts come from the runtime's metrics dialect (:data:`SERVERS`, the runtime table's
  ``metricsDialect``); a runtime of dialect :data:`NO_REQUEST_METRICS` gets the replica alerts
  only (the monitoring child's condition says so).
- Replica alerts read kube-state-metrics (``kube_deployment_status_replicas_available``,
  ``kube_deployment_spec_replicas``) by ``namespace`` and ``deployment``. Request alerts read each
  model server's own metrics (names verified at the pinned releases' sources, ``docs/monitoring.md``)
  by ``namespace`` and ``mlops_platform_inferenceservice`` (the ServiceMonitor copies the pod label
  ``mlops.platform/inferenceservice`` onto every series), summed over components and models; the
  canary alert also by ``mlops_platform_component`` (``canary`` against ``predictor``).
- Every alert carries the labels ``severity``, ``namespace``, ``inferenceservice`` and
  ``framework`` (replica alerts also ``deployment``) and the annotations ``summary`` and
  ``description`` (``runbook_url`` too when :attr:`AlertSettings.runbook_base_url` is set).
- The alerts' names, labels and :class:`AlertSettings` are in
  :mod:`~mlops_platform.controllers.inferenceservice.alert_settings`, the request expressions per
  metrics dialect in :mod:`~mlops_platform.controllers.inferenceservice.alert_queries`; this module
  writes the rules.
- :class:`AlertSettings` validates itself (``ValueError`` naming the setting); a user's overrides
  are validated where they are decoded (``v1alpha1``: ``spec.extensions.monitoring.alerts``, with
  the same duration grammar, :data:`internal.DURATION_PATTERN`) and merged by the monitoring child.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mlops_platform.controllers.inferenceservice import alert_queries, alert_settings
from mlops_platform.runtime.objects import Obj

# -- rules -----------------------------------------------------------------------------------------


def request_query(namespace: str, name: str, window: str = "1m") -> alert_queries.Query:
    """The series of one InferenceService's model-server metrics (``SERVERS[...].requests(...)``
    gives its request rate: what a KEDA trigger scales on)."""
    return alert_queries.Query(
        alert_queries.selector(namespace=namespace, **{alert_settings.ISVC_LABEL: name})[1:-1], window
    )


def group_name(namespace: str, name: str) -> str:
    return f"mlops-platform.{namespace}.{name}"


def rule_groups(
    *,
    name: str,
    namespace: str,
    framework: str,
    deployment: str,
    min_replicas: int,
    settings: alert_settings.AlertSettings,
    canary_model_uri: str | None = None,
    dialect: str | None = None,
) -> list[dict[str, Any]]:
    """The PrometheusRule ``spec.groups`` for one InferenceService (pure); ``canary_model_uri``:
    the candidate's model while a canary runs (adds :data:`CANARY_ALERTS`), else None.

    ``framework`` is the runtime's name (the ``framework`` label); ``dialect`` whose request metrics
    it exports (a key of :data:`SERVERS`, default ``framework``). With :data:`NO_REQUEST_METRICS` the
    group holds only the replica alerts: no request alert (error ratio, latency, canary) can be
    written without the server's metrics, and one over metrics that do not exist never fires."""
    dialect = framework if dialect is None else dialect
    server = alert_queries.SERVERS.get(dialect)
    if server is None and dialect != alert_queries.NO_REQUEST_METRICS:
        known = ", ".join([*sorted(alert_queries.SERVERS), alert_queries.NO_REQUEST_METRICS])
        raise ValueError(f"dialect: unknown {dialect!r} (expected one of {known})")
    if min_replicas < 0:
        raise ValueError(f"min_replicas: must be >= 0, got {min_replicas}")
    ctx = _RuleContext(
        who=f"InferenceService {namespace}/{name}",
        labels={"namespace": namespace, "inferenceservice": name, "framework": framework},
        settings=settings,
    )
    rules = _replica_rules(ctx, namespace, deployment, min_replicas)
    if server is None:
        return [{"name": group_name(namespace, name), "rules": rules}]
    query = request_query(namespace, name, settings.rate_window)
    rules += _request_rules(ctx, server, query)
    if canary_model_uri is not None:
        rules += _canary_rules(ctx, server, query, canary_model_uri)
    return [{"name": group_name(namespace, name), "rules": rules}]


@dataclasses.dataclass(frozen=True, slots=True)
class _RuleContext:
    who: str
    labels: Mapping[str, str]
    settings: alert_settings.AlertSettings

    def rule(self, alert: str, expr: str, for_: str, severity: str, summary: str, description: str) -> Obj:
        annotations = {"summary": summary, "description": description}
        if self.settings.runbook_base_url:
            annotations["runbook_url"] = f"{self.settings.runbook_base_url}#{alert.lower()}"
        return {
            "alert": alert,
            "expr": expr,
            "for": for_,
            "labels": {"severity": severity, **self.labels},
            "annotations": annotations,
        }


def _replica_rules(ctx: _RuleContext, namespace: str, deployment: str, min_replicas: int) -> list[Obj]:
    """No ready replica (minReplicas > 0) and fewer than minReplicas (minReplicas > 1)."""
    ksm = alert_queries.selector(namespace=namespace, deployment=deployment)
    # max by: one series per Deployment even when several kube-state-metrics replicas are scraped
    available = f"max by (namespace, deployment) (kube_deployment_status_replicas_available{ksm})"
    wanted = f"max by (namespace, deployment) (kube_deployment_spec_replicas{ksm})"
    s = ctx.settings
    rules: list[Obj] = []
    if min_replicas > 0:
        rules.append(
            ctx.rule(
                alert_settings.NO_READY_REPLICA,
                f"({available} == 0) and on (namespace, deployment) ({wanted} > 0)",
                s.for_,
                "critical",
                f"{ctx.who} has no ready replica",
                f"Deployment {deployment} has had no available replica for {s.for_} "
                f"(minReplicas {min_replicas}): the model is not being served.",
            )
        )
    if min_replicas > 1:
        rules.append(
            ctx.rule(
                alert_settings.BELOW_MIN_REPLICAS,
                f"({available} < {min_replicas}) > 0",
                s.below_min_for,
                "warning",
                f"{ctx.who} has fewer ready replicas than minReplicas",
                f"Deployment {deployment} has had {{{{ $value }}}} available replica(s), fewer than "
                f"minReplicas {min_replicas}, for {s.below_min_for}.",
            )
        )
    return rules


def _request_rules(ctx: _RuleContext, server: alert_queries.Server, q: alert_queries.Query) -> list[Obj]:
    """Error ratio and latency, from the model server's own metrics."""
    s = ctx.settings
    percent = f"{s.error_ratio * 100:g}%"
    return [
        ctx.rule(
            alert_settings.HIGH_ERROR_RATIO,
            f"{server.errors(q)} > {alert_queries.num(s.error_ratio)}",
            s.for_,
            "critical",
            f"{ctx.who} fails too many inference requests",
            f"{{{{ $value | humanizePercentage }}}} of the inference requests to {server.software} failed "
            f"over {s.rate_window} (threshold {percent}, for {s.for_}).",
        ),
        ctx.rule(
            alert_settings.HIGH_LATENCY,
            server.latency(q, s.latency_seconds, s.latency_quantile),
            s.for_,
            "warning",
            f"{ctx.who} answers inference requests slowly",
            f"{server.software} request latency is {{{{ $value | humanizeDuration }}}} over "
            f"{s.rate_window} (threshold {s.latency_seconds:g}s, for {s.for_}).",
        ),
    ]


def _literal(text: str) -> str:
    """``text`` as literal alert-template text: ``{{`` (e.g. in a model URI) opens no action."""
    return text.replace("{{", '{{ "{{" }}')


def _canary_rules(
    ctx: _RuleContext, server: alert_queries.Server, q: alert_queries.Query, model_uri: str
) -> list[Obj]:
    """The canary's error ratio above the stable's, from the same per-server ratio as
    ``InferenceServiceHighErrorRatio`` restricted to ``component="canary"`` / ``"predictor"``::

        canary_ratio > ((stable_ratio >= 0) or vector(0)) + margin
          and canary_requests > 0

    - The margin is **additive** (``canary_error_margin``, default 0.01: one percentage point
      over the stable's), not a multiple of the stable's ratio. A multiple says nothing when the
      stable fails 0% (the common case: 2x0 = 0 needs an extra absolute floor, so two settings),
      and at a few percent it is blind to what matters (3% -> 5.9% is "under 2x"). Because the
      stable's ratio is >= 0, the margin is also the absolute floor: a canary below 1% never fires.
      1 point is well below ``error_ratio`` (5%): the canary is caught regressing while it serves
      a small share, long before the whole service's ratio pages.
    - The stable's ratio counts as 0 when it has no value: MLServer and TorchServe create their
      failure series at the first failure (a stable that never failed has none), and a stable with
      no requests in the window has no baseline (``>= 0`` drops the 0/0 NaN). The canary must then
      stay under the margin alone.
    - Only while the canary receives requests (``canary_requests > 0``): without traffic its ratio
      is 0/0 or absent and nothing fires. For ``for`` like the other request alerts; severity
      warning: the stable still serves, the action is to roll the candidate back.
    """
    s = ctx.settings
    canary, stable = (
        q.component(alert_settings.CANARY_COMPONENT),
        q.component(alert_settings.STABLE_COMPONENT),
    )
    baseline = server.error_baseline(stable)
    expr = (
        f"({server.errors(canary)} > ({baseline}) + {alert_queries.num(s.canary_error_margin)})"
        f" and ({server.requests(canary)} > 0)"
    )
    margin = s.canary_error_margin * 100
    points = f"{margin:g} percentage point{'' if margin == 1 else 's'}"
    uri = _literal(model_uri)
    return [
        ctx.rule(
            alert_settings.CANARY_ERROR_RATIO,
            expr,
            s.for_,
            "warning",
            f"{ctx.who}: canary {uri} fails more inference requests than the stable predictor",
            f"The canary ({uri}) failed {{{{ $value | humanizePercentage }}}} of its inference requests "
            f"to {server.software} over {s.rate_window}, more than {points} above the stable "
            f"predictor's error ratio, for {s.for_}: consider rolling the canary back.",
        )
    ]
