"""The API server's service proxy (``bench.analysis --proxy-queries``): what the operator's default
way to Prometheus costs. On a cluster with its real node and the monitoring stack, K of the analysis'
own queries (:func:`proxy_queries`) at a steady rate through ``promclient.QueryClient`` with its
defaults (:func:`send_proxied`); kube-apiserver's CPU over them against two idle windows
(:func:`measure_proxy`), the figures per query (:func:`proxy_figures`), and the section added to the
page of the last full run (:func:`run_proxy`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import _common as common
from bench.analysis_report import render, render_proxy
from bench.analysis_series import (
    NAMESPACE,
    analysis_spec,
    inference_service,
    name_of,
    queries_per_measurement,
)

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
    return common.write_page(out, "analysis.md", text)
