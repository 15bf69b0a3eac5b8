"""The analysis benchmark's synthetic series and its InferenceServices (``bench.analysis``).

The exporter (:class:`Exporter`) stands for the model servers kwok's pods do not run: MLServer's
series for every InferenceService's stable model and candidate, growing at a steady healthy rate
(:data:`TRAFFIC`), for a real Prometheus to scrape (:func:`prometheus_config`). The InferenceServices
(:func:`inference_service`) are the ones the benchmark applies: a canary at 10 %, or moved by an
analysis (:func:`analysis_spec`); :func:`queries_per_measurement` counts the queries one step's
measurement takes, as the operator builds them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

NAMESPACE = "bench-analysis"
#: MLServer's REST histogram (starlette-exporter: prometheus_client's default buckets)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
COMPONENTS = ("predictor", "canary")


# ---------------------------------------------------------------------------------------------------
# the synthetic series
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one component of every InferenceService serves, steadily: requests per second, the share
    that fail, and one latency for all of them (seconds)."""

    per_second: float
    error_ratio: float = 0.002
    latency: float = 0.04

    def counts(self, elapsed: float) -> tuple[float, float]:
        """(succeeded, failed) requests after ``elapsed`` seconds."""
        total = self.per_second * elapsed
        return total * (1 - self.error_ratio), total * self.error_ratio


#: the stable model and the candidate: the same health, so every check passes at every step
TRAFFIC = {"predictor": Traffic(per_second=20.0), "canary": Traffic(per_second=10.0)}


class Exporter:
    """A ``prometheus_client`` collector of MLServer's series for ``names`` in ``namespace`` (module
    doc), their counters ``elapsed()`` seconds into :data:`TRAFFIC`."""

    def __init__(
        self,
        namespace: str,
        names: Sequence[str],
        traffic: Mapping[str, Traffic] = TRAFFIC,
        elapsed: Callable[[], float] | None = None,
    ) -> None:
        start = time.monotonic()
        self.namespace, self.names, self.traffic = namespace, list(names), traffic
        self.elapsed = elapsed or (lambda: time.monotonic() - start)

    def collect(self) -> Iterator[Metric]:
        target = ["namespace", "mlops_platform_inferenceservice", "mlops_platform_component"]
        model = [*target, "model", "version"]
        rest = [*target, "method", "path", "status_code", "app_name"]
        ok = CounterMetricFamily(
            "model_infer_request_success", "Model infer request success count", labels=model
        )
        failed = CounterMetricFamily(
            "model_infer_request_failure", "Model infer request failure count", labels=model
        )
        duration = SummaryMetricFamily(
            "model_infer_request_duration", "Model infer request duration", labels=model
        )
        hist = HistogramMetricFamily(
            "rest_server_request_duration_seconds", "REST request duration", labels=rest
        )
        t = self.elapsed()
        for name in self.names:
            for component, traffic in self.traffic.items():
                labels = [self.namespace, name, component]
                succeeded, failures = traffic.counts(t)
                total = succeeded + failures
                ok.add_metric([*labels, "model", "v1"], succeeded)
                failed.add_metric([*labels, "model", "v1"], failures)
                duration.add_metric(
                    [*labels, "model", "v1"], count_value=int(total), sum_value=total * traffic.latency
                )
                buckets = [(str(le), total if traffic.latency <= le else 0.0) for le in BUCKETS]
                hist.add_metric(
                    [*labels, "POST", "/v2/models/{model_name}/infer", "200", "mlserver"],
                    [*buckets, ("+Inf", total)],
                    sum_value=total * traffic.latency,
                )
        yield from (ok, failed, duration, hist)


def exporter_registry(exporter: Exporter) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return registry


def prometheus_config(exporter_port: int, scrape_interval: float) -> str:
    """Prometheus' configuration: the exporter on 127.0.0.1, its labels kept as exported."""
    return (
        f"global:\n  scrape_interval: {scrape_interval:g}s\n  evaluation_interval: 1m\n"
        "scrape_configs:\n  - job_name: synthetic-mlserver\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
    )


# ---------------------------------------------------------------------------------------------------
# the InferenceServices
# ---------------------------------------------------------------------------------------------------


def weights(steps: int) -> list[int]:
    """``steps`` weights from 10 % up, evenly, below 100 (``4`` -> 10, 30, 50, 70)."""
    if steps == 1:
        return [10]
    return [round(10 + i * 80 / (steps - 1)) for i in range(steps)]


def analysis_spec(steps: int, interval: int) -> dict[str, Any]:
    return {
        "steps": [{"weight": w} for w in weights(steps)],
        "interval": f"{interval}s",
        "minRequests": 100,
        "failureLimit": 1,
        "errorRatio": {"max": 0.02, "maxAboveStable": 0.005},
        "latency": {"quantile": 0.99, "maxSeconds": 0.5, "maxTimesStable": 1.2},
    }


def name_of(i: int) -> str:
    return f"canary-{i:04d}"


def inference_service(i: int, analysis: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``i``-th InferenceService at v1: MLServer, one replica, a canary at 10 % (``analysis``
    None) or moved by ``analysis``."""
    from mlops_platform import api

    canary: dict[str, Any] = {"model": {"uri": f"s3://models/bench/{i}/v2"}}
    canary |= {"trafficPercent": 0, "analysis": dict(analysis)} if analysis else {"trafficPercent": 10}
    return {
        "apiVersion": api.RESOURCE.api_version,
        "kind": api.RESOURCE.kind,
        "metadata": {"name": name_of(i), "namespace": NAMESPACE},
        "spec": {
            "predictor": {
                "model": {"uri": f"s3://models/bench/{i}/v1"},
                "runtime": "seldon",
                # small requests: 2N pods and more must fit on the fake nodes
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
            },
            "canary": canary,
        },
    }


def queries_per_measurement(steps: int, interval: int) -> int:
    """The instant queries of one step's measurement, as the operator builds them."""
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import analysis_queries

    isvc = api.decode(inference_service(0, analysis_spec(steps, interval)))
    assert isvc.traffic is not None and isvc.traffic.analysis is not None
    a = isvc.traffic.analysis
    return len(analysis_queries.step_queries(a, a.steps[0], namespace=NAMESPACE, name="x", dialect="seldon"))
