"""The operator's extra load for N canaries in analysis (``make bench-analysis``, issue #42).

On a fresh local cluster of kwok nodes only (``dev up --real-nodes 0 --without-metrics-server``):

- a synthetic exporter (``prometheus_client``, 127.0.0.1) exposes MLServer's series
  (``model_infer_request_success_total``, ``..._failure_total``, the ``model_infer_request_duration``
  summary, the REST histogram ``rest_server_request_duration_seconds``) for every InferenceService's
  stable model (``mlops_platform_component="predictor"``) and candidate (``"canary"``), with the
  labels a ServiceMonitor would give the scraped series (``namespace``,
  ``mlops_platform_inferenceservice``, ``mlops_platform_component``). The counters grow at a steady
  rate (:class:`bench.analysis_series.Traffic`: healthy, the candidate as good as the stable model),
  so every step is judged and passes. The pods are kwok's: nothing serves, these series stand for
  them;
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
127.0.0.1): on a local cluster with its real node (``dev up``'s defaults,
``analysis_proxy.PROXY_CLUSTER`` unless ``--name``) and the monitoring stack
(:func:`mlops_platform.devcluster.monitoring.install`), K of the analysis' own queries
(:func:`bench.analysis_proxy.proxy_queries`) at ``--proxy-rate`` per second (N=100's rate) through
``promclient.QueryClient`` with its defaults; kube-apiserver's CPU (its ``/proc/<pid>/stat``) over
them against two idle windows of ``--proxy-idle`` seconds, the client's latency p50/p99. It adds its
section to the page of the last full run (``analysis.json`` in ``--out``).

Its parts, each a module of ``bench``: ``analysis_series`` (the synthetic series and the
InferenceServices), ``analysis_figures`` (the readings and their arithmetic), ``analysis_report``
(the page), ``analysis_proxy`` (``--proxy-queries``); this module runs the phases and is the entry
point.

    .venv/bin/python -m bench.analysis                  # N = 100 on its own cluster mlops-bench-analysis
    .venv/bin/python -m bench.analysis --count 20 --window 60 --steps 4 --no-finish   # a quick look
    .venv/bin/python -m bench.analysis --proxy-queries 2664   # the service proxy: 120 s at 22.2/s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import _common as common
from bench.analysis_figures import ENDED, Reading, advanced, figures, progress, prometheus_readings, window
from bench.analysis_proxy import ANALYSIS_QUERIES_PER_SECOND, PROXY_CLUSTER, run_proxy
from bench.analysis_report import render
from bench.analysis_series import (
    BUCKETS,
    NAMESPACE,
    Exporter,
    analysis_spec,
    exporter_registry,
    inference_service,
    name_of,
    prometheus_config,
    queries_per_measurement,
    weights,
)

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client
    from mlops_platform.testing.operator import Process

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "mlops-bench-analysis"
FIELD_MANAGER = "bench-analysis"


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


async def apply_all(c: Client, n: int, spec: Mapping[str, Any] | None) -> None:
    """The ``n`` InferenceServices applied, 16 in flight: a canary at 10 % (``spec`` None) or moved by
    the analysis ``spec``."""
    from mlops_platform import api

    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            await c.apply(api.RESOURCE, inference_service(i, spec), field_manager=FIELD_MANAGER)

    await asyncio.gather(*(one(i) for i in range(n)))


async def all_ready(c: Client, n: int) -> bool:
    from mlops_platform.runtime import objects

    items = await isvcs(c)
    ready = sum(1 for o in items if objects.condition_is(o, "Ready"))
    common.log(f"{ready}/{n} Ready")
    return ready == n


async def all_begun(c: Client, n: int) -> bool:
    p = progress(await isvcs(c))
    begun = sum(1 for s in p.values() if s.started or s.phase in ENDED)
    common.log(f"{begun}/{n} analyses have begun an interval")
    return begun == n


async def all_ended(c: Client, n: int) -> bool:
    """Every analysis promoted, or none still moving."""
    p = progress(await isvcs(c))
    counts = Counter(str(s.phase) for s in p.values())
    common.log(f"phases: {dict(counts)}")
    return counts["Promoted"] == n or not any(s.phase in ("Progressing", "Promoting") for s in p.values())


async def finish(
    a: argparse.Namespace, c: Client, op: Process, prometheus: str, before: Reading, t1: float
) -> dict[str, Any]:
    """``--finish``: until every analysis has ended (or the budget is spent); the phases and holds
    then, and the figures of the whole span from ``before`` (the analysis window's start)."""
    from mlops_platform.runtime import wait

    n: int = a.count
    budget = a.steps * a.interval * 3 + 300
    with_errors = None
    try:
        await wait.until(lambda: all_ended(c, n), timeout=budget, interval=10, what="every analysis ended")
    except TimeoutError as e:
        with_errors = str(e)
    final = progress(await isvcs(c))
    return {
        "seconds_from_analysis": time.monotonic() - t1,
        "phases": dict(Counter(str(s.phase) for s in final.values())),
        "holds": dict(Counter(s.hold for s in final.values() if s.hold)),
        "timed_out": with_errors,
        "whole": window(before, await reading(op, prometheus)),
    }


async def run_phases(a: argparse.Namespace, c: Client, op: Process, prometheus: str) -> dict[str, Any]:
    from mlops_platform.runtime import wait

    n: int = a.count
    t0 = time.monotonic()
    await apply_all(c, n, None)
    await wait.until(
        lambda: all_ready(c, n), timeout=a.count * 3 + 120, interval=5, what="every InferenceService Ready"
    )
    ready_seconds = time.monotonic() - t0
    await quiet(op)
    base = window(*await measured(op, prometheus, a.window, "baseline (canaries at 10 %, no analysis)"))

    spec = analysis_spec(a.steps, a.interval)
    t1 = time.monotonic()
    await apply_all(c, n, spec)
    await wait.until(lambda: all_begun(c, n), timeout=a.count + 300, interval=5, what="every analysis begun")
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
        result["finish"] = await finish(a, c, op, prometheus, before, t1)
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
    return common.write_page(out, "analysis.md", render(result))


if __name__ == "__main__":
    sys.exit(main())
