#!/usr/bin/env python3
"""Conversion: the latency the InferenceService conversion webhook adds, against the CRD-GA SLO
(p99 <= 50 ms per object).

On a FRESH local cluster (``--cluster-name``, ``dev up --nodes 1 --without-metrics-server``; no
operator: nothing but this benchmark writes), the CRD is installed pointing at a real
``mlops-platform webhook`` process (:func:`mlops_platform.testing.webhook.serving`: self-managed
certificates, the API server calls it over verified TLS) started with ``--metrics-bind-address``,
so that its own ``controller_runtime_webhook_requests_total`` and ``..._latency_seconds`` are
scraped around every measured step. Then:

1. N InferenceServices (``--count``, default 1000) are created at ``mlops.platform/v1``, the
   storage version (no conversion), ``--create-concurrency`` in flight; their specs vary (canary,
   resources, GPU, a custom runtime with scale-to-zero, monitoring/network policy/routing, unknown
   extensions, labels and annotations);
2. ``get``: every object is read once at v1 (the baseline: the webhook is not called) and once at
   each of v1alpha1 and v1beta1 (one ConversionReview of one object each), one request at a time,
   in blocks of ``--block`` objects with the versions' order rotating from block to block (load
   drift hits every version alike); the webhook's counters are scraped around every block;
3. ``list``: ``--lists`` unpaged LISTs of all N at each version. The API server keeps a watch
   cache per served version, converting every write for each old version's cache as it arrives
   (in the background: counted while populating), and serves LISTs from it: a LIST calls no
   webhook (counted); per object = the whole LIST / N;
4. ``create``: ``--creates`` InferenceServices created at v1alpha1 (converted to v1 for storage,
   and the answer back to v1alpha1), each right after one created at v1 (the baseline);
5. ``list after CRD change``: ``--refills`` times per version, the CRD's spec is changed (the API
   server drops its storage and caches) and the first LIST at the version timed; the caches
   refill from etcd (ConversionReviews of the stored objects for the old versions); the webhook's
   requests are counted until they stop;
6. ``handler``: the handler alone, in this process (``webhooks.conversion.review`` on the same
   ConversionReview bodies, JSON in and out): a second figure of the webhook's own time.

The webhook process's CPU seconds and RSS (``/proc``) per phase, and the machine's load, are
reported. The per-object p99 checked against the SLO is the webhook's own: the upper bound of the
``controller_runtime_webhook_latency_seconds`` bucket holding the p99 of its requests in the row
(a review holds at least one object, and 0.05 s is a bucket bound: the check is exact at the SLO);
where the webhook is not called (``list``), the p99 of the whole LIST / N. The client's latency
(p50/p99, and what the webhook adds over the same requests at v1) is reported next to it. The
exit code is 1 if any row's per-object p99 exceeds the SLO, if a webhook request failed, or if a
GET or LIST at v1 reached the webhook.

Output: the table on stdout; ``--out DIR`` (default ``docs/benchmarks``) gets ``conversion.json``
and ``conversion.md``. Progress bars on stderr. The cluster is taken down at the end.

    .venv/bin/python -m bench.conversion               # make bench-conversion: N=1000 (~5 min)
    .venv/bin/python -m bench.conversion --smoke       # N=50, nothing written (~1 min)
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import json
import re
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from bench import _common as common

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client, Resource

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-conversion"
SLO_MS = 50.0
OLD_VERSIONS = ("v1alpha1", "v1beta1")
VERSIONS = ("v1", *OLD_VERSIONS)
JSON = dict[str, Any]


# ---------------------------------------------------------------------------------------------------
# the objects
# ---------------------------------------------------------------------------------------------------

RUNTIMES = ("triton", "seldon", "torchserve")
FORMATS = ("onnx", "pytorch", "tensorflow", "sklearn")


def v1_object(i: int) -> JSON:
    """The ``i``-th benchmark InferenceService at v1; seven shapes in turn, so that every converter
    path (canary, resources and GPU, custom runtime, the v1-only fields, unknown extensions) is taken."""
    kind = i % 7
    runtime = RUNTIMES[i % len(RUNTIMES)]
    predictor: JSON = {
        "model": {"uri": f"s3://models/bench/{i}/{1 + i % 9}"},
        "runtime": runtime,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 1 + i % 4},
    }
    spec: JSON = {"predictor": predictor}
    meta: JSON = {"name": f"conv-{i:05d}", "namespace": NAMESPACE, "labels": {"bench": "conversion"}}
    if kind == 0:
        predictor["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    elif kind == 1:  # a canary of the next model version, some traffic
        predictor["model"]["format"] = FORMATS[i % len(FORMATS)]
        spec["canary"] = {
            "model": {"uri": f"s3://models/bench/{i}/{2 + i % 9}"},
            "trafficPercent": 10 + i % 50,
        }
    elif kind == 2:  # GPU
        predictor["resources"] = {
            "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1},
            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1},
        }
    elif kind == 3:  # a custom runtime, scale to zero
        predictor["runtime"] = "vllm"
        predictor["port"] = 8000
        predictor["autoscaling"] = {
            "minReplicas": 0,
            "maxReplicas": 4,
            "scaleToZero": {"requestsPerReplica": 10, "cooldownSeconds": 300},
        }
    elif kind == 4:  # what v1alpha1 keeps in extensions
        spec["monitoring"] = {
            "enabled": True,
            "alerts": {"errorRatio": 0.02, "latencySeconds": 0.5, "for": "5m"},
        }
        spec["networkPolicy"] = {"enabled": True}
        spec["routing"] = {"router": "replicas"}
    elif kind == 5:  # v1-only autoscaling, unknown extensions (preserved)
        predictor["autoscaling"]["targetUtilization"] = {"cpu": 70, "memory": 80}
        spec["extensions"] = {"futureThing": {"a": [1, 2, 3], "b": "x"}, "x-team": "search"}
        predictor["resources"] = {"limits": {"cpu": "500m", "ephemeral-storage": "1Gi"}}
    else:  # labels and annotations (conversion rewrites metadata's annotations)
        meta["labels"] |= {"team": "ranking", "tier": "gold"}
        meta["annotations"] = {"example.com/owner": "ranking", "note": f"object {i}"}
        spec["canary"] = {"model": {"uri": f"gs://bucket/iris/{i}/"}, "trafficPercent": 0}
    return {"apiVersion": "mlops.platform/v1", "kind": "InferenceService", "metadata": meta, "spec": spec}


def alpha_object(name: str, i: int) -> JSON:
    """A v1alpha1 InferenceService (the old flat spec), four shapes in turn."""
    from mlops_platform.testing import isvc

    spec: JSON = {"modelUri": f"s3://models/alpha/{i}/{1 + i % 9}", "framework": RUNTIMES[i % 3]}
    kind = i % 4
    if kind == 0:
        spec |= {
            "minReplicas": 1,
            "maxReplicas": 3,
            "resources": {"cpuRequest": "250m", "memoryLimit": "1Gi"},
        }
    elif kind == 1:
        spec |= {"traffic": {"canaryVersion": str(2 + i % 9), "canaryPercent": 20}, "port": 9000}
    elif kind == 2:
        spec |= {"gpuPerReplica": 1, "resources": {"cpuRequest": "2", "memoryRequest": "8Gi"}}
    else:
        spec["extensions"] = {
            "monitoring": {"alerts": {"errorRatio": 0.05}},
            "networkPolicy": {"enabled": False},
            "team": "search",
        }
    return isvc.manifest(name, namespace=NAMESPACE, metadata={"labels": {"bench": "conversion"}}, **spec)


def resource(version: str) -> Resource:
    from mlops_platform.api import crd
    from mlops_platform.runtime.transport.client import Resource

    r = crd.RESOURCE
    return Resource(r.group, version, r.plural, r.kind)


# ---------------------------------------------------------------------------------------------------
# the webhook's /metrics
# ---------------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|[+-]Inf)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
REQUESTS = "controller_runtime_webhook_requests_total"
LATENCY = "controller_runtime_webhook_latency_seconds"


@dataclass(frozen=True)
class Scrape:
    """The webhook's counters at one moment (the ``/convert`` webhook)."""

    requests: dict[str, float]  # code -> count
    latency_sum: float  # seconds
    latency_count: float
    buckets: dict[float, float]  # le (seconds; inf) -> cumulative count

    def __sub__(self, other: Scrape) -> Scrape:
        return Scrape(
            {c: n - other.requests.get(c, 0.0) for c, n in self.requests.items()},
            self.latency_sum - other.latency_sum,
            self.latency_count - other.latency_count,
            {le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()},
        )

    @property
    def total(self) -> int:
        return round(sum(self.requests.values()))

    @property
    def failed(self) -> int:
        return round(sum(n for c, n in self.requests.items() if c != "200"))


