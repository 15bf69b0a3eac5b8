"""The operator's extra load for N canaries in analysis (``make bench-analysis``, issue #42).

On a fresh local cluster of kwok nodes only (``dev up --real-nodes 0 --without-metrics-server``):

- a synthetic exporter (``prometheus_client``, 127.0.0.1) exposes MLServer's series
  (``model_infer_request_success_total``, ``..._failure_total``, the ``model_infer_request_duration``
  summary, the REST histogram ``rest_server_request_duration_seconds``) for every InferenceService's
  stable model (``mlops_platform_component="predictor"``) and candidate (``"canary"``), with the
  labels a ServiceMonitor would give the scraped series (``namespace``,
  ``mlops_platform_inferenceservice``, ``mlops_platform_component``). The counters grow at a steady
  rate (:class:`Traffic`: healthy, the candidate as good as the stable model), so every step is
  judged and passes. The pods are kwok's: nothing serves, these series stand for them;
- a real Prometheus (``hack/build-monitoring``'s binary) on 127.0.0.1 scrapes it every
  ``--scrape-interval`` seconds;
- the operator runs as its own process (``mlops-platform run --traffic-router replicas
  --prometheus-url http://127.0.0.1:PORT``), so its CPU (``/proc/<pid>/stat``) and RSS are its own.

Two phases on the same operator, each measured over ``--window`` seconds once settled:

1. **baseline**: N InferenceServices (MLServer, ``seldon``), each with a canary at
   ``trafficPercent: 10`` and no analysis, all Ready, the operator quiet;
2. **analysis**: the same N given ``spec.canary.analysis`` (``--steps`` steps of ``--interval``
   seconds, ``minRequests``, ``errorRatio`` and ``latency`` checks with bounds relative to the stable
   model), measured from when every analysis has begun its first interval.

In each window: the queries the operator sent to Prometheus (Prometheus' own
``prometheus_http_requests_total{handler="/api/v1/query"}``: only the operator queries it then),
their latency as Prometheus timed them (``prometheus_http_request_duration_seconds``), the operator's
CPU seconds per second, its RSS and reconciles; in the analysis window also the steps passed and the
promotions (every ``status.analysis`` at the window's start and end). Then, unless
``--no-finish``, it waits until every analysis has ended (``Promoted``). Every server it starts
listens on 127.0.0.1; nothing is sent to a pod or Service address.

Results: ``docs/benchmarks/analysis.md`` (``--out``); ``--json FILE`` also writes the raw figures.

``--proxy-queries K`` measures instead what the operator's default way to Prometheus costs, the API
server's service proxy (``--prometheus``), which the run above cannot use (its Prometheus is on
127.0.0.1): on a local cluster with its real node (``dev up``'s defaults, ``PROXY_CLUSTER`` unless
``--name``) and the monitoring stack (:func:`mlops_platform.devcluster.monitoring.install`), K of the
analysis' own queries (:func:`proxy_queries`) at ``--proxy-rate`` per second (N=100's rate) through
``promclient.QueryClient`` with its defaults; kube-apiserver's CPU (its ``/proc/<pid>/stat``) over
them against two idle windows of ``--proxy-idle`` seconds, the client's latency p50/p99. It adds its
section to the page of the last full run (``analysis.json`` in ``--out``).

    .venv/bin/python -m bench.analysis                  # N = 100 on its own cluster mlops-bench-analysis
    .venv/bin/python -m bench.analysis --count 20 --window 60 --steps 4 --no-finish   # a quick look
    .venv/bin/python -m bench.analysis --proxy-queries 2664   # the service proxy: 120 s at 22.2/s
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from bench import _common as common

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client
    from mlops_platform.testing.operator import Process

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "mlops-bench-analysis"
NAMESPACE = "bench-analysis"
FIELD_MANAGER = "bench-analysis"
#: MLServer's REST histogram (starlette-exporter: prometheus_client's default buckets)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
COMPONENTS = ("predictor", "canary")
QUERY_HANDLER = "/api/v1/query"


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


# ---------------------------------------------------------------------------------------------------
# readings
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reading:
    """One reading of everything a window is the difference of."""

    at: float  # time.monotonic()
    cpu_seconds: float  # the operator's
    rss: int  # the operator's, bytes
    reconciles: int  # the operator's, all results
    queries: float  # prometheus_http_requests_total{handler="/api/v1/query"}
    query_seconds: float  # ..._duration_seconds_sum of that handler
    query_count: float  # ..._duration_seconds_count
    query_buckets: tuple[tuple[float, float], ...]  # (le, cumulative count)
    machine_busy: float  # every CPU, every process


def prometheus_readings(text: str) -> dict[str, Any]:
    """What a :class:`Reading` takes from Prometheus' own /metrics."""
    from bench import scale

    def handler(metric: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for lab, v in scale.samples(text, metric) if lab.get("handler") == QUERY_HANDLER]

    buckets: dict[float, float] = {}
    for lab, v in handler("prometheus_http_request_duration_seconds_bucket"):
        le = float(lab["le"])
        buckets[le] = buckets.get(le, 0.0) + v
    return {
        "queries": sum(v for _, v in handler("prometheus_http_requests_total")),
        "query_seconds": sum(v for _, v in handler("prometheus_http_request_duration_seconds_sum")),
        "query_count": sum(v for _, v in handler("prometheus_http_request_duration_seconds_count")),
        "query_buckets": tuple(sorted(buckets.items())),
    }


