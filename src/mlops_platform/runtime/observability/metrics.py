"""Prometheus metrics with controller-runtime's names, on one registry per manager.

- ``controller_runtime_reconcile_total{controller,result}`` (result: success, error, requeue,
  requeue_after), ``controller_runtime_reconcile_errors_total{controller}``,
  ``controller_runtime_terminal_reconcile_errors_total{controller}``,
  ``controller_runtime_reconcile_time_seconds{controller}``,
  ``controller_runtime_active_workers{controller}``,
  ``controller_runtime_max_concurrent_reconciles{controller}``;
- ``rest_client_requests_total{code,method,host}`` and ``rest_client_request_retries_total{code,method,host}``
  (client-go: answers the client sends again after their ``Retry-After``) and, finer,
  ``rest_client_requests_by_resource_total{verb,resource,code}`` for per-kind request accounting;
- the workqueue families come from :mod:`workqueue_metrics`; leader election registers its own gauge,
  and the webhook server (:mod:`mlops_platform.runtime.webhook.server`) its ``controller_runtime_webhook_*``;
- ``mlops_platform_cache_objects{resource}`` (no controller-runtime name exists): objects held in
  the informer cache per resource, counted when scraped (:meth:`Metrics.observe_cache`): what a
  sharded replica's scope narrows, and where the operator's memory goes;
- ``mlops_platform_asyncio_tasks`` (Go's ``go_goroutines``, for the event loop) and
  ``mlops_platform_watches_open`` (watch streams open): read when scraped
  (:meth:`Metrics.observe_runtime`), what a soak test compares before and after churn to find leaked
  tasks and watches;
- ``python_gc_duration_seconds{generation}`` comes from :mod:`mlops_platform.runtime.control.heap`
  (the manager's garbage collector keeper).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from urllib.parse import urlsplit

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mlops_platform.runtime.queue import workqueue_metrics
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import httpserver

_METHOD = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}

RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip


class Metrics:
    """All runtime metric families, registered once on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=reg,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=reg,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=reg,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=reg,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=reg,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=reg,
        )
        self.rest_requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=reg,
        )
        self.rest_retries = Counter(
            "rest_client_request_retries_total",
            "Number of request retries, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=reg,
        )
        self.rest_requests_by_resource = Counter(
            "rest_client_requests_by_resource_total",
            "Number of API requests, partitioned by verb, resource and status code.",
            ["verb", "resource", "code"],
            registry=reg,
        )
        self.workqueue = workqueue_metrics.WorkqueueMetricsProvider(reg)

    def observe_cache(self, sizes: Callable[[], Mapping[str, int]]) -> None:
        """Serve ``mlops_platform_cache_objects{resource}`` from ``sizes()`` (resource -> objects
        cached) at every scrape: nothing is counted on the informers' hot path."""
        self.registry.register(_CacheSizes(sizes))

    def observe_runtime(self, tasks: Callable[[], int | None], watches: Callable[[], int]) -> None:
        """Serve ``mlops_platform_asyncio_tasks`` from ``tasks()`` (None: no loop yet, not served)
        and ``mlops_platform_watches_open`` from ``watches()`` at every scrape."""
        self.registry.register(_Runtime(tasks, watches))

    def observe_client(self, c: rclient.Client) -> None:
        """Count every request ``c`` makes from now on."""
        host = urlsplit(c.base_url).netloc

        def observe(rec: rclient.RequestRecord) -> None:
            code = str(rec.code) if rec.code else "<error>"
            self.rest_requests.labels(code, _METHOD.get(rec.verb, rec.verb.upper()), host).inc()
            self.rest_requests_by_resource.labels(rec.verb, rec.resource, code).inc()
            if rec.retried:
                self.rest_retries.labels(code, _METHOD.get(rec.verb, rec.verb.upper()), host).inc()

        c.observers.append(observe)


class _CacheSizes(Collector):
    def __init__(self, sizes: Callable[[], Mapping[str, int]]) -> None:
        self._sizes = sizes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "mlops_platform_cache_objects", "Objects held in the informer cache", labels=["resource"]
        )
        for resource, count in sorted(self._sizes().items()):
            family.add_metric([resource], count)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # collected at scrape time only (the resources change at run time)


class _Runtime(Collector):
    def __init__(self, tasks: Callable[[], int | None], watches: Callable[[], int]) -> None:
        self._tasks, self._watches = tasks, watches

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tasks = self._tasks()
        if tasks is not None:
            yield GaugeMetricFamily(
                "mlops_platform_asyncio_tasks", "asyncio tasks of the event loop not done", value=tasks
            )
        yield GaugeMetricFamily("mlops_platform_watches_open", "Watch streams open", value=self._watches())

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # collected at scrape time only


def metrics_server(registry: CollectorRegistry, host: str, port: int) -> httpserver.HttpServer:
    """An HTTP server answering ``GET /metrics`` with ``registry`` in the Prometheus text format: the
    manager's metrics endpoint, and the ``webhook`` command's (``--metrics-bind-address``)."""

    async def serve(method: str, path: str, body: bytes) -> httpserver.Response:
        return 200, CONTENT_TYPE_LATEST, generate_latest(registry)

    return httpserver.HttpServer({"/metrics": serve}, host=host, port=port)