def scrape(url: str) -> Scrape:
    from mlops_platform.api import crd

    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    requests: dict[str, float] = {}
    total = count = 0.0
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        if labels.get("webhook") != crd.WEBHOOK_PATH:
            continue
        name, value = m.group(1), float(m.group(3))
        if name == REQUESTS:
            requests[labels.get("code", "?")] = value
        elif name == LATENCY + "_sum":
            total = value
        elif name == LATENCY + "_count":
            count = value
        elif name == LATENCY + "_bucket":
            buckets[float(labels["le"])] = value
    return Scrape(requests, total, count, buckets)


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """The upper bound (ms) of the histogram bucket holding the ``q`` quantile (None: no sample)."""
    total = buckets.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for le in sorted(buckets):
        if buckets[le] >= q * total:
            return le * 1000
    return None


# ---------------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------------


@dataclass
class Row(common.Percentiles):
    """One operation at one version: the client's latencies and the webhook's counters over them."""

    version: str
    operation: str
    objects: int  # objects per request
    samples_ms: list[float] = field(default_factory=list)  # the client's latency per request
    per_object_ms: list[float] = field(default_factory=list)  # what the SLO is checked against
    webhook: Scrape | None = None  # the webhook's counters over the row's requests
    baseline: Row | None = None  # the same requests at v1 (no webhook)

    @property
    def per_object_p99(self) -> float:
        return common.percentile(self.per_object_ms, 99)

    @property
    def from_histogram(self) -> bool:
        return bool(self.webhook and self.webhook.latency_count)

    @property
    def slo_ms(self) -> float | None:
        """The per-object p99 checked against the SLO: the webhook's histogram bucket bound holding
        its p99 where it was called, else the p99 of the client's per-object times (None: no data)."""
        if self.webhook and self.from_histogram:
            return bucket_quantile(self.webhook.buckets, 0.99)
        return self.per_object_p99 if self.per_object_ms else None

    def summary(self) -> JSON:
        w = self.webhook
        return {
            "version": self.version,
            "operation": self.operation,
            "objects_per_request": self.objects,
            "requests": len(self.samples_ms),
            "p50_ms": round(self.p50, 3),
            "p99_ms": round(self.p99, 3),
            "max_ms": round(max(self.samples_ms), 3) if self.samples_ms else None,
            "added_p50_ms": round(self.p50 - self.baseline.p50, 3) if self.baseline else None,
            "added_p99_ms": round(self.p99 - self.baseline.p99, 3) if self.baseline else None,
            "per_object_p99_ms": round(self.per_object_p99, 4) if self.per_object_ms else None,
            "webhook_requests": w.total if w else 0,
            "webhook_failures": w.failed if w else 0,
            "webhook_mean_ms": round(w.latency_sum / w.latency_count * 1000, 3)
            if w and w.latency_count
            else None,
            "webhook_p99_bucket_ms": bucket_quantile(w.buckets, 0.99) if w else None,
            "slo_per_object_p99_ms": self.slo_ms,
            "slo_from_webhook_histogram": self.from_histogram,
            "within_slo": (self.slo_ms <= SLO_MS) if self.slo_ms is not None else None,
        }


