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
- :class:`AlertSettings` validates itself (``ValueError`` naming the setting); a user's overrides
  are validated where they are decoded (``v1alpha1``: ``spec.extensions.monitoring.alerts``, with
  the same duration grammar, :data:`internal.DURATION_PATTERN`) and merged by the monitoring child.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from mlops_platform.api import internal
from mlops_platform.runtime.objects import Obj

NO_READY_REPLICA = "InferenceServiceNoReadyReplica"
BELOW_MIN_REPLICAS = "InferenceServiceBelowMinReplicas"
HIGH_ERROR_RATIO = "InferenceServiceHighErrorRatio"
HIGH_LATENCY = "InferenceServiceHighLatency"
ALERTS = (NO_READY_REPLICA, BELOW_MIN_REPLICAS, HIGH_ERROR_RATIO, HIGH_LATENCY)
CANARY_ERROR_RATIO = "InferenceServiceCanaryErrorRatioAboveStable"
#: the alerts added while a canary runs (after :data:`ALERTS`)
CANARY_ALERTS = (CANARY_ERROR_RATIO,)

#: Prometheus label names of the pod labels the ServiceMonitor copies (``podTargetLabels``).
ISVC_LABEL = "mlops_platform_inferenceservice"
COMPONENT_LABEL = "mlops_platform_component"
#: values of :data:`COMPONENT_LABEL` (the ``mlops.platform/component`` pod label, ``labels``)
STABLE_COMPONENT = "predictor"
CANARY_COMPONENT = "canary"

DURATION_PATTERN = internal.DURATION_PATTERN
_DURATION = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)  # y w d h m s ms


