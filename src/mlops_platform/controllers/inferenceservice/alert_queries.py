"""The PromQL of the request alerts, per model server's metrics dialect (pure): :data:`SERVERS`
maps a dialect (the runtime table's ``metricsDialect``) to a :class:`Server`, whose expressions give
the failed fraction of inference requests (no value without traffic), the request rate, and the
latency values (seconds) with their comparison with a threshold, over the series a :class:`Query`
selects (:meth:`Query.component`: one component's). The metric names are those of the pinned
releases' sources (``docs/monitoring.md``); a dialect of :data:`NO_REQUEST_METRICS` has none.

One source: the PrometheusRule (:mod:`.alerts`), the KEDA trigger (``children.scaledobject``) and the
canary analysis' built-in checks (:mod:`.analysis_queries`) all take their expressions from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from mlops_platform.controllers.inferenceservice import alert_settings


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector(**matchers: str) -> str:
    return "{" + ", ".join(f"{k}={quote(v)}" for k, v in matchers.items()) + "}"


def num(value: float) -> str:
    return repr(float(value))


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """What the request alerts need of one model server; ``sel`` is the series selector body."""

    sel: str
    window: str

    def rate(self, metric: str, extra: str = "") -> str:
        inner = self.sel if not extra else f"{self.sel}, {extra}"
        return f"rate({metric}{{{inner}}}[{self.window}])"

    def sum_rate(self, metric: str, extra: str = "") -> str:
        return f"sum({self.rate(metric, extra)})"

    def component(self, name: str) -> Query:
        """This query restricted to one component's series (``predictor``: the stable model,
        ``canary``: the candidate; the ServiceMonitor copies the pods' component label)."""
        return dataclasses.replace(self, sel=f"{self.sel}, {alert_settings.COMPONENT_LABEL}={quote(name)}")


def _ratio(failed: str, succeeded: str) -> str:
    """failed / (failed + succeeded), where a success counter that is absent (no request has
    succeeded yet: 100% failures) counts as 0, and no request at all gives no value (0/0)."""
    return f"{failed} / ({failed} + ({succeeded} or vector(0)))"


def _requests(failed: str, succeeded: str) -> str:
    """Requests per second: failed + succeeded, either counter absent counting as 0 (a server's
    labelled counter appears with its first increment: MLServer has no failure series until a
    request fails), and no value when both are absent (no server pod exports them: a KEDA trigger
    then falls back to the mesh's count)."""
    return f"(({failed} + {succeeded}) or {succeeded} or {failed})"


@dataclasses.dataclass(frozen=True, slots=True)
class Server:
    """Per-framework expressions. ``errors`` yields the failed fraction (no value without traffic);
    ``requests`` the request rate the fraction is of; ``latencies`` the latency values in seconds
    (one, or several the server measures differently: each alone can be too high), given the
    quantile where the server exports a histogram; :meth:`latency` their comparison with a
    threshold."""

    software: str
    errors: Callable[[Query], str]
    requests: Callable[[Query], str]
    latencies: Callable[[Query, float], tuple[str, ...]]
    error_metrics: str
    latency_metrics: str

    def latency(self, q: Query, threshold: float, quantile: float) -> str:
        """Any latency value above ``threshold`` seconds (the alert's expression)."""
        values = self.latencies(q, quantile)
        if len(values) == 1:
            return f"{values[0]} > {num(threshold)}"
        return " or ".join(f"({v} > {num(threshold)})" for v in values)

    def served_error_ratio(self, q: Query) -> str:
        """The error ratio where requests were served in the window but no failure series exists
        (MLServer and TorchServe create theirs with the first failure: a healthy server has none)
        counts as 0; no request in the window gives no value: the canary candidate's, as an
        analysis judges it."""
        return f"(({self.errors(q)}) >= 0) or (({self.requests(q)}) > 0) * 0"

    def error_baseline(self, q: Query) -> str:
        """The error ratio where a ratio without a value (no failure series yet, or no request in
        the window: 0/0) counts as 0: the stable model's, as a canary is compared with it."""
        return f"(({self.errors(q)}) >= 0) or vector(0)"