@dataclass
class Result:
    count: int
    rows: list[Row] = field(default_factory=list)
    handler: list[JSON] = field(default_factory=list)
    process: dict[str, JSON] = field(default_factory=dict)  # phase -> the webhook process's figures
    machine: dict[str, float] = field(default_factory=dict)
    background: dict[str, int] = field(default_factory=dict)  # webhook requests while populating
    failures: list[str] = field(default_factory=list)


class Probe:
    """The webhook process: its counters (``/metrics``) and ``/proc`` figures."""

    def __init__(self, metrics_url: str, pid: int) -> None:
        self.metrics_url, self.pid = metrics_url, pid
        self._cpu = common.read_proc(pid).cpu_seconds

    def scrape(self) -> Scrape:
        return scrape(self.metrics_url)

    def phase(self) -> JSON:
        """CPU seconds since the last call, RSS and its peak now."""
        p = common.read_proc(self.pid)
        cpu, self._cpu = p.cpu_seconds - self._cpu, p.cpu_seconds
        return {
            "cpu_s": round(cpu, 2),
            "rss_mib": float(common.mib(p.rss)),
            "hwm_mib": float(common.mib(p.hwm)),
        }


async def timed(call: Callable[..., Awaitable[object]], *args: Any) -> float:
    """The milliseconds ``await call(*args)`` takes."""
    t0 = time.perf_counter()
    await call(*args)
    return (time.perf_counter() - t0) * 1000