def parse_duration(text: object) -> float:
    """Seconds in a Prometheus duration (``90s``, ``1h30m``, ``0``); ``ValueError`` if it is not one."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) and text else None
    if match is None:
        raise ValueError(f"must be a Prometheus duration such as 30s, 5m or 1h30m, got {text!r}")
    amounts = match.groups()[2::2]  # the digits of each unit
    return float(sum(int(n) * unit for n, unit in zip(amounts, _UNIT_SECONDS, strict=True) if n))


def _number(value: object) -> float | None:
    """``value`` as a finite float, None when it is not a number (bools are not)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _check_ratio(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and 0 < x <= 1 else f"must be a number in (0, 1], got {value!r}"


def _check_seconds(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and x > 0 else f"must be a number of seconds > 0, got {value!r}"


def _check_quantile(value: object) -> str | None:
    x = _number(value)
    return None if x is not None and 0 < x < 1 else f"must be a number in (0, 1), got {value!r}"


def _check_duration(value: object) -> str | None:
    try:
        parse_duration(value)
    except ValueError as e:
        return str(e)
    return None


def _check_window(value: object) -> str | None:
    error = _check_duration(value)
    if error is None and parse_duration(value) == 0:
        return f"must be a duration > 0, got {value!r}"
    return error


def _check_url(value: object) -> str | None:
    if value is None or (isinstance(value, str) and re.fullmatch(r"https?://\S+", value)):
        return None
    return f"must be an http(s) URL, got {value!r}"


@dataclasses.dataclass(frozen=True, slots=True)
class AlertSettings:
    """Thresholds of the alerts (operator defaults, overridden per InferenceService)."""

    error_ratio: float = 0.05
    """Fraction of failed inference requests, 0 < x <= 1."""
    latency_seconds: float = 1.0
    """Request latency: the mean, and for MLServer's REST histogram the ``latency_quantile``."""
    for_: str = "5m"
    """How long a request or no-replica condition must hold (Prometheus duration)."""
    below_min_for: str = "15m"
    """How long fewer than ``minReplicas`` (but some) replicas must be available."""
    rate_window: str = "5m"
    """The ``rate()`` range: at least 4 scrape intervals (the ServiceMonitor scrapes every 30s)."""
    latency_quantile: float = 0.95
    """The quantile compared with ``latency_seconds`` where a server exports a histogram."""
    runbook_base_url: str | None = None
    """Where ``docs/monitoring.md`` is served; alerts then get ``runbook_url: <base>#<alert>``."""
    canary_error_margin: float = 0.01
    """How far (absolute, 0 < x <= 1) the canary's error ratio must exceed the stable's: the
    default 0.01 is one percentage point (see :func:`_canary_rules` for why additive)."""

    def __post_init__(self) -> None:
        for field, check in _FIELD_CHECKS.items():
            error = check(getattr(self, field))
            if error is not None:
                raise ValueError(f"AlertSettings.{field}: {error}")


_FIELD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "error_ratio": _check_ratio,
    "latency_seconds": _check_seconds,
    "for_": _check_duration,
    "below_min_for": _check_duration,
    "rate_window": _check_window,
    "latency_quantile": _check_quantile,
    "runbook_base_url": _check_url,
    "canary_error_margin": _check_ratio,
}
#: The user-facing keys (camelCase, as in a manifest) and the fields they set.
# -- expressions -----------------------------------------------------------------------------------


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _selector(**matchers: str) -> str:
    return "{" + ", ".join(f"{k}={_quote(v)}" for k, v in matchers.items()) + "}"


def _num(value: float) -> str:
    return repr(float(value))


@dataclasses.dataclass(frozen=True, slots=True)
class _Query:
    """What the request alerts need of one model server; ``sel`` is the series selector body."""

    sel: str
    window: str

    def rate(self, metric: str, extra: str = "") -> str:
        inner = self.sel if not extra else f"{self.sel}, {extra}"
        return f"rate({metric}{{{inner}}}[{self.window}])"

    def sum_rate(self, metric: str, extra: str = "") -> str:
        return f"sum({self.rate(metric, extra)})"


def _ratio(failed: str, succeeded: str) -> str:
    """failed / (failed + succeeded), where a success counter that is absent (no request has
    succeeded yet: 100% failures) counts as 0, and no request at all gives no value (0/0)."""
    return f"{failed} / ({failed} + ({succeeded} or vector(0)))"


def _requests(failed: str, succeeded: str) -> str:
    """Requests per second: failed + succeeded (an absent success counter counts as 0)."""
    return f"({failed} + ({succeeded} or vector(0)))"


@dataclasses.dataclass(frozen=True, slots=True)
class _Server:
    """Per-framework expressions. ``errors`` yields the failed fraction (no value without traffic);
    ``requests`` the request rate the fraction is of; ``latency`` yields a full comparison with the
    threshold (seconds)."""

    software: str
    errors: Callable[[_Query], str]
    requests: Callable[[_Query], str]
    latency: Callable[[_Query, float, float], str]
    error_metrics: str
    latency_metrics: str


def _triton_errors(q: _Query) -> str:
    return _ratio(q.sum_rate("nv_inference_request_failure"), q.sum_rate("nv_inference_request_success"))


def _triton_requests(q: _Query) -> str:
    return _requests(q.sum_rate("nv_inference_request_failure"), q.sum_rate("nv_inference_request_success"))


def _triton_latency(q: _Query, threshold: float, _quantile: float) -> str:
    # Counters only by default (summaries and histograms are opt-in --metrics-config flags);
    # the duration counter adds up successful requests, so divide by the success count.
    mean = f"{q.sum_rate('nv_inference_request_duration_us')} / {q.sum_rate('nv_inference_request_success')}"
    return f"{mean} / 1e6 > {_num(threshold)}"


def _mlserver_errors(q: _Query) -> str:
    return _ratio(
        q.sum_rate("model_infer_request_failure_total"), q.sum_rate("model_infer_request_success_total")
    )


def _mlserver_requests(q: _Query) -> str:
    return _requests(
        q.sum_rate("model_infer_request_failure_total"), q.sum_rate("model_infer_request_success_total")
    )


_MLSERVER_INFER_PATHS = 'path=~"/v2/models/.+/(infer|generate)"'


def _mlserver_latency(q: _Query, threshold: float, quantile: float) -> str:
    # REST requests have a histogram (starlette-exporter); gRPC ones only the data plane's summary
    # (REST and gRPC, failures included): alert when either the REST quantile or the mean is high.
    buckets = f"sum by (le) ({q.rate('rest_server_request_duration_seconds_bucket', _MLSERVER_INFER_PATHS)})"
    p = f"histogram_quantile({_num(quantile)}, {buckets})"
    summary = "model_infer_request_duration"
    mean = f"{q.sum_rate(summary + '_sum')} / {q.sum_rate(summary + '_count')}"
    return f"({p} > {_num(threshold)}) or ({mean} > {_num(threshold)})"


def _torchserve_errors(q: _Query) -> str:
    # No per-model failure counter: Requests5XX counts every 5xx answer of the server (inference
    # API); ts_inference_requests_total every inference request. Capped at 1, none without traffic.
    total = f"({q.sum_rate('ts_inference_requests_total')} > 0)"
    return f"clamp_max({q.sum_rate('Requests5XX')} / {total}, 1)"


def _torchserve_requests(q: _Query) -> str:
    return q.sum_rate("ts_inference_requests_total")


def _torchserve_latency(q: _Query, threshold: float, _quantile: float) -> str:
    # ts_inference_latency_microseconds adds up answered requests; there is no success counter,
    # so the mean is over all requests (failed ones add no time: it under-reads while they fail).
    mean = f"{q.sum_rate('ts_inference_latency_microseconds')} / {q.sum_rate('ts_inference_requests_total')}"
    return f"{mean} / 1e6 > {_num(threshold)}"


#: the metrics dialect of a runtime without request metrics the operator knows (``servers``' ``none``)
NO_REQUEST_METRICS = "none"
#: the request expressions per metrics dialect (``ServingRuntime.metrics_dialect``, the runtime table)
SERVERS: Mapping[str, _Server] = {
    "triton": _Server(
        "Triton",
        _triton_errors,
        _triton_requests,
        _triton_latency,
        "nv_inference_request_failure / (success + failure)",
        "nv_inference_request_duration_us / nv_inference_request_success",
    ),
    "seldon": _Server(
        "MLServer",
        _mlserver_errors,
        _mlserver_requests,
        _mlserver_latency,
        "model_infer_request_failure_total / (success + failure)",
        "REST p95 of rest_server_request_duration_seconds, or the mean of model_infer_request_duration",
    ),
    "torchserve": _Server(
        "TorchServe",
        _torchserve_errors,
        _torchserve_requests,
        _torchserve_latency,
        "Requests5XX / ts_inference_requests_total",
        "ts_inference_latency_microseconds / ts_inference_requests_total",
    ),
}


# -- rules -----------------------------------------------------------------------------------------


def request_query(namespace: str, name: str, window: str = "1m") -> _Query:
    """The series of one InferenceService's model-server metrics (``SERVERS[...].requests(...)``
    gives its request rate: what a KEDA trigger scales on)."""
    return _Query(_selector(namespace=namespace, **{ISVC_LABEL: name})[1:-1], window)


def group_name(namespace: str, name: str) -> str:
    return f"mlops-platform.{namespace}.{name}"


def rule_groups(
    *,
    name: str,
    namespace: str,
    framework: str,
    deployment: str,
    min_replicas: int,
    settings: AlertSettings,
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
    server = SERVERS.get(dialect)
    if server is None and dialect != NO_REQUEST_METRICS:
        known = ", ".join([*sorted(SERVERS), NO_REQUEST_METRICS])
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
    query = _Query(_selector(namespace=namespace, **{ISVC_LABEL: name})[1:-1], settings.rate_window)
    rules += _request_rules(ctx, server, query)
    if canary_model_uri is not None:
        rules += _canary_rules(ctx, server, query, canary_model_uri)
    return [{"name": group_name(namespace, name), "rules": rules}]


@dataclasses.dataclass(frozen=True, slots=True)
class _RuleContext:
    who: str
    labels: Mapping[str, str]
    settings: AlertSettings

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
    ksm = _selector(namespace=namespace, deployment=deployment)
    # max by: one series per Deployment even when several kube-state-metrics replicas are scraped
    available = f"max by (namespace, deployment) (kube_deployment_status_replicas_available{ksm})"
    wanted = f"max by (namespace, deployment) (kube_deployment_spec_replicas{ksm})"
    s = ctx.settings
    rules: list[Obj] = []
    if min_replicas > 0:
        rules.append(
            ctx.rule(
                NO_READY_REPLICA,
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
                BELOW_MIN_REPLICAS,
                f"({available} < {min_replicas}) > 0",
                s.below_min_for,
                "warning",
                f"{ctx.who} has fewer ready replicas than minReplicas",
                f"Deployment {deployment} has had {{{{ $value }}}} available replica(s), fewer than "
                f"minReplicas {min_replicas}, for {s.below_min_for}.",
            )
        )
    return rules


def _request_rules(ctx: _RuleContext, server: _Server, q: _Query) -> list[Obj]:
    """Error ratio and latency, from the model server's own metrics."""
    s = ctx.settings
    percent = f"{s.error_ratio * 100:g}%"
    return [
        ctx.rule(
            HIGH_ERROR_RATIO,
            f"{server.errors(q)} > {_num(s.error_ratio)}",
            s.for_,
            "critical",
            f"{ctx.who} fails too many inference requests",
            f"{{{{ $value | humanizePercentage }}}} of the inference requests to {server.software} failed "
            f"over {s.rate_window} (threshold {percent}, for {s.for_}).",
        ),
        ctx.rule(
            HIGH_LATENCY,
            server.latency(q, s.latency_seconds, s.latency_quantile),
            s.for_,
            "warning",
            f"{ctx.who} answers inference requests slowly",
            f"{server.software} request latency is {{{{ $value | humanizeDuration }}}} over "
            f"{s.rate_window} (threshold {s.latency_seconds:g}s, for {s.for_}).",
        ),
    ]


def _of(q: _Query, component: str) -> _Query:
    """``q`` restricted to one component's series."""
    return dataclasses.replace(q, sel=f"{q.sel}, {COMPONENT_LABEL}={_quote(component)}")


def _literal(text: str) -> str:
    """``text`` as literal alert-template text: ``{{`` (e.g. in a model URI) opens no action."""
    return text.replace("{{", '{{ "{{" }}')


def _canary_rules(ctx: _RuleContext, server: _Server, q: _Query, model_uri: str) -> list[Obj]:
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
    canary, stable = _of(q, CANARY_COMPONENT), _of(q, STABLE_COMPONENT)
    baseline = f"(({server.errors(stable)}) >= 0) or vector(0)"
    expr = (
        f"({server.errors(canary)} > ({baseline}) + {_num(s.canary_error_margin)})"
        f" and ({server.requests(canary)} > 0)"
    )
    margin = s.canary_error_margin * 100
    points = f"{margin:g} percentage point{'' if margin == 1 else 's'}"
    uri = _literal(model_uri)
    return [
        ctx.rule(
            CANARY_ERROR_RATIO,
            expr,
            s.for_,
            "warning",
            f"{ctx.who}: canary {uri} fails more inference requests than the stable predictor",
            f"The canary ({uri}) failed {{{{ $value | humanizePercentage }}}} of its inference requests "
            f"to {server.software} over {s.rate_window}, more than {points} above the stable "
            f"predictor's error ratio, for {s.for_}: consider rolling the canary back.",
        )
    ]