def _triton_errors(q: Query) -> str:
    return _ratio(q.sum_rate("nv_inference_request_failure"), q.sum_rate("nv_inference_request_success"))


def _triton_requests(q: Query) -> str:
    return _requests(q.sum_rate("nv_inference_request_failure"), q.sum_rate("nv_inference_request_success"))


def _triton_latencies(q: Query, _quantile: float) -> tuple[str, ...]:
    # Counters only by default (summaries and histograms are opt-in --metrics-config flags);
    # the duration counter adds up successful requests, so divide by the success count.
    mean = f"{q.sum_rate('nv_inference_request_duration_us')} / {q.sum_rate('nv_inference_request_success')}"
    return (f"{mean} / 1e6",)


def _mlserver_errors(q: Query) -> str:
    return _ratio(
        q.sum_rate("model_infer_request_failure_total"), q.sum_rate("model_infer_request_success_total")
    )


def _mlserver_requests(q: Query) -> str:
    return _requests(
        q.sum_rate("model_infer_request_failure_total"), q.sum_rate("model_infer_request_success_total")
    )


_MLSERVER_INFER_PATHS = 'path=~"/v2/models/.+/(infer|generate)"'


def _mlserver_latencies(q: Query, quantile: float) -> tuple[str, ...]:
    # REST requests have a histogram (starlette-exporter); gRPC ones only the data plane's summary
    # (REST and gRPC, failures included): too slow when either the REST quantile or the mean is.
    buckets = f"sum by (le) ({q.rate('rest_server_request_duration_seconds_bucket', _MLSERVER_INFER_PATHS)})"
    p = f"histogram_quantile({num(quantile)}, {buckets})"
    summary = "model_infer_request_duration"
    mean = f"{q.sum_rate(summary + '_sum')} / {q.sum_rate(summary + '_count')}"
    return (p, mean)


def _torchserve_errors(q: Query) -> str:
    # No per-model failure counter: Requests5XX counts every 5xx answer of the server (inference
    # API); ts_inference_requests_total every inference request. Capped at 1, none without traffic.
    total = f"({q.sum_rate('ts_inference_requests_total')} > 0)"
    return f"clamp_max({q.sum_rate('Requests5XX')} / {total}, 1)"


def _torchserve_requests(q: Query) -> str:
    return q.sum_rate("ts_inference_requests_total")


def _torchserve_latencies(q: Query, _quantile: float) -> tuple[str, ...]:
    # ts_inference_latency_microseconds adds up answered requests; there is no success counter,
    # so the mean is over all requests (failed ones add no time: it under-reads while they fail).
    mean = f"{q.sum_rate('ts_inference_latency_microseconds')} / {q.sum_rate('ts_inference_requests_total')}"
    return (f"{mean} / 1e6",)


#: the metrics dialect of a runtime without request metrics the operator knows (``servers``' ``none``)
NO_REQUEST_METRICS = "none"
#: the request expressions per metrics dialect (``ServingRuntime.metrics_dialect``, the runtime table)
SERVERS: Mapping[str, Server] = {
    "triton": Server(
        "Triton",
        _triton_errors,
        _triton_requests,
        _triton_latencies,
        "nv_inference_request_failure / (success + failure)",
        "nv_inference_request_duration_us / nv_inference_request_success",
    ),
    "seldon": Server(
        "MLServer",
        _mlserver_errors,
        _mlserver_requests,
        _mlserver_latencies,
        "model_infer_request_failure_total / (success + failure)",
        "REST p95 of rest_server_request_duration_seconds, or the mean of model_infer_request_duration",
    ),
    "torchserve": Server(
        "TorchServe",
        _torchserve_errors,
        _torchserve_requests,
        _torchserve_latencies,
        "Requests5XX / ts_inference_requests_total",
        "ts_inference_latency_microseconds / ts_inference_requests_total",
    ),
}