# ---------------------------------------------------------------------------------------------------
# the phases
# ---------------------------------------------------------------------------------------------------


async def populate(client: Client, n: int, concurrency: int) -> None:
    v1 = resource("v1")
    todo = iter(range(n))
    with tqdm(total=n, desc=f"create {n} at v1", unit="isvc", leave=False) as bar:

        async def worker() -> None:
            for i in todo:
                await client.create(v1, v1_object(i), NAMESPACE)
                bar.update()

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def gets(client: Client, probe: Probe, n: int, block: int) -> list[Row]:
    rows = {v: Row(v, "get", 1) for v in VERSIONS}
    hooks: dict[str, list[Scrape]] = {v: [] for v in VERSIONS}
    names = [f"conv-{i:05d}" for i in range(n)]
    for v in VERSIONS:  # warm-up: connections, the API server's and the webhook's first requests
        for name in names[:10]:
            await client.get(resource(v), name, NAMESPACE)
    blocks = [names[i : i + block] for i in range(0, n, block)]
    with tqdm(total=n * len(VERSIONS), desc="GET one object", unit="req", leave=False) as bar:
        for b, chunk in enumerate(blocks):
            for v in rotated(b):
                res = resource(v)
                before = probe.scrape()
                for name in chunk:
                    rows[v].samples_ms.append(await timed(client.get, res, name, NAMESPACE))
                    bar.update()
                hooks[v].append(probe.scrape() - before)
    for row in rows.values():
        row.per_object_ms = list(row.samples_ms)
    return finished(rows, hooks)


async def lists(client: Client, probe: Probe, n: int, repeat: int) -> list[Row]:
    rows = {v: Row(v, "list", n) for v in VERSIONS}
    hooks: dict[str, list[Scrape]] = {v: [] for v in VERSIONS}
    with tqdm(total=repeat * len(VERSIONS), desc=f"LIST {n} objects", unit="list", leave=False) as bar:
        for r in range(repeat):
            for v in rotated(r):
                res = resource(v)
                before = probe.scrape()
                got: list[int] = []

                async def one(res: Resource = res, got: list[int] = got) -> None:
                    got.append(len((await client.list(res, NAMESPACE))["items"]))

                ms = await timed(one)
                delta = probe.scrape() - before
                if got[0] != n:
                    raise SystemExit(f"LIST at {v}: {got[0]} objects, expected {n}")
                rows[v].samples_ms.append(ms)
                hooks[v].append(delta)
                # per object: the webhook's time over this LIST / N, or the whole LIST's / N if larger
                # (served from the version's watch cache, the LIST does not call the webhook at all)
                rows[v].per_object_ms.append(max(delta.latency_sum * 1000, ms) / n)
                bar.update()
    return finished(rows, hooks)