def bucket_bound(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The upper bound of the bucket of cumulative ``buckets`` (le, count) that holds the ``q``
    quantile: the quantile is at most that (None without observations). Prometheus' own request
    histogram is coarse (its first bucket ends at 0.1 s): an interpolated value would be invented."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    return next(le for le, count in buckets if count >= q * buckets[-1][1])


def window(before: Reading, after: Reading) -> dict[str, Any]:
    """The figures of the span between two readings."""
    seconds = after.at - before.at
    n = after.query_count - before.query_count
    diff = tuple((le, c - dict(before.query_buckets).get(le, 0.0)) for le, c in after.query_buckets)
    p99 = bucket_bound(0.99, diff)
    return {
        "seconds": round(seconds, 1),
        "queries": after.queries - before.queries,
        "queries_per_second": (after.queries - before.queries) / seconds,
        "cpu_per_second": (after.cpu_seconds - before.cpu_seconds) / seconds,
        "machine_busy_per_second": (after.machine_busy - before.machine_busy) / seconds,
        "rss_mib": after.rss / common.MIB,
        "reconciles_per_second": (after.reconciles - before.reconciles) / seconds,
        "query_mean_ms": 1000 * (after.query_seconds - before.query_seconds) / n if n else None,
        "query_p99_at_most_ms": 1000 * p99 if p99 is not None else None,
    }


@dataclasses.dataclass(frozen=True)
class Progress:
    """One analysis as its status says."""

    phase: str | None
    step: int
    hold: str | None
    started: bool = False  # a step's interval has begun (the route carries its weight)


def progress(items: Sequence[Mapping[str, Any]]) -> dict[str, Progress]:
    out = {}
    for o in items:
        s = (o.get("status") or {}).get("analysis") or {}
        out[o["metadata"]["name"]] = Progress(
            s.get("phase"),
            int(s.get("stepIndex") or 0),
            (s.get("hold") or {}).get("reason"),
            bool(s.get("stepStartTime")),
        )
    return out


ENDED = ("Promoting", "Promoted")


def advanced(before: Mapping[str, Progress], after: Mapping[str, Progress]) -> dict[str, Any]:
    """Steps passed between two :func:`progress` readings (the last step's pass is the move to
    ``Promoting``), analyses that reached ``Promoting``/``Promoted``, and the phases and holds at the end."""
    steps = promoted = 0
    for name, end in after.items():
        start = before.get(name, Progress(None, 0, None))
        steps += max(0, end.step - start.step)
        if end.phase in ENDED and start.phase not in ENDED:
            steps += 1
            promoted += 1
    return {
        "steps_passed": steps,
        "promoted": promoted,
        "phases_at_end": dict(Counter(str(p.phase) for p in after.values())),
        "holds_at_end": dict(Counter(p.hold for p in after.values() if p.hold)),
    }


# ---------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------


async def reading(op: Process, prometheus: str) -> Reading:
    from bench import scale

    prom = prometheus_readings(await asyncio.to_thread(scale.fetch, f"{prometheus}/metrics"))
    proc = common.read_proc(op.proc.pid)
    return Reading(
        at=time.monotonic(),
        cpu_seconds=proc.cpu_seconds,
        rss=proc.rss,
        reconciles=await op.reconciles(),
        machine_busy=common.read_machine().busy_seconds,
        **prom,
    )


async def isvcs(c: Client) -> list[dict[str, Any]]:
    from mlops_platform import api

    return list((await c.list(api.RESOURCE, NAMESPACE))["items"])


async def quiet(op: Process, *, span: float = 10.0, below: float = 0.05, timeout: float = 300.0) -> None:
    """Until the operator used less than ``below`` CPU seconds per second over ``span`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = common.read_proc(op.proc.pid).cpu_seconds
        await asyncio.sleep(span)
        if (common.read_proc(op.proc.pid).cpu_seconds - before) / span < below:
            return
    common.log(f"the operator did not go quiet within {timeout:.0f} s; measuring anyway")


async def measured(op: Process, prometheus: str, seconds: float, what: str) -> tuple[Reading, Reading]:
    common.log(f"{what}: measuring {seconds:.0f} s")
    before = await reading(op, prometheus)
    await asyncio.sleep(seconds)
    return before, await reading(op, prometheus)


async def run_phases(a: argparse.Namespace, c: Client, op: Process, prometheus: str) -> dict[str, Any]:
    from mlops_platform import api
    from mlops_platform.runtime import objects, wait

    n: int = a.count

    async def apply_all(spec: Mapping[str, Any] | None) -> None:
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with sem:
                await c.apply(api.RESOURCE, inference_service(i, spec), field_manager=FIELD_MANAGER)

        await asyncio.gather(*(one(i) for i in range(n)))

    async def all_ready() -> bool:
        items = await isvcs(c)
        ready = sum(1 for o in items if objects.condition_is(o, "Ready"))
        common.log(f"{ready}/{n} Ready")
        return ready == n

    t0 = time.monotonic()
    await apply_all(None)
    await wait.until(all_ready, timeout=a.count * 3 + 120, interval=5, what="every InferenceService Ready")
    ready_seconds = time.monotonic() - t0
    await quiet(op)
    base = window(*await measured(op, prometheus, a.window, "baseline (canaries at 10 %, no analysis)"))

    spec = analysis_spec(a.steps, a.interval)
    t1 = time.monotonic()
    await apply_all(spec)

    async def all_begun() -> bool:
        p = progress(await isvcs(c))
        begun = sum(1 for s in p.values() if s.started or s.phase in ENDED)
        common.log(f"{begun}/{n} analyses have begun an interval")
        return begun == n

    await wait.until(all_begun, timeout=a.count + 300, interval=5, what="every analysis begun")
    begun_seconds = time.monotonic() - t1
    start = progress(await isvcs(c))
    before, after = await measured(op, prometheus, a.window, "analysis")
    end = progress(await isvcs(c))
    result: dict[str, Any] = {
        "ready_seconds": ready_seconds,
        "begun_seconds": begun_seconds,
        "baseline": base,
        "analysis": window(before, after) | advanced(start, end),
        "queries_per_measurement": queries_per_measurement(a.steps, a.interval),
        "weights": weights(a.steps),
    }
    if a.finish:
        budget = a.steps * a.interval * 3 + 300

        async def all_promoted() -> bool:
            p = progress(await isvcs(c))
            counts = Counter(str(s.phase) for s in p.values())
            common.log(f"phases: {dict(counts)}")
            return counts["Promoted"] == n or not any(
                s.phase in ("Progressing", "Promoting") for s in p.values()
            )

        with_errors = None
        try:
            await wait.until(all_promoted, timeout=budget, interval=10, what="every analysis ended")
        except TimeoutError as e:
            with_errors = str(e)
        final = progress(await isvcs(c))
        result["finish"] = {
            "seconds_from_analysis": time.monotonic() - t1,
            "phases": dict(Counter(str(s.phase) for s in final.values())),
            "holds": dict(Counter(s.hold for s in final.values() if s.hold)),
            "timed_out": with_errors,
            "whole": window(before, await reading(op, prometheus)),
        }
    return result


def start_prometheus(config: str, port: int, tmp: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    """``hack/build-monitoring``'s Prometheus with ``config``, listening on 127.0.0.1:``port`` only,
    its data in ``tmp``."""
    from mlops_platform.devcluster import binaries

    (tmp / "prometheus.yml").write_text(config)
    cmd = [
        str(binaries.monitoring()["prometheus"] / "prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip
    common.log(f"starting Prometheus: {' '.join(cmd)}")
    with open(log_dir / "prometheus.log", "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


async def measure(a: argparse.Namespace, kubeconfig: str, tmp: Path, log_dir: Path) -> dict[str, Any]:
    from prometheus_client import start_http_server

    from bench import scale
    from mlops_platform.runtime import wait
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import operator
    from mlops_platform.testing.ports import free_port

    exporter = Exporter(NAMESPACE, [name_of(i) for i in range(a.count)])
    server, thread = start_http_server(0, "127.0.0.1", registry=exporter_registry(exporter))
    exporter_port = server.server_port
    common.log(f"synthetic exporter on 127.0.0.1:{exporter_port}")
    port = free_port()
    prometheus_url = f"http://127.0.0.1:{port}"
    prom = start_prometheus(prometheus_config(exporter_port, a.scrape_interval), port, tmp, log_dir)
    op: Process | None = None
    try:
        await wait.until(
            lambda: "ready" in scale.fetch(f"{prometheus_url}/-/ready", timeout=2).lower(),
            timeout=60, interval=0.5, what="Prometheus ready",
        )  # fmt: skip
        async with rclient.Client.from_kubeconfig(kubeconfig) as c:
            await common.install_crd(c)
            await common.wait_while_terminating(c, NAMESPACE)
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await c.apply(resources.NAMESPACE, namespace, field_manager=FIELD_MANAGER)
            flags = [
                "--no-monitoring", *common.NO_WEBHOOK_SERVER, "--traffic-router", "replicas",
                "--prometheus-url", prometheus_url,
            ]  # fmt: skip
            op = operator.start(Path(kubeconfig), log_dir / "operator.log", *flags)
            common.log(f"operator pid {op.proc.pid}: mlops-platform run {' '.join(flags)}")
            await wait.until(op.ready, timeout=120, interval=0.5, what="the operator ready")
            try:
                result = await run_phases(a, c, op, prometheus_url)
            except BaseException:
                common.log(f"operator log tail:\n{op.tail(40)}")
                raise
            await c.delete(resources.NAMESPACE, NAMESPACE)
    finally:
        if op is not None:
            await op.stop()
        prom.terminate()
        try:
            prom.wait(30)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        server.shutdown()
        server.server_close()
        thread.join(5)
    # success, failure, the summary's count and sum; the histogram's buckets, +Inf, count and sum
    return result | {"series_per_component": 4 + len(BUCKETS) + 1 + 2}


# ---------------------------------------------------------------------------------------------------
# the API server's service proxy (--proxy-queries)
# ---------------------------------------------------------------------------------------------------

PROXY_CLUSTER = "mlops-bench-proxy"
#: the queries/s the operator sent for N=100 canaries in analysis (docs/benchmarks/analysis.md)
ANALYSIS_QUERIES_PER_SECOND = 22.2


def proxy_queries(k: int, count: int, steps: int, interval: int) -> list[str]:
    """``k`` instant queries as the operator sends them: the first step's measurement of each of
    ``count`` InferenceServices in turn (:func:`analysis_queries.step_queries`), over and over."""
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import analysis_queries

    exprs: list[str] = []
    for i in range(count):
        isvc = api.decode(inference_service(i, analysis_spec(steps, interval)))
        assert isvc.traffic is not None and isvc.traffic.analysis is not None
        a = isvc.traffic.analysis
        queries = analysis_queries.step_queries(
            a, a.steps[0], namespace=NAMESPACE, name=name_of(i), dialect="seldon"
        )
        exprs += [q.expr for q in queries]
    return [exprs[j % len(exprs)] for j in range(k)]


def send_times(k: int, rate: float) -> list[float]:
    """When the ``j``-th of ``k`` queries is due, in seconds from the first: a steady ``rate``/s."""
    return [j / rate for j in range(k)]


@dataclasses.dataclass(frozen=True)
class CpuReading:
    """The API server's CPU, the benchmark's own (the client's) and the machine's at one moment."""

    at: float  # time.monotonic()
    apiserver: float  # kube-apiserver's utime + stime, seconds
    client: float  # this process'
    machine_busy: float


def cpu_window(before: CpuReading, after: CpuReading) -> dict[str, float]:
    seconds = after.at - before.at
    return {
        "seconds": seconds,
        "apiserver_cpu_per_second": (after.apiserver - before.apiserver) / seconds,
        "client_cpu_per_second": (after.client - before.client) / seconds,
        "machine_busy_per_second": (after.machine_busy - before.machine_busy) / seconds,
    }


def pooled(*windows: Mapping[str, float]) -> dict[str, float]:
    """One window of several :func:`cpu_window` s: their seconds added, each rate weighted by them."""
    seconds = sum(w["seconds"] for w in windows)
    keys = [k for k in windows[0] if k != "seconds"]
    return {"seconds": seconds} | {k: sum(w[k] * w["seconds"] for w in windows) / seconds for k in keys}


def proxy_figures(
    idle: Mapping[str, float],
    load: Mapping[str, float],
    queries: int,
    latencies_ms: Sequence[float],
    at_rate: float = ANALYSIS_QUERIES_PER_SECOND,
) -> dict[str, Any]:
    """What the proxied queries cost: the API server's CPU under them less its idle CPU, per second
    and per query (ms of CPU), the client's likewise, the latency the client saw, and the API
    server's extra CPU at ``at_rate`` queries/s (N=100 canaries in analysis), per query times rate."""
    rate = queries / load["seconds"]
    extra = load["apiserver_cpu_per_second"] - idle["apiserver_cpu_per_second"]
    per_query = extra / rate if rate else float("nan")
    client_extra = load["client_cpu_per_second"] - idle["client_cpu_per_second"]
    return {
        "queries": queries,
        "queries_per_second": rate,
        "apiserver_idle_cpu_per_second": idle["apiserver_cpu_per_second"],
        "apiserver_load_cpu_per_second": load["apiserver_cpu_per_second"],
        "apiserver_extra_cpu_per_second": extra,
        "apiserver_cpu_ms_per_query": 1000 * per_query,
        "client_cpu_ms_per_query": 1000 * client_extra / rate if rate else float("nan"),
        "latency_p50_ms": common.percentile(latencies_ms, 50),
        "latency_p99_ms": common.percentile(latencies_ms, 99),
        "latency_max_ms": max(latencies_ms, default=float("nan")),
        "at_rate": at_rate,
        "apiserver_extra_cpu_per_second_at_rate": per_query * at_rate,
    }


def cpu_reading(apiserver_pid: int) -> CpuReading:
    return CpuReading(
        at=time.monotonic(),
        apiserver=common.read_proc(apiserver_pid).cpu_seconds,
        client=common.read_proc().cpu_seconds,
        machine_busy=common.read_machine().busy_seconds,
    )


async def send_proxied(
    qc: Any, exprs: Sequence[str], rate: float
) -> tuple[list[float], Counter[str], list[str]]:
    """Send ``exprs`` at ``rate``/s with ``qc`` (a :class:`promclient.QueryClient`), each on its own
    task at its due time; (latencies in ms of the answered, outcomes, the first errors)."""
    from mlops_platform import promclient

    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    errors: list[str] = []

    async def one(expr: str) -> None:
        t = time.perf_counter()
        try:
            await qc.query(expr)
        except promclient.QueryError as e:
            outcomes[e.kind] += 1
            if len(errors) < 5:
                errors.append(str(e))
            return
        latencies.append(1000 * (time.perf_counter() - t))
        outcomes["ok"] += 1

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for due, expr in zip(send_times(len(exprs), rate), exprs, strict=True):
        await asyncio.sleep(max(0.0, start + due - loop.time()))
        tasks.append(asyncio.create_task(one(expr)))
    await asyncio.gather(*tasks)
    return latencies, outcomes, errors


async def measure_proxy(a: argparse.Namespace, name: str, kubeconfig: str) -> dict[str, Any]:
    """An idle window, ``a.proxy_queries`` queries at ``a.proxy_rate``/s through the API server's
    service proxy to the cluster's Prometheus (``monitoring/prometheus-operated:9090``), an idle
    window again (the idle figure is both, pooled: the API server's own background work drifts)."""
    from mlops_platform import promclient
    from mlops_platform.devcluster import cluster, monitoring
    from mlops_platform.runtime.transport import client as rclient

    await asyncio.to_thread(monitoring.install, name)
    pid = cluster.component_pid(name, "kube-apiserver")
    common.log(f"kube-apiserver pid {pid} ({common.command_name(pid)})")
    exprs = proxy_queries(a.proxy_queries, a.count, a.steps, a.interval)
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        qc = promclient.QueryClient.from_options(promclient.Options(), api=c)
        # warm up: the connection, Prometheus' first answers, and a check that the path works
        _, warm, errors = await send_proxied(qc, exprs[:20], a.proxy_rate)
        if warm["ok"] == 0:
            raise SystemExit(f"no query through the service proxy answered: {errors}")
        common.log(f"warm-up: {dict(warm)}; settling 20 s")
        await asyncio.sleep(20)
        common.log(f"idle before: measuring {a.proxy_idle:.0f} s")
        before = cpu_reading(pid)
        await asyncio.sleep(a.proxy_idle)
        idle = cpu_window(before, cpu_reading(pid))
        common.log(f"load: {len(exprs)} queries at {a.proxy_rate:g}/s")
        before = cpu_reading(pid)
        latencies, outcomes, errors = await send_proxied(qc, exprs, a.proxy_rate)
        load = cpu_window(before, cpu_reading(pid))
        await qc.close()
        common.log(f"idle again: settling 20 s, measuring {a.proxy_idle:.0f} s")
        await asyncio.sleep(20)
        before = cpu_reading(pid)
        await asyncio.sleep(a.proxy_idle)
        idle_after = cpu_window(before, cpu_reading(pid))
    return {
        "idle_before": idle,
        "idle_after": idle_after,
        "idle": pooled(idle, idle_after),
        "load": load,
        "outcomes": dict(outcomes),
        "first_errors": errors,
        "endpoint": str(promclient.Options().endpoint()),
        "query_shapes": len(set(exprs)),
        "queries_per_measurement": queries_per_measurement(a.steps, a.interval),
        "figures": proxy_figures(pooled(idle, idle_after), load, outcomes["ok"], latencies),
    }


# ---------------------------------------------------------------------------------------------------
# figures and the page
# ---------------------------------------------------------------------------------------------------


def figures(r: Mapping[str, Any]) -> dict[str, Any]:
    """The extra load of the analyses over the baseline."""
    base, an = r["baseline"], r["analysis"]
    return {
        "queries_per_second": an["queries_per_second"],
        "extra_cpu_per_second": an["cpu_per_second"] - base["cpu_per_second"],
        "extra_rss_mib": an["rss_mib"] - base["rss_mib"],
        "measurements_per_second": an["queries_per_second"] / r["queries_per_measurement"],
        "steps_passed": an["steps_passed"],
        "promoted": an["promoted"],
    }


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render(r: Mapping[str, Any]) -> str:
    a = r["arguments"]
    f = figures(r)
    base, an = r["baseline"], r["analysis"]
    rows = [
        [label, _f(w["seconds"], 0), f"{w['queries']:.0f}", _f(w["queries_per_second"]),
         _f(w["query_mean_ms"]), _f(w["query_p99_at_most_ms"], 0), _f(w["cpu_per_second"], 3),
         _f(w["rss_mib"], 1), _f(w["reconciles_per_second"]), _f(w["machine_busy_per_second"])]
        for label, w in (("baseline: canaries at 10 %, no analysis", base), ("canaries in analysis", an))
    ]  # fmt: skip
    header = ["phase", "s", "queries to Prometheus", "queries/s", "query mean ms", "query p99 at most ms",
              "operator CPU s/s", "operator RSS MiB", "reconciles/s", "machine busy CPU s/s"]  # fmt: skip
    steps = ", ".join(str(w) for w in r["weights"])
    lines = [
        "# The canary analysis' extra load (issue 42)",
        "",
        f"`{r['command']}` on {r['machine'].get('cpus', '?')} CPUs ({r['machine'].get('date', '?')}).",
        "",
        f"**{a['count']} InferenceServices** (MLServer runtime, one replica each) on **kwok pods**, each "
        f"with a canary, the `replicas` traffic router. **The metrics are synthetic**: kwok pods serve "
        "nothing, so an exporter of the benchmark's own (127.0.0.1) exposes MLServer's series for every "
        "stable model and candidate, growing at a steady healthy rate, and a real Prometheus "
        f"(on 127.0.0.1, scraping every {a['scrape_interval']:g} s) serves them to the operator "
        "(`--prometheus-url`). The operator runs as its own process (`mlops-platform run`).",
        "",
        f"- analysis: steps {steps} %, each {a['interval']} s, `minRequests: 100`, `errorRatio` "
        "(`max`, `maxAboveStable`) and `latency` (`maxSeconds`, `maxTimesStable`): "
        f"{r['queries_per_measurement']} instant queries per step's measurement;",
        f"- queries per second to Prometheus, canaries in analysis: **{f['queries_per_second']:.2f}** "
        f"({f['measurements_per_second']:.2f} measurements/s; baseline {base['queries_per_second']:.2f});",
        f"- the operator's extra CPU: **{f['extra_cpu_per_second']:.3f} s/s** "
        f"({an['cpu_per_second']:.3f} against {base['cpu_per_second']:.3f}); RSS {an['rss_mib']:.1f} MiB "
        f"against {base['rss_mib']:.1f} MiB ({f['extra_rss_mib']:+.1f} MiB);",
        f"- in the {an['seconds']:.0f} s window: {an['steps_passed']} steps passed, {an['promoted']} "
        f"analyses promoted; phases at its end {an['phases_at_end']}, holds {an['holds_at_end'] or 'none'}.",
        "",
        common.markdown_table(header, rows),
        "",
        "Queries and their latency are Prometheus' own counts of its `/api/v1/query` handler "
        "(`prometheus_http_requests_total`, `prometheus_http_request_duration_seconds`; p99: the "
        "upper bound of its bucket), over the window only: nothing but the operator queried it then. "
        "CPU and RSS: the operator's `/proc/<pid>`; machine busy: every process (the control plane, "
        "Prometheus, the exporter, the benchmark).",
        "",
    ]
    if "finish" in r:
        fin = r["finish"]
        lines += [
            f"Until every analysis ended: {fin['seconds_from_analysis']:.0f} s from the analyses' apply; "
            f"phases {fin['phases']}, holds {fin['holds'] or 'none'}"
            + (f", **timed out**: {fin['timed_out']}" if fin["timed_out"] else "")
            + f"; over that whole span {fin['whole']['queries_per_second']:.2f} queries/s, operator CPU "
            f"{fin['whole']['cpu_per_second']:.3f} s/s, RSS {fin['whole']['rss_mib']:.1f} MiB.",
            "",
        ]
    lines += [
        "Caveat: one run on a shared 2-core machine; the control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok), Prometheus, the exporter and the operator "
        "share both CPUs. The synthetic series say nothing of a real model server's behaviour: they "
        "give Prometheus the series count and the operator the queries a real fleet of this size would.",
        "",
    ]
    if "proxy" in r:
        lines += render_proxy(r["proxy"])
    return "\n".join(lines)


def render_proxy(p: Mapping[str, Any]) -> list[str]:
    f, a = p["figures"], p["arguments"]
    rows = [
        ["idle (no queries; before and after, pooled)", _f(p["idle"]["seconds"], 0), "0", "-",
         _f(f["apiserver_idle_cpu_per_second"], 3), _f(p["idle"]["client_cpu_per_second"], 3),
         _f(p["idle"]["machine_busy_per_second"]), "-", "-"],
        [f"{f['queries']} queries through the proxy", _f(p["load"]["seconds"], 0), str(f["queries"]),
         _f(f["queries_per_second"]), _f(f["apiserver_load_cpu_per_second"], 3),
         _f(p["load"]["client_cpu_per_second"], 3), _f(p["load"]["machine_busy_per_second"]),
         _f(f["latency_p50_ms"], 1), _f(f["latency_p99_ms"], 1)],
    ]  # fmt: skip
    header = ["window", "s", "queries", "queries/s", "kube-apiserver CPU s/s", "client CPU s/s",
              "machine busy CPU s/s", "latency p50 ms", "latency p99 ms"]  # fmt: skip
    failed = {k: v for k, v in p["outcomes"].items() if k != "ok"}
    return [
        "## Through the API server's service proxy (the default `--prometheus`)",
        "",
        f"`{p['command']}` on {p['machine'].get('cpus', '?')} CPUs ({p['machine'].get('date', '?')}): a "
        "local cluster with its real node (`dev up`'s default) and the monitoring stack (the Prometheus "
        "Operator's Prometheus on the real node, `devcluster.monitoring`); "
        f"{f['queries']} instant queries sent at {a['proxy_rate']:g}/s "
        "(the rate the operator sent for N=100 above) by the operator's own client "
        f"(`promclient.QueryClient`, its defaults: `{p['endpoint']}` through "
        "`/api/v1/namespaces/monitoring/services/http:prometheus-operated:9090/proxy/api/v1/query`, "
        "5 s deadline, 2 retries, 8 in flight). The queries are the analysis' own: the first step's "
        f"measurement ({p['queries_per_measurement']} queries) of each of {a['count']} InferenceServices "
        f"in turn ({p['query_shapes']} distinct). kube-apiserver's CPU from its `/proc/<pid>/stat`, "
        f"over the load and over two idle windows of {a['proxy_idle']:g} s with no queries, one just "
        f"before it and one after (20 s later), pooled ({p['idle_before']['apiserver_cpu_per_second']:.3f} "
        f"and {p['idle_after']['apiserver_cpu_per_second']:.3f} s/s).",
        "",
        f"- kube-apiserver: **{f['apiserver_idle_cpu_per_second']:.3f} CPU s/s idle, "
        f"{f['apiserver_load_cpu_per_second']:.3f} under the queries**: "
        f"+{f['apiserver_extra_cpu_per_second']:.3f} s/s, **{f['apiserver_cpu_ms_per_query']:.2f} ms "
        "of CPU per query**;",
        f"- at N=100 ({f['at_rate']:g} queries/s): **+{f['apiserver_extra_cpu_per_second_at_rate']:.3f} "
        "CPU s/s** of kube-apiserver for the analyses' queries;",
        f"- latency as the client saw it (the proxy and Prometheus): **p50 {f['latency_p50_ms']:.1f} ms, "
        f"p99 {f['latency_p99_ms']:.1f} ms** (max {f['latency_max_ms']:.1f} ms); the client's own CPU "
        f"{f['client_cpu_ms_per_query']:.2f} ms per query;",
        f"- answers: {p['outcomes'].get('ok', 0)} ok, failures {failed or 'none'}.",
        "",
        common.markdown_table(header, rows),
        "",
        "The names queried have no series in this cluster (no InferenceService runs there): Prometheus "
        "evaluates each expression over an empty selection and answers an empty vector, so the answers "
        "are small; what is measured is the proxy's cost per request (authentication, authorization, "
        "the proxied connection to the pod), which does not depend on what the query selects. The "
        "latency includes Prometheus' own evaluation on the real node. One run on the shared 2-core "
        "machine: the real node, Prometheus and the rest of the control plane share both CPUs; machine "
        "busy counts every process on the machine, other work on it included, while the kube-apiserver "
        "and client figures are those processes' own.",
        "",
    ]


def run_proxy(a: argparse.Namespace, out: Path, provenance: tuple[dict[str, Any], dict[str, Any]],
              argv: list[str] | None) -> int:  # fmt: skip
    """``--proxy-queries``: the service proxy's cost on a cluster with its real node, added to the
    page of the last full run (``analysis.json`` in ``--out``, when there is one)."""
    with common.cluster_for(a.name, PROXY_CLUSTER, keep=a.keep_cluster) as (a.name, kubeconfig):
        proxy = asyncio.run(measure_proxy(a, a.name, kubeconfig))
    machine, arguments = provenance
    proxy |= {
        "machine": machine,
        "arguments": arguments,
        "command": common.command_line("bench.analysis", argv),
    }
    previous = out / "analysis.json"
    result: dict[str, Any] = json.loads(previous.read_text()) if previous.exists() else {}
    result["proxy"] = proxy
    if a.json:
        common.write_json(a.json, result)
    text = render(result) if "analysis" in result else "\n".join(render_proxy(proxy))
    (out / "analysis.md").write_text(text)
    common.log(f"wrote {out / 'analysis.md'}")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--name", default=None, help=f"an existing local cluster (kept); default: {CLUSTER}")
    p.add_argument("--count", type=int, default=100, help="InferenceServices, each with a canary")
    p.add_argument("--steps", type=int, default=8, help="analysis steps, weights from 10 to 90 %%")
    p.add_argument("--interval", type=int, default=30, help="seconds of each analysis step")
    p.add_argument("--window", type=float, default=180, help="seconds measured in each phase")
    p.add_argument("--scrape-interval", type=float, default=5)
    p.add_argument("--finish", action=argparse.BooleanOptionalAction, default=True,
                   help="after the window, wait until every analysis has ended")  # fmt: skip
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--json", help="also write the raw figures to this file")
    p.add_argument("--proxy-queries", type=int, default=0, metavar="K",
                   help="instead: the cost of K analysis queries through the API server's service "
                   "proxy, on a cluster with its real node and the monitoring stack "
                   f"(default {PROXY_CLUSTER})")  # fmt: skip
    p.add_argument("--proxy-rate", type=float, default=ANALYSIS_QUERIES_PER_SECOND,
                   help="queries/s of --proxy-queries (default: N=100's)")  # fmt: skip
    p.add_argument("--proxy-idle", type=float, default=120, help="seconds of the idle window before them")
    a = p.parse_args(argv)
    out, machine, arguments = common.results_dir(a, REPO)
    if a.proxy_queries:
        return run_proxy(a, out, (machine, arguments), argv)
    options = ("--real-nodes", "0", "--without-metrics-server")
    with (
        common.cluster_for(a.name, CLUSTER, keep=a.keep_cluster, options=options) as (a.name, kubeconfig),
        tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp,
    ):
        log_dir = Path(os.environ.get("BENCH_LOG_DIR", tmp))  # the operator's and Prometheus' logs
        log_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(measure(a, kubeconfig, Path(tmp), log_dir))
    result = common.stamped(a, result, (machine, arguments), "bench.analysis", argv, figures)
    text = render(result)
    (out / "analysis.md").write_text(text)
    common.log(f"wrote {out / 'analysis.md'}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