async def creates(client: Client, probe: Probe, m: int) -> list[Row]:
    base, alpha = Row("v1", "create", 1), Row("v1alpha1", "create", 1)
    v1, old = resource("v1"), resource("v1alpha1")
    hook_base: list[Scrape] = []
    hook_alpha: list[Scrape] = []
    with tqdm(total=2 * m, desc="create one object", unit="req", leave=False) as bar:
        for i in range(m):
            obj = v1_object(i)
            obj["metadata"]["name"] = f"new-v1-{i:05d}"
            before = probe.scrape()
            base.samples_ms.append(await timed(client.create, v1, obj, NAMESPACE))
            middle = probe.scrape()
            hook_base.append(middle - before)
            alpha_obj = alpha_object(f"new-alpha-{i:05d}", i)
            alpha.samples_ms.append(await timed(client.create, old, alpha_obj, NAMESPACE))
            hook_alpha.append(probe.scrape() - middle)
            bar.update(2)
    base.webhook, alpha.webhook = total(hook_base), total(hook_alpha)
    base.per_object_ms, alpha.per_object_ms = list(base.samples_ms), list(alpha.samples_ms)
    alpha.baseline = base
    return [base, alpha]


async def touch_crd(client: Client, k: int) -> None:
    """Change the CRD's spec (the v1 schema's description): the API server drops the CRD's storage,
    and with it every version's watch cache, which refill from etcd on the next request."""
    from mlops_platform.api import CRD_NAME
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    for _ in range(5):
        live = await client.get(resources.CRD, CRD_NAME)
        schema = next(v for v in live["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
        schema["description"] = (schema.get("description") or "").split(" [bench ")[0] + f" [bench {k}]"
        try:
            await client.replace(resources.CRD, live)
            return
        except rclient.ApiError as e:
            if not e.conflict:  # the webhook's CA injection may write in between
                raise
    raise SystemExit("could not change the CRD: conflicts")


async def quiet(probe: Probe, seconds: float = 2.0, timeout: float = 120.0) -> Scrape:
    """The webhook's counters once they stopped changing for ``seconds``."""
    last, since, t0 = probe.scrape(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < seconds and time.monotonic() - t0 < timeout:
        await asyncio.sleep(0.25)
        now = probe.scrape()
        if now.total != last.total:
            last, since = now, time.monotonic()
    return last


async def refills(client: Client, probe: Probe, n: int, repeat: int) -> list[Row]:
    """After a CRD change: the first LIST at each version (the caches refill: the API server converts
    every stored object for each old version's watch cache, one ConversionReview per object), timed,
    and the webhook's requests over the whole refill (until they stop)."""
    rows = {v: Row(v, "list after CRD change", n) for v in VERSIONS}
    hooks: dict[str, list[Scrape]] = {v: [] for v in VERSIONS}
    with tqdm(total=repeat * len(VERSIONS), desc="CRD change + first LIST", unit="list", leave=False) as bar:
        for r in range(repeat):
            for v in rotated(r):
                before = await quiet(probe)
                await touch_crd(client, r * len(VERSIONS) + VERSIONS.index(v))
                await asyncio.sleep(1.0)  # the API server sees the CRD change (its informer)
                res = resource(v)
                rows[v].samples_ms.append(await timed(client.list, res, NAMESPACE))
                delta = await quiet(probe) - before
                hooks[v].append(delta)
                if not delta.total:
                    raise SystemExit("a CRD change did not refill the watch caches (no webhook request)")
                # per object: the webhook's mean per review (a review holds >= 1 object: an upper bound)
                rows[v].per_object_ms.append(delta.latency_sum * 1000 / delta.total)
                bar.update()
    return finished(rows, hooks)


def rotated(k: int) -> tuple[str, ...]:
    """:data:`VERSIONS` in the ``k``-th order of their rotation (load drift hits every version alike)."""
    return VERSIONS[k % 3 :] + VERSIONS[: k % 3]


def finished(rows: dict[str, Row], hooks: dict[str, list[Scrape]]) -> list[Row]:
    """The ``rows`` of a phase in :data:`VERSIONS` order, each with the webhook's counters over its
    requests (the sum of its ``hooks``) and, at an old version, the v1 row as its baseline."""
    for v in VERSIONS:
        rows[v].webhook = total(hooks[v])
        if v != "v1":
            rows[v].baseline = rows["v1"]
    return [rows[v] for v in VERSIONS]


def total(scrapes: Iterable[Scrape]) -> Scrape:
    out = Scrape({}, 0.0, 0.0, {})
    for s in scrapes:
        out = Scrape(
            {c: out.requests.get(c, 0.0) + n for c, n in s.requests.items()},
            out.latency_sum + s.latency_sum,
            out.latency_count + s.latency_count,
            {le: out.buckets.get(le, 0.0) + n for le, n in s.buckets.items()},
        )
    return out


def handler_alone(stored: Sequence[JSON], repeat: int) -> list[JSON]:
    """``webhooks.conversion.review`` in this process, on ConversionReviews of one object (each
    stored object) and of all of them, to each old version (bytes in, bytes out)."""
    from mlops_platform.webhooks import conversion

    def body(objects: Sequence[JSON], version: str) -> bytes:
        request = {"uid": "bench", "desiredAPIVersion": f"mlops.platform/{version}", "objects": list(objects)}
        review = {"apiVersion": conversion.REVIEW_API_VERSION, "kind": "ConversionReview", "request": request}
        return json.dumps(review).encode()

    out: list[JSON] = []
    for v in OLD_VERSIONS:
        ones = [body([o], v) for o in stored]
        times = []
        for b in tqdm(ones, desc=f"handler in-process, 1 object -> {v}", unit="review", leave=False):
            t0 = time.perf_counter()
            answer = conversion.review(b)
            times.append((time.perf_counter() - t0) * 1000)
            if b'"status":"Success"' not in answer:
                raise SystemExit(f"the handler failed converting to {v}: {answer[:300]!r}")
        out.append(
            {
                "version": v,
                "objects": 1,
                "reviews": len(times),
                "p50_ms": round(common.percentile(times, 50), 4),
                "p99_ms": round(common.percentile(times, 99), 4),
            }
        )
        whole = body(stored, v)
        batch = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            conversion.review(whole)
            batch.append((time.perf_counter() - t0) * 1000)
        out.append(
            {
                "version": v,
                "objects": len(stored),
                "reviews": repeat,
                "p50_ms": round(common.percentile(batch, 50), 3),
                "p99_ms": round(common.percentile(batch, 99), 3),
                "per_object_p99_ms": round(common.percentile(batch, 99) / len(stored), 4),
            }
        )
    return out


async def measure(a: argparse.Namespace, kubeconfig: str, log_path: Path, result: Result) -> None:
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import ports, webhook

    metrics_port = ports.free_port()
    port = ports.free_port()
    extra = ("--metrics-bind-address", f"127.0.0.1:{metrics_port}")
    async with (
        rclient.Client.from_kubeconfig(kubeconfig) as client,
        webhook.serving(Path(kubeconfig), client, log_path=log_path, port=port, extra_args=extra),
    ):
        pids = common.pids_naming(f"127.0.0.1:{metrics_port}")
        if len(pids) != 1:
            raise SystemExit(f"the webhook process: {len(pids)} processes found by its address")
        probe = Probe(f"http://127.0.0.1:{metrics_port}/metrics", pids[0])
        common.log(f"webhook serving on port {port}, metrics on {metrics_port}, pid {pids[0]}")
        result.process["start"] = probe.phase()
        await client.create(resources.NAMESPACE, {"metadata": {"name": NAMESPACE}})
        before = probe.scrape()
        await populate(client, a.count, a.create_concurrency)
        # every write is converted for each old version's watch cache (in the background)
        result.background = {"writes": a.count, "webhook_requests": (await quiet(probe) - before).total}
        result.process["populate"] = probe.phase()
        common.log(f"{a.count} InferenceServices at v1; measuring single-object GETs")
        result.rows += await gets(client, probe, a.count, a.block)
        result.process["get"] = probe.phase()
        common.log(f"measuring {a.lists} LISTs of {a.count} per version")
        result.rows += await lists(client, probe, a.count, a.lists)
        result.process["list"] = probe.phase()
        common.log(f"measuring {a.creates} creates at v1alpha1 (and at v1)")
        result.rows += await creates(client, probe, a.creates)
        result.process["create"] = probe.phase()
        common.log(f"measuring {a.refills} CRD changes + first LIST per version")
        result.rows += await refills(client, probe, a.count, a.refills)
        result.process["refill"] = probe.phase()
        stored = (await client.list(resource("v1"), NAMESPACE, label_selector="bench=conversion"))["items"]
        stored = [o for o in stored if o["metadata"]["name"].startswith("conv-")]
    result.handler = handler_alone(stored, a.lists)
    for row in result.rows:
        w = row.webhook
        if row.version == "v1" and row.operation in ("get", "list") and w and w.total:
            result.failures.append(f"{row.operation} at v1 reached the webhook ({w.total} requests)")
        if w and w.failed:
            result.failures.append(f"{row.operation} at {row.version}: {w.failed} webhook requests failed")


async def amain(a: argparse.Namespace) -> Result:
    result = Result(a.count)
    m0, t0 = common.read_machine(), time.monotonic()
    own0 = common.read_proc().cpu_seconds
    result.machine["loadavg_1m_start"] = m0.loadavg_1m
    with tempfile.TemporaryDirectory(prefix="mlops-bench-conversion-") as tmp:
        try:
            common.dev_cluster_down(a.cluster_name)  # a fresh cluster: nothing stored at another version
            kubeconfig, _ = common.dev_cluster_up(
                a.cluster_name, "--nodes", "1", "--without-metrics-server", "--real-nodes", "0"
            )
            t0 = time.monotonic()
            m0 = common.read_machine()
            await asyncio.wait_for(measure(a, kubeconfig, Path(tmp) / "webhook.log", result), a.timeout)
        except (TimeoutError, SystemExit, RuntimeError) as e:
            result.failures.append(f"{type(e).__name__}: {e}")
            common.log(f"FAILED: {e}")
            log_file = Path(tmp) / "webhook.log"
            if log_file.exists():
                common.log(
                    "the webhook's log (last lines):\n" + "\n".join(log_file.read_text().splitlines()[-20:])
                )
        finally:
            m1 = common.read_machine()
            elapsed = time.monotonic() - t0
            result.machine |= {
                "loadavg_1m_end": m1.loadavg_1m,
                "seconds": round(elapsed, 1),
                "busy_cpus_mean": round((m1.busy_seconds - m0.busy_seconds) / elapsed, 2) if elapsed else 0.0,
                "benchmark_cpu_s": round(common.read_proc().cpu_seconds - own0, 1),
            }
            if not a.keep_cluster:
                common.dev_cluster_down(a.cluster_name)
    return result


# ---------------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def render(result: Result) -> str:
    header = [
        "version",
        "operation",
        "objects",
        "requests",
        "p50 ms",
        "p99 ms",
        "added p50/p99 ms",
        "webhook requests",
        "webhook mean ms",
        "per-object p99 ms (SLO)",
    ]
    rows = []
    for r in result.rows:
        s = r.summary()
        added = f"{fmt(s['added_p50_ms'])} / {fmt(s['added_p99_ms'])}" if r.baseline else "-"
        slo = r.slo_ms
        slo_cell = "-" if slo is None else f"<= {slo:g} (histogram)" if r.from_histogram else fmt(slo, 3)
        rows.append(
            [
                r.version,
                r.operation,
                str(r.objects),
                str(s["requests"]),
                fmt(r.p50),
                fmt(r.p99),
                added,
                str(s["webhook_requests"]),
                fmt(s["webhook_mean_ms"], 2),
                slo_cell,
            ]
        )
    out = [
        f"Conversion webhook, N={result.count} (SLO: per-object p99 <= {SLO_MS:g} ms):\n",
        common.markdown_table(header, rows),
    ]
    if result.handler:
        out += [
            "\nThe handler alone, in-process (JSON bytes in and out):\n",
            common.markdown_table(
                ["version", "objects per review", "reviews", "p50 ms", "p99 ms", "per-object p99 ms"],
                [
                    [
                        h["version"],
                        str(h["objects"]),
                        str(h["reviews"]),
                        fmt(h["p50_ms"], 3),
                        fmt(h["p99_ms"], 3),
                        fmt(h.get("per_object_p99_ms", h["p99_ms"]), 3),
                    ]
                    for h in result.handler
                ],
            ),
        ]
    if result.process:
        out += [
            "\nThe webhook process per phase (CPU seconds in the phase; RSS and peak at its end):\n",
            common.markdown_table(
                ["phase", "CPU s", "RSS MiB", "peak RSS MiB"],
                [
                    [k, fmt(v["cpu_s"], 2), fmt(v["rss_mib"]), fmt(v["hwm_mib"])]
                    for k, v in result.process.items()
                ],
            ),
        ]
    if result.background:
        b = result.background
        out.append(
            f"\nWhile the {b['writes']} InferenceServices were created at v1, the webhook answered "
            f"{b['webhook_requests']} ConversionReviews: the API server keeps a watch cache per served "
            "version and converts every write for each old version's cache, in the background. "
            "LISTs are served from those caches (their objects already converted): `list` calls no "
            "webhook; its per-object figure is the whole LIST's p99 / N. After a CRD change the caches "
            "refill from etcd (`list after CRD change`). Elsewhere the per-object p99 is the webhook's "
            "own: the bound of its latency histogram's bucket holding the p99 (reviews of one object "
            "each); `added`: the client's p50 and p99 minus those of the same requests at v1."
        )
    m = result.machine
    out.append(
        f"\nMachine load: 1-min load average {m.get('loadavg_1m_start')} at the start, "
        f"{m.get('loadavg_1m_end')} at the end; {m.get('busy_cpus_mean')} CPUs busy on average over "
        f"{m.get('seconds')} s (every process: cluster, webhook, this benchmark "
        f"({m.get('benchmark_cpu_s')} CPU s) and anything else running)."
    )
    if result.failures:
        out.append("\nFailures: " + "; ".join(result.failures))
    return "\n".join(out)


def slo_violations(result: Result) -> list[str]:
    """Every row (v1 too: its webhook requests are the caches' conversions) over the SLO."""
    return [
        f"{r.version} {r.operation}: per-object p99 {r.slo_ms:g} ms > {SLO_MS:g} ms"
        for r in result.rows
        if r.slo_ms is not None and not r.slo_ms <= SLO_MS
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000, help="InferenceServices stored at v1")
    p.add_argument("--block", type=int, default=100, help="GETs per version before the order rotates")
    p.add_argument("--lists", type=int, default=20, help="unpaged LISTs per version")
    p.add_argument("--creates", type=int, default=200, help="creates at v1alpha1 (and as many at v1)")
    p.add_argument("--refills", type=int, default=3, help="CRD changes + first LIST per version")
    p.add_argument("--create-concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds for the whole measurement")
    p.add_argument("--cluster-name", default="mlops-bench-conversion")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--smoke", action="store_true", help="N=50, 5 LISTs, 20 creates; nothing written")
    a = p.parse_args(argv)
    if a.smoke:
        a.count, a.block, a.lists, a.creates, a.refills, a.out, a.timeout = 50, 25, 5, 20, 1, None, 300.0
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    result = asyncio.run(amain(a))
    table = render(result)
    print(table)
    if a.out:
        out, machine, args = common.results_dir(a, REPO)
        data = {
            "machine": machine,
            "load": result.machine,
            "args": args,
            "slo_ms": SLO_MS,
            "rows": [r.summary() | {"samples_ms": [round(x, 3) for x in r.samples_ms]} for r in result.rows],
            "handler_in_process": result.handler,
            "webhook_process": result.process,
            "background": result.background,
            "failures": result.failures,
        }
        common.write_json(out / "conversion.json", data)
        command = " ".join(["`.venv/bin/python -m bench.conversion", *sys.argv[1:]]) + "`"
        (out / "conversion.md").write_text(
            f"# Conversion webhook benchmark\n\n{command} (`make bench-conversion`)\n\nMachine: "
            + json.dumps(machine)
            + "\n\n"
            + table
            + "\n"
        )
        common.log(f"wrote {out / 'conversion.md'}")
    bad = slo_violations(result)
    for b in bad + result.failures:
        common.log(f"FAILED: {b}")
    return 1 if bad or result.failures or not result.rows else 0


if __name__ == "__main__":
    sys.exit(main())
