#!/usr/bin/env python3
"""Scale: N InferenceServices converged by the operator, by a raw writer and by a Go reference.

For every N (``--counts``, default 100 1000 5000) and every implementation (``--impls``):

- ``operator``: ours, ``python -m mlops_platform.cli run --no-monitoring --workers W
  --webhook-bind-address off`` (no conversion webhook server: nothing is converted);
- ``raw``: ``bench.raw_writer``, the same child and status writes straight from watch events, no
  cache, no queue: the ceiling; run at each of ``--raw-concurrency`` (requests in flight) and the
  best is the ceiling (more in flight stops helping once the API server is the limit);
- ``reference``: ``bench/reference-operator``, the same job in Go with controller-runtime (built
  from pinned modules by ``hack/build-reference-operator``), ``--workers W``;

each on a FRESH local cluster sized for the load (``dev up --nodes K --unthrottled``: fake nodes
for N pods, and no client QPS limits in kube-controller-manager and kube-scheduler, so the
benchmark measures the implementation, not a throttled controller-manager), in ONE run:

1. N InferenceServices created at ``mlops.platform/v1``, the storage version, ``--create-concurrency``
   in flight (runtime triton, seldon, torchserve in turn; maxReplicas 1, 1, 2, 3 in turn, so half get
   an HPA). The CRD serves v1 alone (``bench._common.install_crd``): the benchmark creates and
   reads only v1, so nothing is converted, and the run fails if the CRD's
   ``status.storedVersions`` is ever anything but ``["v1"]``;
2. the time until every child exists and until every InferenceService is ``Ready=True``, seen by
   this benchmark's own watches (informers; no polling LISTs);
3. settle (the implementation's CPU still for ``--quiet-seconds``), then ``--idle-seconds`` of
   steady state: every request it makes then (expected: none);
4. for the operator and the reference: ``--changes`` spec changes one after another (a new
   ``spec.predictor.model.uri``), each timed from the API server's answer to the patch until this
   benchmark sees the Deployment carry it (event-to-child-write latency, p50/p99);
5. for the operator at N in ``--resync-counts``: a forced full resync (SIGUSR1: every informer
   replays its cache, as a resync period does): its mutating and GET/LIST requests (expected: 0)
   and CPU seconds; and a restart with N objects present, with ``--changes`` spec changes during
   its initial sync (p50/p99: user changes must not wait behind the initial backlog);
6. the implementation's requests by verb and resource (its own counters; the API server's
   ``apiserver_request_total`` APPLY counts cross-check the child and status applies), CPU seconds
   (``/proc``), RSS peak and steady; etcd's database size and bytes per InferenceService; the
   latency of a full paged LIST of the InferenceServices (the seed's concern at 1,000-5,000).

``--repeat K`` runs the whole set of implementations K times per N, interleaved (operator, raw,
reference, operator, raw, ...; each on a fresh cluster), and adds a table of medians and ranges
with the ratios to the raw writer taken round by round (each implementation against the raw
writer of the same round, so a machine that is slower for a while slows both): on a busy 2-core
machine one run of the same code varies by 10 % or more, more than the targets' margins.

``--nice K`` starts every implementation under ``nice -n K``: where the control plane and the
implementation share the machine's CPUs, the control plane runs first whenever both want a CPU, so
the implementation's own CPU no longer takes time from it (as on a cluster whose control plane has
its own machines); the raw writer's and the reference's runs take longer, and the ratios change
(docs/measurements.md, "The control plane first for the CPU"). Compare such runs with each other.

Output: a Markdown table on stdout; ``--out DIR`` (default ``docs/benchmarks``) gets
``scale.json`` (every figure), ``scale.md`` (the tables and the machine) and PNG plots
(time to Ready vs N, requests per InferenceService, RSS vs N). Progress bars on stderr.

    .venv/bin/python -m bench.scale                     # the whole matrix (an hour or more)
    .venv/bin/python -m bench.scale --counts 1000 --impls operator raw
    .venv/bin/python -m bench.scale --counts 1000 --impls operator raw --raw-concurrency 256 --repeat 3
    .venv/bin/python -m bench.scale --smoke             # make bench-smoke: N=50, fails on any
                                                        # steady-state write or uncached read
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from bench import _common as common
from bench.operator_footprint import FRAMEWORKS, inference_service, max_replicas
from mlops_platform.devcluster import logs
from mlops_platform.runtime.clock import Clock, RealClock
from mlops_platform.testing.ports import free_port

if TYPE_CHECKING:
    from mlops_platform.runtime.objects import Obj
    from mlops_platform.runtime.transport.client import Client

REPO = Path(__file__).resolve().parents[1]
IMPLS = ("operator", "raw", "reference", "sharded")
SHARDS = 3
LEASE_NAMESPACE = "bench-leases"
LEASE_DURATION = 15.0
NAMESPACE = "bench"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "apply"})
READ_VERBS = frozenset({"get", "list"})
PODS_PER_NODE = 250


# ---------------------------------------------------------------------------------------------------
# the implementations, as processes
# ---------------------------------------------------------------------------------------------------


@dataclass
class Impl:
    """A running implementation: its process, how to read its request counts, its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_url: str | None  # None: counts come from the report file at exit (raw writer)
    report_path: Path | None = None
    concurrency: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        return common.read_proc(self.pid).cpu_seconds

    def memory(self) -> tuple[int, int]:
        """(RSS, peak RSS) in bytes."""
        p = common.read_proc(self.pid)
        return p.rss, p.hwm

    def requests(self) -> Counter[tuple[str, str]]:
        """(verb, resource) -> count so far (the raw writer's only after it exited)."""
        if self.metrics_url is None:
            if self.report_path is None or not self.report_path.exists():
                return Counter()
            report = json.loads(self.report_path.read_text())
            out: Counter[tuple[str, str]] = Counter()
            for r in report["requests"]:
                out[(r["verb"], r["resource"])] += r["count"]
            return out
        return parse_requests(fetch(self.metrics_url))

    def tail(self, n: int = 30) -> str:
        return logs.tail(self.log_path, n)

    def gc_pauses(self) -> dict[str, dict[str, float]]:
        """Ours only: per generation, the garbage collections so far, their seconds in all, and how
        many paused 50 ms or more (``python_gc_duration_seconds``; empty for the others)."""
        if self.metrics_url is None:
            return {}
        return gc_pauses(fetch(self.metrics_url))


def fetch(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|[+-]Inf)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, metric: str) -> Iterable[tuple[dict[str, str], float]]:
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == metric:
            yield dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))


def gc_pauses(text: str) -> dict[str, dict[str, float]]:
    """Per generation from an operator's ``python_gc_duration_seconds``: count, seconds, and
    ``slow``: the collections that paused 50 ms or more."""
    count = {lab["generation"]: v for lab, v in samples(text, "python_gc_duration_seconds_count")}
    total = {lab["generation"]: v for lab, v in samples(text, "python_gc_duration_seconds_sum")}
    fast = {
        lab["generation"]: v
        for lab, v in samples(text, "python_gc_duration_seconds_bucket")
        if lab.get("le") == "0.05"
    }
    return {
        g: {"count": n, "seconds": total.get(g, 0.0), "slow": n - fast.get(g, n)} for g, n in count.items()
    }


def gc_diff(
    after: Mapping[str, Mapping[str, float]], before: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """``after`` - ``before``, per generation and field."""
    return {
        g: {k: round(v - before.get(g, {}).get(k, 0.0), 4) for k, v in vals.items()}
        for g, vals in after.items()
    }


def parse_requests(text: str) -> Counter[tuple[str, str]]:
    """Request counts from an operator's /metrics: ours by (verb, resource); controller-runtime's
    ``rest_client_requests_total`` has only (method, code): resource is then ``*``."""
    out: Counter[tuple[str, str]] = Counter()
    ours = list(samples(text, "rest_client_requests_by_resource_total"))
    if ours:
        for labels, v in ours:
            out[(labels.get("verb", "?"), labels.get("resource", "?"))] += int(v)
        return out
    for labels, v in samples(text, "rest_client_requests_total"):
        out[(labels.get("method", "?").lower(), "*")] += int(v)
    return out


def writes(requests: Mapping[tuple[str, str], int]) -> int:
    return sum(n for (verb, _), n in requests.items() if verb in WRITE_VERBS)


def reads(requests: Mapping[tuple[str, str], int]) -> int:
    return sum(n for (verb, _), n in requests.items() if verb in READ_VERBS)


def diff(after: Counter[tuple[str, str]], before: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)})


def reference_binary() -> Path:
    script = REPO / "hack" / "build-reference-operator"
    common.log("building (or reusing) the Go reference operator")
    subprocess.run([str(script)], check=True, stdout=sys.stderr)
    out = subprocess.run([str(script), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "reference-operator"


#: the operator's child kinds in a run: the ones the raw writer and the reference build too
#: (Deployment, Service, HPA); ``--all-children`` adds its monitoring (ServiceMonitor,
#: PrometheusRule) and NetworkPolicy, as installed for production (the manifests' memory is sized
#: from such a run: docs/install.md, "Sizing")
DEFAULT_CHILDREN = ("--no-monitoring",)
ALL_CHILDREN = ("--monitoring", "--network-policy")


def operator_children(args: argparse.Namespace) -> Sequence[str]:
    return ALL_CHILDREN if args.all_children else DEFAULT_CHILDREN


def start_impl(
    name: str,
    kubeconfig: str,
    log_dir: Path,
    workers: int,
    concurrency: int,
    extra: Sequence[str] = (),
    tag: str = "",
    children: Sequence[str] = DEFAULT_CHILDREN,
    nice: int = 0,
) -> Impl:
    """Start one implementation; ``nice`` > 0: under ``nice -n`` (``--nice``)."""
    port = free_port()
    log_path = log_dir / f"{name}-{tag or concurrency or workers}.log"
    report: Path | None = None
    metrics: str | None = f"http://127.0.0.1:{port}/metrics"
    if name == "operator":
        cmd = [
            sys.executable, "-m", "mlops_platform.cli", "run", "--kubeconfig", kubeconfig,
            *children, "--workers", str(workers),
            "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", f"127.0.0.1:{port}",
            *common.NO_WEBHOOK_SERVER, *extra,
        ]  # fmt: skip
    elif name == "reference":
        cmd = [
            str(reference_binary()), "--kubeconfig", kubeconfig, "--workers", str(workers),
            "--kube-api-qps", "100000", "--kube-api-burst", "100000",
            "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", f"127.0.0.1:{port}",
        ]  # fmt: skip
    elif name == "raw":
        report = log_dir / f"raw-{concurrency}.json"
        metrics = None
        cmd = [
            sys.executable, "-m", "bench.raw_writer", "--kubeconfig", kubeconfig,
            "--namespace", NAMESPACE, "--concurrency", str(concurrency), "--report", str(report),
        ]  # fmt: skip
    else:
        raise ValueError(name)
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    common.log(f"starting {name}: {' '.join(cmd)}")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
    return Impl(name, proc, log_path, metrics, report, concurrency or workers)


async def wait_impl_started(impl: Impl, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if impl.proc.poll() is not None:
            raise SystemExit(f"{impl.name} exited with {impl.proc.returncode} at start:\n{impl.tail()}")
        text = impl.log_path.read_text(errors="replace")
        if impl.metrics_url is None:
            if "raw writer: watching" in text:
                return
        else:
            with contextlib.suppress(OSError):
                fetch(impl.metrics_url, timeout=2)
                # ours logs "caches synced"; controller-runtime "Starting workers"
                if '"caches synced"' in text or "Starting workers" in text:
                    return
        await asyncio.sleep(0.2)
    raise SystemExit(f"{impl.name} did not start within {timeout:.0f} s:\n{impl.tail()}")


def stop_impl(impl: Impl, timeout: float = 60.0) -> int | None:
    if impl.proc.poll() is None:
        impl.proc.send_signal(signal.SIGTERM)
        try:
            impl.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            impl.proc.kill()
            impl.proc.wait()
    return impl.proc.returncode


def running(impl: Impl | Group) -> bool:
    """True while every process of ``impl`` runs. One that exited ends the run (SystemExit, with its
    log's tail): what it can no longer do (the children of the InferenceServices left) is not
    waited for until the timeout."""
    for m in impl.members if isinstance(impl, Group) else [impl]:
        if m.proc.poll() is not None:
            raise SystemExit(f"{m.name} exited with {m.proc.returncode} during the run:\n{m.tail()}")
    return True


@dataclass
class Group:
    """``SHARDS`` operator replicas with ``--shards SHARDS``: one implementation, summed."""

    name: str
    members: list[Impl]
    dead_cpu: float = 0.0
    dead_requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    baseline: list[float] = field(default_factory=list)  # per member, when the load began

    def mark(self) -> None:
        self.baseline = [m.cpu() for m in self.members]

    def alive(self) -> list[Impl]:
        return [m for m in self.members if m.proc.poll() is None]

    def cpu(self) -> float:
        return self.dead_cpu + sum(m.cpu() for m in self.alive())

    def memory(self) -> tuple[int, int]:
        mem = [m.memory() for m in self.alive()]
        return sum(r for r, _ in mem), sum(h for _, h in mem)

    def requests(self) -> Counter[tuple[str, str]]:
        out = Counter(self.dead_requests)
        for m in self.alive():
            out.update(m.requests())
        return out

    def tail(self, n: int = 30) -> str:
        return "\n".join(m.tail(n // len(self.members)) for m in self.members)

    def gc_pauses(self) -> dict[str, dict[str, float]]:
        """The live members' garbage collections, summed per generation and field."""
        out: dict[str, dict[str, float]] = {}
        for m in self.alive():
            for g, vals in m.gc_pauses().items():
                for k, v in vals.items():
                    out.setdefault(g, {})[k] = out.get(g, {}).get(k, 0.0) + v
        return out

    def held(self) -> dict[int, list[int]]:
        """Per live member (its index): the partitions it holds, from its /metrics."""
        out = {}
        for i, m in enumerate(self.members):
            if m.proc.poll() is None and m.metrics_url:
                text = fetch(m.metrics_url)
                out[i] = sorted(
                    int(lb["partition"])
                    for lb, v in samples(text, "mlops_platform_shard_partition_held")
                    if v == 1
                )
        return out

    def kill(self, i: int) -> None:
        m = self.members[i]
        self.dead_cpu += m.cpu()
        self.dead_requests.update(m.requests())
        m.proc.kill()
        m.proc.wait()


def start_group(
    kubeconfig: str, log_dir: Path, workers: int, children: Sequence[str] = DEFAULT_CHILDREN, nice: int = 0
) -> Group:
    extra = [
        "--shards", str(SHARDS), "--leader-election-namespace", LEASE_NAMESPACE,
        "--lease-duration", str(LEASE_DURATION), "--retry-period", "1", "--leader-election-id", "bench",
    ]  # fmt: skip
    members = [
        start_impl(
            "operator", kubeconfig, log_dir, workers, 0, extra, tag=f"shard-{i}", children=children, nice=nice
        )
        for i in range(SHARDS)
    ]
    return Group("sharded", members)


# ---------------------------------------------------------------------------------------------------
# the benchmark's own eyes: watches of the InferenceServices and their children
# ---------------------------------------------------------------------------------------------------


class Observer:
    """Informers (this package's runtime) on the InferenceServices, Deployments, Services and HPAs
    of the namespace; counts what exists and what is Ready, and wakes waiters on every event."""

    def __init__(self, client: Client, expected_hpas: int) -> None:
        from mlops_platform import api
        from mlops_platform.runtime.caching import informer
        from mlops_platform.runtime.transport import resources

        self.expected_hpas = expected_hpas
        self.changed = asyncio.Event()
        self.informers = {
            "isvc": informer.Informer(client, api.RESOURCE, namespace=NAMESPACE),
            "deployments": informer.Informer(client, resources.DEPLOYMENT, namespace=NAMESPACE),
            "services": informer.Informer(client, resources.SERVICE, namespace=NAMESPACE),
            "hpas": informer.Informer(client, resources.HPA, namespace=NAMESPACE),
        }
        self.ready: set[str] = set()
        self.watchers: list[Callable[[str, Obj], None]] = []
        for kind, inf in self.informers.items():
            inf.add_event_handler(_Notify(self, kind))

    def start(self) -> None:
        for inf in self.informers.values():
            inf.start()

    async def stop(self) -> None:
        for inf in self.informers.values():
            await inf.stop()

    async def synced(self) -> None:
        for inf in self.informers.values():
            await inf.wait_for_sync(120)

    def count(self, kind: str) -> int:
        return len(self.informers[kind].store)

    def children_exist(self, n: int) -> bool:
        return (
            self.count("deployments") >= n
            and self.count("services") >= n
            and self.count("hpas") >= self.expected_hpas
        )

    def on_event(self, kind: str, obj: Obj) -> None:
        from mlops_platform.runtime import objects

        if kind == "isvc":
            if objects.condition_is(obj, "Ready"):
                self.ready.add(objects.name(obj))
            else:
                self.ready.discard(objects.name(obj))
        for w in self.watchers:
            w(kind, obj)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        """Wait until ``predicate()`` holds, re-checked on every event; the monotonic time it held."""
        deadline = time.monotonic() + timeout
        while not predicate():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not after {timeout:.0f} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        return time.monotonic()


class _Notify:
    def __init__(self, observer: Observer, kind: str) -> None:
        self.o, self.kind = observer, kind

    def on_add(self, obj: Obj) -> None:
        self.o.on_event(self.kind, obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.o.on_event(self.kind, new)

    def on_delete(self, obj: Obj) -> None:
        self.o.on_event(self.kind, obj)


# ---------------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------------


@dataclass
class Latency(common.Percentiles):
    samples_ms: list[float]
    #: per change, how long after its rollout its objects kept changing (the last event's time;
    #: measured when spec_changes waited for them to settle)
    tail_ms: list[float] | None = None
    #: per change, the implementation's own Deployment apply, request to answer (from its log:
    #: the operator's ``reconciled`` line, ``requests_ms``); None where it does not say
    apply_ms: list[float | None] | None = None
    #: per change, the API server's own time over that Deployment write (its audit log:
    #: :func:`server_applies`); None where the log has none
    server_ms: list[float | None] | None = None


@dataclass
class Run:
    impl: str
    count: int
    concurrency: int  # workers (operator, reference) or requests in flight (raw)
    round: int = 0  # which of --repeat's rounds (0-based)
    children_s: float | None = None
    ready_s: float | None = None
    cpu_s: float = 0.0  # CPU seconds from start to the end of the steady window
    converge_cpu_s: float = 0.0  # CPU seconds from the first create until settled
    rss_peak: int = 0
    rss_steady: int = 0
    requests: dict[str, int] = field(default_factory=dict)  # "verb resource" -> n, until settled
    steady_requests: dict[str, int] = field(default_factory=dict)
    apiserver_applies: dict[str, int] = field(default_factory=dict)  # resource -> APPLY count
    change_idle: Latency | None = None
    change_initial_sync: Latency | None = None
    initial_sync_s: float | None = None
    resync: dict[str, Any] | None = None
    shards: dict[str, Any] | None = None
    etcd_db_bytes: int | None = None
    etcd_db_in_use_bytes: int | None = None
    bytes_per_isvc: float | None = None
    list_ms: float | None = None
    exit_code: int | None = None
    failures: list[str] = field(default_factory=list)
    #: CPU seconds from the first create until all Ready: "machine" (every process, both CPUs),
    #: "impl" (the implementation) and each control-plane process (control_plane_cpu)
    cpu_until_ready: dict[str, float] = field(default_factory=dict)
    #: the same from the first create until all children existed (the rest of cpu_until_ready is the
    #: Ready phase after it)
    cpu_until_children: dict[str, float] = field(default_factory=dict)
    #: watch events the API server sent (to every watcher: the control plane's and the implementation's)
    #: from the first create until all Ready, per resource: [events, bytes]
    watch_until_ready: dict[str, list[int]] = field(default_factory=dict)
    #: the API server's pod writes from the first create until all Ready (:func:`pod_writes`)
    pod_writes_until_ready: dict[str, int] = field(default_factory=dict)
    #: what made watchers start over (:func:`watch_restarts`), over the same span
    watch_restarts_until_ready: dict[str, int] = field(default_factory=dict)
    #: the API server's ClusterIP allocations from the first create until all children existed
    #: (:func:`allocations`): count and seconds, in all and in their IPAddress POSTs and etcd creates
    allocations_until_children: dict[str, float] = field(default_factory=dict)
    #: every request the API server served from the first create until all children existed
    #: (:func:`server_requests`: every client's), "<VERB> <resource>" -> [count, handler seconds]
    server_requests_until_children: dict[str, list[float]] = field(default_factory=dict)
    #: the same from the first create until all Ready
    server_requests_until_ready: dict[str, list[float]] = field(default_factory=dict)
    #: ours: garbage collections during the idle spec changes, per generation (count, seconds,
    #: slow = paused >= 50 ms); Impl.gc_pauses
    gc_during_changes: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the API server's own latencies of the Deployment and InferenceService writes during the idle
    #: spec changes (every writer's: the implementation's and the control plane's); latency_summary
    server_during_changes: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def writes_per_isvc(self) -> float:
        return sum(n for k, n in self.requests.items() if k.split()[0] in WRITE_VERBS) / self.count


def _key(k: tuple[str, str]) -> str:
    return f"{k[0]} {k[1]}"


async def apiserver_metrics(client: Client) -> str:
    return await client.request_text("/metrics")


def apiserver_applies(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for labels, v in samples(text, "apiserver_request_total"):
        if labels.get("verb") == "APPLY":
            sub = labels.get("subresource", "")
            out[labels.get("resource", "?") + (f"/{sub}" if sub else "")] += int(v)
    return out


def server_requests(text: str) -> dict[str, tuple[int, float]]:
    """Every request the API server served so far, keyed "<VERB> <resource>[/<subresource>]"
    (``apiserver_request_total``, every client's: the implementation's and the control plane's):
    (count, seconds its handler took in all, from ``apiserver_request_duration_seconds``; a WATCH
    counts once it ended, with the seconds it lasted: a span, not work)."""
    counts: Counter[str] = Counter()
    seconds: dict[str, float] = {}

    def key(labels: dict[str, str]) -> str:
        sub = labels.get("subresource", "")
        return f"{labels.get('verb', '?')} {labels.get('resource', '?')}" + (f"/{sub}" if sub else "")

    for labels, v in samples(text, "apiserver_request_total"):
        counts[key(labels)] += int(v)
    for labels, v in samples(text, "apiserver_request_duration_seconds_sum"):
        seconds[key(labels)] = seconds.get(key(labels), 0.0) + v
    return {k: (counts[k], seconds.get(k, 0.0)) for k in counts}


def server_requests_diff(
    after: dict[str, tuple[int, float]], before: dict[str, tuple[int, float]]
) -> dict[str, list[float]]:
    """``after - before`` of :func:`server_requests`, the kinds with requests in between, most
    handler seconds first."""
    out = {}
    for k, (n, s) in after.items():
        n0, s0 = before.get(k, (0, 0.0))
        if n > n0:
            out[k] = [n - n0, round(s - s0, 3)]
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))


def pod_writes(text: str) -> Counter[str]:
    """The API server's pod writes so far by verb and subresource (``apiserver_request_total``):
    who writes pods is the control plane (the ReplicaSet controller creates and deletes them, the
    scheduler binds them, kwok plays the kubelet and writes their status), never an implementation;
    a run that writes pods more often than another of the same N points at the control plane."""
    out: Counter[str] = Counter()
    for labels, v in samples(text, "apiserver_request_total"):
        verb = labels.get("verb", "")
        if labels.get("resource") == "pods" and verb in ("POST", "PATCH", "PUT", "DELETE", "APPLY"):
            sub = labels.get("subresource", "")
            out[verb + (f" {sub}" if sub else "")] += int(v)
    return out


#: what :func:`allocations` reads: the allocator's own duration, and the API server's handling of the
#: IPAddress create it makes (request duration; of it, the etcd create)
ALLOCATION_METRICS = {
    "seconds": ("kube_apiserver_clusterip_allocator_allocation_duration_seconds", {}),
    "post_seconds": (
        "apiserver_request_duration_seconds",
        {"resource": "ipaddresses", "verb": "POST", "subresource": ""},
    ),
    "etcd_seconds": ("etcd_request_duration_seconds", {"resource": "ipaddresses", "operation": "create"}),
}


def allocations(text: str) -> dict[str, float]:
    """The API server's ClusterIP allocations so far: ``count`` and ``seconds`` in all
    (``kube_apiserver_clusterip_allocator_allocation_duration_seconds``), and the seconds of the
    IPAddress creates they made, as the API server's handler (``post_seconds``) and etcd
    (``etcd_seconds``) timed them.

    Why it is measured: every Service of type ClusterIP gets its address from one allocator that
    holds a lock across the create of the address's IPAddress object (k8s.io/kubernetes
    ``pkg/registry/core/service/ipallocator``, ``MetaAllocator.AllocateNextService``), so Service
    creates are served one at a time whatever the number in flight; while the allocator is busy all
    the time, the seconds of its allocations are the time until all children exist."""
    out = {"count": sum(v for _, v in samples(text, ALLOCATION_METRICS["seconds"][0] + "_count"))}
    for key, (metric, want) in ALLOCATION_METRICS.items():
        out[key] = sum(
            v
            for labels, v in samples(text, metric + "_sum")
            if all(labels.get(k, "") == w for k, w in want.items())
        )
    return out


#: the API server's histograms of the writes a spec change makes: its own request duration by verb
#: and resource, and its etcd requests' duration by operation and resource
SERVER_LATENCIES = {
    "apiserver_request_duration_seconds_bucket": ("verb", ("APPLY", "PATCH", "UPDATE", "CREATE")),
    "etcd_request_duration_seconds_bucket": ("operation", ("create", "update")),
}
SERVER_LATENCY_RESOURCES = ("deployments", "inferenceservices")


def server_latencies(text: str) -> dict[str, dict[str, float]]:
    """Cumulative bucket counts (``le`` -> requests) of the API server's request and etcd
    durations of writes to Deployments and InferenceServices, keyed ``"apiserver APPLY
    deployments"``, ``"apiserver APPLY inferenceservices/status"``, ``"etcd update deployments"``."""
    out: dict[str, dict[str, float]] = {}
    for metric, (label, verbs) in SERVER_LATENCIES.items():
        for labels, v in samples(text, metric):
            resource = labels.get("resource", "")
            if labels.get(label) not in verbs or resource not in SERVER_LATENCY_RESOURCES:
                continue
            sub = labels.get("subresource", "")
            key = f"{metric.split('_')[0]} {labels[label]} {resource}" + (f"/{sub}" if sub else "")
            buckets = out.setdefault(key, {})
            buckets[labels["le"]] = buckets.get(labels["le"], 0.0) + v
    return out


def latency_summary(
    after: Mapping[str, Mapping[str, float]], before: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Per key of :func:`server_latencies`, the requests between the two snapshots: ``count``,
    ``over_50ms`` and ``over_100ms`` (requests slower than that, read off the buckets), and
    ``p50_le`` / ``p99_le``: the upper bound in seconds of the bucket holding that percentile."""
    out: dict[str, dict[str, float]] = {}
    for key, buckets in after.items():
        cum = sorted(
            ((float(le), n - before.get(key, {}).get(le, 0.0)) for le, n in buckets.items()),
            key=lambda b: b[0],
        )
        count = cum[-1][1] if cum else 0.0
        if count <= 0:
            continue
        upto = dict(cum)
        out[key] = {
            "count": count,
            "over_50ms": count - upto.get(0.05, count),
            "over_100ms": count - upto.get(0.1, count),
            "p50_le": next(le for le, n in cum if n >= 0.5 * count),
            "p99_le": next(le for le, n in cum if n >= 0.99 * count),
        }
    return out


def watch_events(text: str) -> dict[str, tuple[int, int]]:
    """The API server's watch events sent so far, per resource (``group/resource``, core: the
    resource): (events, bytes); every watcher's, from ``apiserver_watch_events_total`` and
    ``apiserver_watch_events_sizes``."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for labels, v in samples(text, "apiserver_watch_events_total"):
        counts[_group_resource(labels)] += int(v)
    for labels, v in samples(text, "apiserver_watch_events_sizes_sum"):
        sizes[_group_resource(labels)] += int(v)
    return {k: (counts[k], sizes[k]) for k in counts}


def watch_restarts(text: str) -> Counter[str]:
    """What the API server did so far that makes watchers start over, keyed "<what> <resource>":
    ``closed`` watchers that did not keep up (its watch cache could not hand them an event within
    its time budget: ``apiserver_terminated_watchers_total``; while the cache waits for such a
    watcher every other watcher of that resource waits too, and a closed one watches anew, or lists
    again when its version has left the cache's window); the pod ``LIST`` requests and the pod
    ``WATCH`` requests that ended (``apiserver_request_total``: a client that lists again); the
    ``init events`` sent to watches that start from a full state (``apiserver_init_events_total``:
    the control plane's informers list again through a watch); and its watch caches ``initialized``
    (``apiserver_watch_cache_initializations_total``: more than once when its etcd watch broke)."""
    out: Counter[str] = Counter()
    for labels, v in samples(text, "apiserver_terminated_watchers_total"):
        out[f"closed {_group_resource(labels)}"] += int(v)
    for labels, v in samples(text, "apiserver_init_events_total"):
        out[f"init events {_group_resource(labels)}"] += int(v)
    for labels, v in samples(text, "apiserver_watch_cache_initializations_total"):
        out[f"initialized {_group_resource(labels)}"] += int(v)
    for labels, v in samples(text, "apiserver_request_total"):
        verb = labels.get("verb", "")
        if labels.get("resource") == "pods" and not labels.get("subresource") and verb in ("LIST", "WATCH"):
            out[f"{verb} pods"] += int(v)
    return out


def _group_resource(labels: Mapping[str, str]) -> str:
    resource = labels.get("resource") or labels.get("kind") or "?"
    return f"{labels['group']}/{resource}" if labels.get("group") else resource


def watch_diff(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
    out = {}
    for k, (n, b) in after.items():
        n0, b0 = before.get(k, (0, 0))
        if n > n0:
            out[k] = [n - n0, b - b0]
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))


def keep_kwok_log(cluster: str, to: Path) -> None:
    """Copy kwok-controller's log (kwok plays every kubelet: a line per pod it patches) out of the
    cluster's directory, which the next run's fresh cluster removes."""
    from mlops_platform.devcluster import cluster as dev

    kwok_log = dev.cluster_dir(cluster) / "logs" / "kwok-controller.log"
    if kwok_log.exists():
        shutil.copyfile(kwok_log, to)


def audit_lines(cluster: str) -> Iterator[str]:
    """The API server's audit log of ``cluster``, line by line, the rotated file first."""
    from mlops_platform.devcluster import cluster as dev

    for path in dev.audit_logs(cluster):
        with path.open(errors="replace") as lines:
            yield from lines


def etcd_sizes(cluster: str) -> tuple[int | None, int | None]:
    from mlops_platform.devcluster import chaos

    try:
        text = fetch(chaos.etcd_endpoint(cluster) + "/metrics")
    except (OSError, LookupError) as e:
        common.log(f"etcd metrics unavailable: {e}")
        return None, None
    total = next((int(v) for _, v in samples(text, "etcd_mvcc_db_total_size_in_bytes")), None)
    in_use = next((int(v) for _, v in samples(text, "etcd_mvcc_db_total_size_in_use_in_bytes")), None)
    return total, in_use


async def list_latency_ms(client: Client, repeat: int = 5) -> float:
    from mlops_platform import api

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        cont: str | None = None
        while True:
            page = await client.list(api.RESOURCE, NAMESPACE, limit=500, continue_=cont)
            cont = page["metadata"].get("continue")
            if not cont:
                break
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def create_all(client: Client, n: int, concurrency: int, bar: tqdm[Any]) -> None:
    from mlops_platform import api

    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await client.create(api.RESOURCE, inference_service(NAMESPACE, i), NAMESPACE)
            bar.update()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def wait_quiet(impl: Impl | Group, quiet: float, timeout: float) -> float:
    """Until the implementation's CPU stays at idle (under 20 ms per second per process: clock
    ticks are 10 ms, and sharded replicas poll their Leases) for ``quiet`` seconds."""
    processes = len(impl.members) if isinstance(impl, Group) else 1
    t0 = time.monotonic()
    last, since = impl.cpu(), time.monotonic()
    while time.monotonic() - t0 < timeout:
        await asyncio.sleep(1.0)
        now = impl.cpu()
        if now - last > 0.02 * processes:
            since = time.monotonic()
        last = now
        if time.monotonic() - since >= quiet:
            return time.monotonic() - t0
    common.log(f"{impl.name} never went quiet within {timeout:.0f} s")
    return time.monotonic() - t0


async def spec_changes(
    client: Client,
    observer: Observer,
    names: Sequence[str],
    tag: str,
    timeout: float,
    settle: float = 0.0,
    patched: list[tuple[str, float]] | None = None,
) -> Latency:
    """One spec change at a time (``spec.predictor.model.uri`` -> a new value): the time from the
    patch's answer until this benchmark's watch sees the Deployment carry it. The next change waits
    until that rollout is complete (the Deployment controller done) and, with ``settle`` > 0, until
    neither the InferenceService nor its Deployment has changed for ``settle`` seconds: the
    rollout's tail (the old pod deleted, the implementation's status writes that follow it) is
    over, so the change meets an idle cluster. Without it the next patch lands on that tail: in the
    operator's log of 100 such changes at N=5000, 83 of the 99 changes after the first started
    their reconcile within 30 ms of the previous change's last status write (all within 76 ms; the
    median 1 ms after it), and each change was followed by 2-4 more status writes, the last
    0.4-1.8 s after its Deployment's update. The tails (the last event after the rollout) are kept
    in ``tail_ms`` (``None`` when not waited for). ``patched`` gets (name, wall-clock time) of each
    patch's answer, to find the change in the implementation's log (:func:`deployment_applies`)."""
    from mlops_platform import api

    # this process holds N objects of every kind too: a full collection of its heap (about 0.3 s
    # at N=5000) would land in the measured latency. Its objects so far are long-lived: freeze them.
    gc.collect()
    gc.freeze()
    deployments = observer.informers["deployments"].store

    def rolled_out(name: str) -> bool:
        dep = deployments.get(NAMESPACE, f"{name}-predictor")
        if dep is None:
            return False
        st, want = dep.get("status") or {}, (dep.get("spec") or {}).get("replicas", 1)
        return bool(
            st.get("observedGeneration", 0) >= dep["metadata"].get("generation", 0)
            and st.get("updatedReplicas", 0)
            == st.get("replicas", 0)
            == st.get("availableReplicas", 0)
            == want
        )

    seen: dict[str, float] = {}
    wanted: dict[str, str] = {}
    last_event: dict[str, float] = {}  # name -> when its InferenceService or Deployment last changed

    def watch(kind: str, obj: Obj) -> None:
        if kind not in ("deployments", "isvc"):
            return
        name = obj["metadata"]["name"].removesuffix("-predictor")
        last_event[name] = time.monotonic()
        if kind != "deployments":
            return
        uri = (obj["metadata"].get("annotations") or {}).get("mlops.platform/model-uri")
        if name in wanted and uri == wanted[name] and name not in seen:
            seen[name] = time.monotonic()

    observer.watchers.append(watch)
    out: list[float] = []
    tails: list[float] = []
    try:
        for name in tqdm(names, desc=f"spec changes ({tag})", unit="change", leave=False):
            uri = f"s3://models/bench/{name}/{tag}"
            wanted[name] = uri
            change = {"spec": {"predictor": {"model": {"uri": uri}}}}  # a merge patch: the rest stays
            await client.patch(api.RESOURCE, name, change, namespace=NAMESPACE)
            t0 = time.monotonic()
            if patched is not None:
                patched.append((name, time.time()))
            await observer.until(lambda n=name: n in seen, timeout, f"{name} carries {uri}")  # type: ignore[misc]
            out.append(max(0.0, seen[name] - t0) * 1000)
            rolled = await observer.until(lambda n=name: rolled_out(n), timeout, f"{name} rolled out")  # type: ignore[misc]
            if settle > 0:
                await quiet_for(lambda n=name: last_event.get(n, 0.0), settle, timeout, name)  # type: ignore[misc]
                tails.append(round(max(0.0, last_event.get(name, 0.0) - rolled) * 1000, 1))
    finally:
        observer.watchers.remove(watch)
    return Latency(out, tails if settle > 0 else None)


def deployment_applies(log_lines: Iterable[str], patched: Sequence[tuple[str, float]]) -> list[float | None]:
    """Per spec change ((name, wall-clock time of its patch's answer)), how long the operator's
    apply of that InferenceService's Deployment took, request to answer: ``requests_ms`` of the first
    ``reconciled`` line of that name that updated its Deployment, logged at most a second before the
    patch's answer (the reconcile can end before this benchmark reads the answer). None where no
    such line is (an implementation that does not log it)."""
    by_name: dict[str, list[tuple[float, float]]] = {}
    for rec in _json_lines(log_lines, '"reconciled"', "requests_ms"):
        key = f"Deployment/{rec.get('name')}-predictor"
        ms = (rec.get("requests_ms") or {}).get(key)
        if rec.get("msg") != "reconciled" or ms is None or f"update {key}" not in rec.get("actions", ()):
            continue
        by_name.setdefault(rec["name"], []).append((_utc(rec["ts"]), float(ms)))
    return _first_after(by_name, patched)


def server_applies(audit_lines: Iterable[str], patched: Sequence[tuple[str, float]]) -> list[float | None]:
    """Per spec change ((name, wall-clock time of its patch's answer)), how long the API server took
    over the first write of that InferenceService's Deployment after it (any writer's ``patch`` of
    ``deployments``, not a subresource: only the implementation patches a Deployment's spec; the
    Deployment controller updates), from the audit log (:data:`devcluster.clusterconfig.AUDIT_POLICY`:
    ``requestReceivedTimestamp`` to ``stageTimestamp`` of ``ResponseComplete``, microseconds): the
    server's share of the implementation's apply, against which its own request-to-answer time
    shows what the way there and back and the client cost. Received at most a second before the
    patch's answer, as :func:`deployment_applies`; None where the log has none."""
    by_name: dict[str, list[tuple[float, float]]] = {}
    for entry in _json_lines(audit_lines, '"deployments"', '"patch"'):
        ref = entry.get("objectRef") or {}
        if entry.get("verb") != "patch" or ref.get("resource") != "deployments" or ref.get("subresource"):
            continue
        received = _utc(entry["requestReceivedTimestamp"])
        ms = round((_utc(entry["stageTimestamp"]) - received) * 1000, 1)
        by_name.setdefault(str(ref.get("name", "")).removesuffix("-predictor"), []).append((received, ms))
    return _first_after(by_name, patched)


def _json_lines(lines: Iterable[str], *needles: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of the lines holding every one of ``needles`` (a cheap filter before
    parsing); lines that are not JSON objects are skipped."""
    for line in lines:
        if all(n in line for n in needles):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def _first_after(
    by_name: Mapping[str, Sequence[tuple[float, float]]], patched: Sequence[tuple[str, float]]
) -> list[float | None]:
    """Per (name, wall-clock time), the value of that name's earliest (time, value) from a second
    before that time on, or None."""
    out: list[float | None] = []
    for name, at in patched:
        later = sorted(x for x in by_name.get(name, ()) if x[0] >= at - 1.0)
        out.append(later[0][1] if later else None)
    return out


def _utc(stamp: str) -> float:
    """An RFC 3339 timestamp ("...Z") as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


_REAL_CLOCK = RealClock()


async def quiet_for(
    last: Callable[[], float], quiet: float, timeout: float, what: str, clock: Clock = _REAL_CLOCK
) -> float:
    """Until ``quiet`` seconds have passed since ``last()`` (the time on ``clock`` of the latest
    event, re-read after each wait: an event meanwhile moves the end); the time it held."""
    deadline = clock.now() + timeout
    while (left := last() + quiet - clock.now()) > 0:
        if clock.now() + left > deadline:
            raise TimeoutError(f"{what}: still changing after {timeout:.0f} s")
        await clock.sleep(left)
    return clock.now()


#: the local control plane's processes (kwokctl's binary runtime: <cluster dir>/bin/<name>)
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


def control_plane_cpu(cluster: str) -> dict[str, float]:
    """CPU seconds so far of each control-plane process of ``cluster``."""
    out: dict[str, float] = {}
    for pid in common.pids_naming(f"/clusters/{cluster}/bin/"):
        try:
            name = common.command_name(pid)
            if name in CONTROL_PLANE:
                out[name] = out.get(name, 0.0) + common.read_proc(pid).cpu_seconds
        except OSError:  # gone meanwhile
            continue
    return out


def cpu_snapshot(cluster: str, impl: Impl | Group) -> dict[str, float]:
    return {"machine": common.read_machine().busy_seconds, "impl": impl.cpu(), **control_plane_cpu(cluster)}


def cpu_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds spent between two :func:`cpu_snapshot` (or two spans from the same start)."""
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}


def nodes_for(n: int) -> int:
    # one pod per InferenceService (minReplicas 1) + 20 % headroom, 250 pods per fake node; the 2
    # GPU nodes take pods too but are not counted
    return max(3, math.ceil(n * 1.2 / PODS_PER_NODE))


def fresh_cluster(name: str, n: int) -> str:
    common.dev_cluster_down(name)
    # no metrics-server (and upstream's HPA timing): the cluster the recorded figures were taken on;
    # with it, half of N InferenceServices' HPAs would be synced every 5 s against real metrics
    cmd = [*common.cli_binary(), "dev", "up", "--name", name, "--nodes", str(nodes_for(n)), "--unthrottled"]
    cmd += ["--without-metrics-server", "--real-nodes", "0"]  # thousands of pods: kwok nodes only
    common.log(f"fresh cluster: {' '.join(cmd)}")
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


async def one_run(args: argparse.Namespace, impl_name: str, n: int, concurrency: int, log_dir: Path) -> Run:
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    kubeconfig = fresh_cluster(args.cluster_name, n)
    run = Run(impl_name, n, concurrency)
    expected_hpas = sum(1 for i in range(n) if max_replicas(inference_service(NAMESPACE, i)) > 1)
    async with rclient.Client.from_kubeconfig(kubeconfig) as client:
        await common.install_crd(client)
        if failure := await check_stored_versions(client, "after the CRD was installed"):
            raise SystemExit(failure)  # not a fresh cluster: reading those objects would need the webhook
        await client.create(resources.NAMESPACE, {"metadata": {"name": NAMESPACE}})
        observer = Observer(client, expected_hpas)
        observer.start()
        await observer.synced()
        impl: Impl | Group
        if impl_name == "sharded":
            await client.create(resources.NAMESPACE, {"metadata": {"name": LEASE_NAMESPACE}})
            impl = start_group(kubeconfig, log_dir, args.workers, operator_children(args), args.nice)
        else:
            impl = start_impl(
                impl_name,
                kubeconfig,
                log_dir,
                args.workers,
                concurrency if impl_name == "raw" else 0,
                children=operator_children(args),
                nice=args.nice,
            )
        try:
            if isinstance(impl, Group):
                for m in impl.members:
                    await wait_impl_started(m)
                await wait_partitions(impl, SHARDS, 120)
            else:
                await wait_impl_started(impl)
            cpu0 = impl.cpu()
            if isinstance(impl, Group):
                impl.mark()
            before = impl.requests()
            text0 = await apiserver_metrics(client)
            api0, watch0, pods0 = apiserver_applies(text0), watch_events(text0), pod_writes(text0)
            restarts0, alloc0 = watch_restarts(text0), allocations(text0)
            served0 = server_requests(text0)
            cpu_at_start = cpu_snapshot(args.cluster_name, impl)
            t0 = time.monotonic()
            with tqdm(total=n, desc=f"{impl_name} N={n}: create", unit="isvc", leave=False) as bar:
                creating = asyncio.create_task(create_all(client, n, args.create_concurrency, bar))
                try:
                    t_children = await observer.until(
                        lambda: running(impl) and observer.children_exist(n),
                        args.timeout,
                        "all children exist",
                    )
                except BaseException:
                    creating.cancel()  # the run ends here: no creates into the next run's cluster
                    raise
                run.children_s = t_children - t0
                cpu_at_children = cpu_snapshot(args.cluster_name, impl)
                text_children = await apiserver_metrics(client)
                alloc = allocations(text_children)
                run.allocations_until_children = {
                    k: round(v - alloc0[k], 3) for k, v in sorted(alloc.items())
                }
                run.server_requests_until_children = server_requests_diff(
                    server_requests(text_children), served0
                )
                await creating
            common.log(f"{impl_name} N={n}: all children exist after {run.children_s:.1f} s")
            with tqdm(total=n, desc=f"{impl_name} N={n}: Ready", unit="isvc", leave=False) as bar:

                def all_ready() -> bool:
                    bar.update(len(observer.ready) - bar.n)
                    return running(impl) and len(observer.ready) >= n

                run.ready_s = await observer.until(all_ready, args.timeout, "all Ready") - t0
            cpu_at_ready = cpu_snapshot(args.cluster_name, impl)
            text_ready = await apiserver_metrics(client)
            run.watch_until_ready = watch_diff(watch_events(text_ready), watch0)
            run.server_requests_until_ready = server_requests_diff(server_requests(text_ready), served0)
            run.pod_writes_until_ready = dict(sorted((pod_writes(text_ready) - pods0).items()))
            run.watch_restarts_until_ready = dict(sorted((watch_restarts(text_ready) - restarts0).items()))
            run.cpu_until_ready = cpu_between(cpu_at_start, cpu_at_ready)
            run.cpu_until_children = cpu_between(cpu_at_start, cpu_at_children)
            common.log(
                f"{impl_name} N={n}: all Ready after {run.ready_s:.1f} s; CPU s: {run.cpu_until_ready}"
            )
            await wait_quiet(impl, args.quiet_seconds, args.timeout)
            run.converge_cpu_s = impl.cpu() - cpu0
            settled = impl.requests()
            run.requests = {_key(k): v for k, v in sorted(diff(settled, before).items())}
            api1 = apiserver_applies(await apiserver_metrics(client))
            run.apiserver_applies = dict(sorted((api1 - api0).items()))
            await asyncio.sleep(args.idle_seconds)  # the steady window itself: nothing may happen
            run.steady_requests = {_key(k): v for k, v in sorted(diff(impl.requests(), settled).items())}
            run.rss_steady, run.rss_peak = impl.memory()
            if impl_name != "raw" and args.changes:
                names = [f"bench-{i:04d}" for i in range(0, n, max(1, n // args.changes))][: args.changes]
                gc0 = impl.gc_pauses()
                server0 = server_latencies(await apiserver_metrics(client))
                patched: list[tuple[str, float]] = []
                run.change_idle = await spec_changes(
                    client, observer, names, "idle", 60, args.settle_seconds, patched
                )
                if isinstance(impl, Impl) and impl.name == "operator":
                    with impl.log_path.open(errors="replace") as lines:
                        run.change_idle.apply_ms = deployment_applies(lines, patched)
                run.change_idle.server_ms = server_applies(audit_lines(args.cluster_name), patched)
                run.gc_during_changes = gc_diff(impl.gc_pauses(), gc0)
                run.server_during_changes = latency_summary(
                    server_latencies(await apiserver_metrics(client)), server0
                )
                tails = run.change_idle.tail_ms
                settling = (
                    f"each after the one before was quiet for {args.settle_seconds:.1f} s (its last event "
                    f"p50 {common.percentile(tails, 50):.0f} / max {max(tails):.0f} ms after its rollout)"
                    if tails
                    else "no settling between them"
                )
                common.log(f"{impl_name} N={n}: spec change at idle p50 {run.change_idle.p50:.0f} ms, "
                    f"p99 {run.change_idle.p99:.0f} ms; {settling}; garbage collections meanwhile "
                    f"{run.gc_during_changes or '(not measured)'}")  # fmt: skip
                await wait_quiet(impl, args.quiet_seconds, args.timeout)
            if isinstance(impl, Group):
                run.shards = await failover(args, client, observer, impl, cpu0)
            elif impl_name == "operator" and n in args.resync_counts:
                run.resync = await forced_resync(impl, args)
                impl = await restart_with_changes(args, client, observer, impl, run, kubeconfig, log_dir)
            run.cpu_s = impl.cpu()
            run.rss_peak = max(run.rss_peak, impl.memory()[1])
        finally:
            if isinstance(impl, Group):
                run.exit_code = max((stop_impl(m) or 0) for m in impl.members)
            else:
                run.exit_code = stop_impl(impl)
            if isinstance(impl, Impl) and impl.name == "raw":
                run.requests = {_key(k): v for k, v in sorted(impl.requests().items())}
                run.steady_requests = {}
        run.etcd_db_bytes, run.etcd_db_in_use_bytes = etcd_sizes(args.cluster_name)
        keep_kwok_log(
            args.cluster_name, log_dir / f"kwok-controller-{impl_name}-{n}-{time.strftime('%H%M%S')}.log"
        )
        if run.etcd_db_in_use_bytes:
            run.bytes_per_isvc = run.etcd_db_in_use_bytes / n
        run.list_ms = await list_latency_ms(client)
        if failure := await check_same_children(client, n):
            common.log(f"{impl_name} N={n}: {failure}")
            run.failures.append(failure)
        # the raw writer writes status.compute's status at two moments only (its children created,
        # its Deployment available), not the HPA's later conditions: not compared at the end
        if impl_name != "raw" and (
            failure := await check_same_status(client, n, all_children=args.all_children)
        ):
            common.log(f"{impl_name} N={n}: {failure}")
            run.failures.append(failure)
        await observer.stop()
        if failure := await check_stored_versions(client, "at the end of the run"):
            common.log(f"{impl_name} N={n}: {failure}")
            run.failures.append(failure)
    return run


async def check_same_children(client: Client, n: int) -> str | None:
    """Why the run fails if the implementation's Deployments are not the ones our builders make (the
    comparison is only fair on the same children: the reference once left the storage initializer
    out, and its pods were 1-2 KB lighter for the whole control plane), for one InferenceService of
    each runtime, read at the end of the run; else None. The comparison is the operator's own
    (:func:`mlops_platform.runtime.diff.differences`: every field our builder sets, API server
    defaults beside them allowed, lists of the same length)."""
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import children
    from mlops_platform.controllers.inferenceservice.children import base
    from mlops_platform.runtime import diff
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    build = children.deployment.CHILD
    problems = []
    for i in range(min(n, len(FRAMEWORKS))):
        try:
            raw = await client.get(api.RESOURCE, f"bench-{i:04d}", NAMESPACE)
            target = base.slots(api.decode(raw), children.CHILDREN)[0].target
            ours = build.build(target, base.BuildContext())
            live = await client.get(resources.DEPLOYMENT, build.name(target), NAMESPACE)
        except rclient.ApiError as e:  # a run's failure, not the matrix's end
            problems.append(f"bench-{i:04d}: {e}")
            continue
        if ours is None:
            problems.append(f"{build.name(target)}: not one of our children")
            continue
        diffs = diff.differences(ours["spec"]["template"], live["spec"]["template"])
        problems += [f"{build.name(target)} template.{d}" for d in diffs[:5]]
    return f"not the children our builders make: {'; '.join(problems)}" if problems else None


#: the status fields :func:`check_same_status` compares (every one the operator writes but
#: ``lastReconcileTime``, a time)
STATUS_FIELDS = (
    "observedGeneration",
    "replicas",
    "readyReplicas",
    "replicasSummary",
    "selector",
    "url",
    "activeVersion",
)


async def check_same_status(client: Client, n: int, *, all_children: bool = False) -> str | None:
    """Why the run fails if the implementation's InferenceService status is not the one the operator
    computes from the same live children (``status.compute``: its conditions' type, status, reason
    and message and every field but ``lastReconcileTime``), for one InferenceService of each runtime
    (one of them with an HPA), read at the end of the run; else None. A status is stored, validated
    and sent on every write and watch event, and its weight shows in the API server's CPU (seven
    conditions cost it about 3 ms more per status write than one, docs/measurements.md): the
    reference wrote Ready alone until 2026-12-05. ``all_children``: the operator ran with
    :data:`ALL_CHILDREN` (its monitoring and NetworkPolicy children on), else with
    :data:`DEFAULT_CHILDREN`."""
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import status
    from mlops_platform.controllers.inferenceservice.children import base
    from mlops_platform.runtime.transport import client as rclient

    ctx = base.BuildContext(monitoring=all_children, network_policy=all_children)
    problems = []
    for i in range(min(n, len(FRAMEWORKS))):
        name = f"bench-{i:04d}"
        try:
            raw = await client.get(api.RESOURCE, name, NAMESPACE)
            isvc = api.decode(raw)
            observed = []
            for slot, want in common.desired_children(isvc, ctx):
                live = None
                if want is not None:
                    try:
                        live = await client.get(slot.child.kind.resource(), slot.name, NAMESPACE)
                    except rclient.ApiError as e:
                        if e.status != 404:
                            raise
                observed.append(status.Observed(slot, want, live))
        except rclient.ApiError as e:  # a run's failure, not the matrix's end
            problems.append(f"{name}: {e}")
            continue
        have = raw.get("status") or {}
        ours = status.compute(isvc, have, observed, [], None, ctx)
        for f in STATUS_FIELDS:
            if have.get(f) != ours.get(f):
                problems.append(f"{name} status.{f} {have.get(f)!r}, ours {ours.get(f)!r}")
        shape = ("type", "status", "reason", "message")
        got = [tuple(c.get(k) for k in shape) for c in have.get("conditions") or []]
        want_conds = [tuple(c.get(k) for k in shape) for c in ours["conditions"]]
        for c in sorted(set(got) ^ set(want_conds)):
            which = "has" if c in got else "lacks"
            problems.append(f"{name} {which} condition {'/'.join(str(x) for x in c)}")
    return f"not the status the operator computes: {'; '.join(problems[:8])}" if problems else None


async def check_stored_versions(client: Client, when: str) -> str | None:
    """Why the run fails if anything was stored at a version other than v1 (the CRD's
    ``status.storedVersions`` is not ``["v1"]``): the benchmark creates and reads only v1, the storage
    version, so that no request goes through the conversion webhook; else None."""
    from mlops_platform import api

    stored = await common.stored_versions(client)
    if stored == [api.v1.VERSION]:
        return None
    return f"InferenceServices stored at {stored} {when}, not only at {api.v1.VERSION}: not v1 traffic only"


async def wait_partitions(group: Group, want: int, timeout: float) -> float:
    """Until the live members hold ``want`` partitions between them, each exactly once."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        held = [p for parts in group.held().values() for p in parts]
        if sorted(held) == list(range(want)):
            return time.monotonic() - t0
        await asyncio.sleep(0.2)
    raise TimeoutError(f"partitions not all held after {timeout:.0f} s: {group.held()}")


#: the replicas' log lines that date a takeover's steps (their "msg"), in the order they happen
TAKEOVER_STEPS = (
    "listing ahead the partitions about to be taken",
    "attempting to acquire leader lease",
    "successfully acquired lease",
    "scope re-listed",
    "partition acquired",
)


def takeover_timeline(group: Group, since: float, lease: str, partition: int) -> list[dict[str, Any]]:
    """From the live replicas' JSON logs: when (seconds after ``since``, a wall-clock time) each
    step of taking ``partition`` (Lease ``lease``) happened, and in which replica."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(group.members):
        if m.proc.poll() is not None:
            continue
        for doc in _json_lines(m.log_path.read_text(errors="replace").splitlines()):
            msg, ts = str(doc.get("msg", "")), doc.get("ts")
            if not ts or not any(msg.startswith(step) for step in TAKEOVER_STEPS):
                continue
            if "lease" in msg and not msg.rstrip().split(" as ")[0].endswith(lease):
                continue
            if msg.startswith(("listing", "partition", "scope")) and partition not in (
                doc.get("partitions") or [doc.get("partition")]
            ):
                continue
            at = _utc(str(ts)) - since
            if at >= 0:
                step = msg.split(" %")[0][:60]
                if "seconds" in doc:
                    step += f" (in {doc['seconds']} s)"
                out.append({"replica": i, "s": round(at, 2), "step": step})
    return sorted(out, key=lambda e: e["s"])


async def failover(
    args: argparse.Namespace, client: Client, observer: Observer, group: Group, cpu0: float
) -> dict[str, Any]:
    """Per-shard CPU of the convergence; then SIGKILL the replica holding partition 0: the seconds
    until another holds it, and a spec change of one of its InferenceServices reaching the child."""
    from mlops_platform.runtime.control import partitioning
    from mlops_platform.runtime.control.reconcile import Request

    held = group.held()
    per_shard_cpu = [round(m.cpu() - b, 2) for m, b in zip(group.members, group.baseline, strict=True)]
    victim = next(i for i, parts in held.items() if 0 in parts)
    orphans = [
        f"bench-{i:04d}" for i in range(observer.count("isvc"))
        if partitioning.partition_of(Request(NAMESPACE, f"bench-{i:04d}"), SHARDS) == 0
    ]  # fmt: skip
    common.log(f"sharded: partitions {held}, CPU per replica {per_shard_cpu}; killing replica {victim}")
    t_kill, wall_kill = time.monotonic(), time.time()
    group.kill(victim)
    takeover = await wait_partitions(group, SHARDS, LEASE_DURATION + 60)
    common.log(
        f"sharded: partition 0 taken over {takeover:.1f} s after the SIGKILL (lease {LEASE_DURATION:.0f} s)"
    )
    steps = takeover_timeline(group, wall_kill, "bench-shard-0", 0)
    for step in steps:
        common.log(f"sharded: +{step['s']:.2f} s replica {step['replica']}: {step['step']}")
    change = await spec_changes(client, observer, orphans[:5], "failover", 60)
    return {
        "partitions_before": {str(k): v for k, v in held.items()},
        "cpu_s_per_replica": per_shard_cpu,
        "killed": victim,
        "takeover_s": round(takeover, 2),
        "takeover_steps": steps,
        "lease_duration_s": LEASE_DURATION,
        "orphan_change_ms": change.samples_ms,
        "partitions_after": {str(k): v for k, v in group.held().items()},
        "since_kill_s": round(time.monotonic() - t_kill, 2),
    }


async def forced_resync(impl: Impl, args: argparse.Namespace) -> dict[str, Any]:
    """SIGUSR1: the operator's informers replay their caches (as a resync period does)."""
    before, cpu0 = impl.requests(), impl.cpu()
    impl.proc.send_signal(signal.SIGUSR1)
    took = await wait_quiet(impl, args.quiet_seconds, args.timeout)
    delta = diff(impl.requests(), before)
    out = {
        "mutating": writes(delta),
        "get_list": reads(delta),
        "cpu_s": round(impl.cpu() - cpu0, 3),
        "seconds_until_quiet": round(took - args.quiet_seconds, 2),
        "requests": {_key(k): v for k, v in delta.items()},
    }
    common.log(f"forced resync: {out}")
    return out


async def restart_with_changes(
    args: argparse.Namespace,
    client: Client,
    observer: Observer,
    impl: Impl,
    run: Run,
    kubeconfig: str,
    log_dir: Path,
) -> Impl:
    """Restart the operator with N objects present and change specs during its initial sync (with
    ``--changes 0``, the restart alone: its initial sync's time and memory)."""
    stop_impl(impl)
    fresh = start_impl(
        "operator", kubeconfig, log_dir, args.workers, 0, children=operator_children(args), nice=args.nice
    )
    t0 = time.monotonic()
    await wait_impl_started(fresh)
    if args.changes > 0:
        names = [f"bench-{i:04d}" for i in range(1, run.count, max(1, run.count // args.changes))]
        run.change_initial_sync = await spec_changes(client, observer, names[: args.changes], "restart", 120)
        common.log(f"operator N={run.count}: spec change during the initial sync p50 "
            f"{run.change_initial_sync.p50:.0f} ms, p99 {run.change_initial_sync.p99:.0f} ms")  # fmt: skip
    await wait_quiet(fresh, args.quiet_seconds, args.timeout)
    run.initial_sync_s = time.monotonic() - t0
    return fresh


# ---------------------------------------------------------------------------------------------------
# render
# ---------------------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _spread(xs: Sequence[float], digits: int = 1) -> str:
    """median (min-max) of ``xs``; "-" for none."""
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt(xs[0], digits)
    return f"{fmt(statistics.median(xs), digits)} ({fmt(min(xs), digits)}-{fmt(max(xs), digits)})"


def repeated_rows(runs: Sequence[Run], counts: Sequence[int]) -> list[list[str]]:
    """For ``--repeat``: one row per implementation (and raw in-flight count) and N. The raw writer
    compared against is the in-flight count with the lowest median children time; each other
    implementation's ratio is taken against the raw run of its own round, and against the
    reference's of its own round (the target "no slower than the Go reference at equal workers")."""
    out: list[list[str]] = []
    for n in counts:
        done = [r for r in runs if r.count == n and r.ready_s is not None and r.children_s]
        groups: dict[tuple[str, int], list[Run]] = {}
        for r in done:
            groups.setdefault((r.impl, r.concurrency), []).append(r)
        raws = {c: rs for (impl, c), rs in groups.items() if impl == "raw"}
        raw_c = min(raws, key=lambda c: statistics.median(r.children_s or 0 for r in raws[c]), default=None)
        raw_by_round = {r.round: r for r in raws.get(raw_c, [])} if raw_c is not None else {}
        for (impl, c), rs in sorted(groups.items()):
            if impl == "raw" and c != raw_c:
                continue
            pairs = [(r, raw_by_round[r.round]) for r in rs if impl != "raw" and r.round in raw_by_round]
            ref_by_round = {r.round: r for r in groups.get(("reference", c), [])}
            refs = [(r, ref_by_round[r.round]) for r in rs if impl not in ("raw", "reference")
                    and r.round in ref_by_round]  # fmt: skip
            out.append([
                impl, str(n), str(c), str(len(rs)),
                _spread([r.children_s or 0 for r in rs]), _spread([r.ready_s or 0 for r in rs]),
                _spread([r.converge_cpu_s / n * 1000 for r in rs], 2),
                _spread([r.change_idle.p99 for r in rs if r.change_idle], 0),
                *_ratios(pairs), *_ratios(refs),
            ])  # fmt: skip
    return out


def _ratios(pairs: Sequence[tuple[Run, Run]]) -> list[str]:
    """Children and Ready of each run against the run it is paired with: median (min-max) each."""
    return [
        _spread([(r.children_s or 0) / (w.children_s or 1) for r, w in pairs], 2),
        _spread([(r.ready_s or 0) / (w.ready_s or 1) for r, w in pairs], 2),
    ]


def runs_from_json(items: Iterable[Mapping[str, Any]]) -> list[Run]:
    """Runs as :func:`dataclasses.asdict` wrote them (``scale.json``'s ``runs``, ``scale.partial.json``)."""
    out = []
    for item in items:
        d = dict(item)
        for k in ("change_idle", "change_initial_sync"):
            if d.get(k) is not None:
                d[k] = Latency(**d[k])
        out.append(Run(**d))
    return out


def load_reports(paths: Sequence[str | Path]) -> list[Run]:
    """``--report``: the runs of several invocations' JSON files, read as one matrix. Each file's rounds
    follow the rounds of the files before it (a matrix cut short, and the invocation that went on
    from there), so the per-round ratios pair runs of the same invocation only."""
    runs: list[Run] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        offset = max((r.round for r in runs), default=-1) + 1
        for r in runs_from_json(data["runs"] if isinstance(data, dict) else data):
            r.round += offset
            runs.append(r)
    return runs


def cpu_spans(run: Run) -> list[tuple[str, float | None, dict[str, float]]]:
    """A run's CPU seconds per span: until all children existed, the Ready phase after it, and until
    all Ready (a run recorded before the children's snapshot was kept: that last one only)."""
    total = ("until Ready", run.ready_s, run.cpu_until_ready)
    if not run.cpu_until_children or run.children_s is None or run.ready_s is None:
        return [total]
    after = cpu_between(run.cpu_until_children, run.cpu_until_ready)
    return [
        ("until children", run.children_s, run.cpu_until_children),
        ("children to Ready", run.ready_s - run.children_s, after),
        total,
    ]


def best_raw(runs: Sequence[Run], n: int) -> Run | None:
    raws = [r for r in runs if r.impl == "raw" and r.count == n and r.ready_s is not None]
    return min(raws, key=lambda r: r.children_s or 1e9) if raws else None


def render(runs: Sequence[Run]) -> str:
    rows = []
    for r in runs:
        steady = _counter(r.steady_requests)
        idle = r.change_idle
        rows.append([
            r.impl, str(r.count), str(r.concurrency), fmt(r.children_s), fmt(r.ready_s),
            fmt(r.converge_cpu_s, 2), fmt(r.converge_cpu_s / r.count * 1000, 2),
            common.mib(r.rss_peak), common.mib(r.rss_steady), fmt(r.writes_per_isvc, 2),
            _split_leases(steady, writes), _split_leases(steady, reads),
            f"{fmt(idle.p50 if idle else None, 0)} / {fmt(idle.p99 if idle else None, 0)}",
            fmt(r.bytes_per_isvc, 0), fmt(r.list_ms, 0),
        ])  # fmt: skip
    header = [
        "impl", "N", "workers / in flight", "children s", "Ready s", "CPU s", "CPU ms / ISVC",
        "RSS peak MiB", "RSS steady MiB", "writes / ISVC", "steady writes", "steady GET/LIST",
        "spec change idle p50 / p99 ms", "etcd bytes / ISVC", "LIST all ms",
    ]  # fmt: skip
    out = [common.markdown_table(header, rows)]
    repeated = {r.count for r in runs if r.round > 0}
    if repeated:
        out.append(
            "\nRepeated rounds, implementations interleaved, each on a fresh cluster: median (min-max); "
            "the ratios are taken round by round against the raw writer of the same round "
            "(targets: children <= 1.3, Ready <= 1.05) and against the reference of the same round at "
            "the same worker count (target: no slower, <= 1.00):\n"
        )
        out.append(
            common.markdown_table(
                ["impl", "N", "workers / in flight", "rounds", "children s", "Ready s", "CPU ms / ISVC",
                 "spec change idle p99 ms", "children / raw", "Ready / raw", "children / reference",
                 "Ready / reference"],
                repeated_rows(runs, sorted(repeated)),
            )
        )  # fmt: skip
    ratio_rows = []
    for n in sorted({r.count for r in runs} - repeated):
        raw = best_raw(runs, n)
        for r in runs:
            if r.count != n or r.impl == "raw" or raw is None or not raw.children_s or not raw.ready_s:
                continue
            ref = next((w for w in runs if w.impl == "reference" and w.count == n
                        and w.concurrency == r.concurrency and w.children_s and w.ready_s), None)  # fmt: skip
            against_ref = _ratios([(r, ref)] if ref is not None and r.impl != "reference" else [])
            ratio_rows.append([
                r.impl, str(n), f"{raw.concurrency}", fmt((r.children_s or math.nan) / raw.children_s, 2),
                fmt((r.ready_s or math.nan) / raw.ready_s, 2), *against_ref,
            ])  # fmt: skip
    if ratio_rows:
        out.append("\nAgainst the best raw writer (targets: children <= 1.3, Ready <= 1.05) and the "
                   "reference at the same worker count (target: no slower, <= 1.00):\n")  # fmt: skip
        header = ["impl", "N", "raw in flight", "children / raw", "Ready / raw", "children / reference",
                  "Ready / reference"]  # fmt: skip
        out.append(common.markdown_table(header, ratio_rows))
    resync = [
        [str(r.count), str(r.resync["mutating"]), str(r.resync["get_list"]), fmt(r.resync["cpu_s"], 2),
         fmt(r.change_initial_sync.p50 if r.change_initial_sync else None, 0),
         fmt(r.change_initial_sync.p99 if r.change_initial_sync else None, 0), fmt(r.initial_sync_s)]
        for r in runs if r.resync
    ]  # fmt: skip
    if resync:
        out.append("\nOperator: forced full resync, and spec changes during the initial sync after a restart "
                   "(targets: 0 mutating, 0 GET/LIST, CPU <= 2 s; p99 <= 1000 ms):\n")  # fmt: skip
        out.append(common.markdown_table(
            ["N", "resync mutating", "resync GET/LIST", "resync CPU s", "change p50 ms", "change p99 ms",
             "restart until quiet s"], resync))  # fmt: skip
    cpu = [
        [r.impl, str(r.count), span, fmt(seconds), fmt(used["machine"]),
         fmt(used["machine"] / seconds, 2) if seconds else "-", fmt(used.get("impl")),
         *(fmt(used.get(p)) for p in CONTROL_PLANE)]
        for r in runs if r.cpu_until_ready
        for span, seconds, used in cpu_spans(r)
    ]  # fmt: skip
    if cpu:
        out.append(f"\nWhere the CPU went from the first create until all children existed, after that until "
                   f"all Ready, and in all ({os.cpu_count()} CPUs; machine = every process; CPUs busy = "
                   "machine / time):\n")  # fmt: skip
        header = ["impl", "N", "span", "s", "machine CPU s", "CPUs busy", "impl CPU s", *CONTROL_PLANE]
        out.append(common.markdown_table(header, cpu))
    watched = sorted({k for r in runs for k in r.watch_until_ready})
    watched = sorted(watched, key=lambda k: -max(r.watch_until_ready.get(k, [0, 0])[1] for r in runs))[:8]
    keyed_section(
        out,
        "\nWatch events the API server sent from the first create until all Ready, to every watcher "
        "(control plane and implementation): thousands of events / MB, per resource:\n",
        runs, lambda r: r.watch_until_ready, watched, lambda r, v: f"{v[0] / 1000:.1f} / {v[1] / 1e6:.1f}",
    )  # fmt: skip
    pod_verbs = sorted({k for r in runs for k in r.pod_writes_until_ready})
    keyed_section(
        out,
        "\nPod writes the API server took from the first create until all Ready "
        "(`apiserver_request_total`; the control plane's: kwok, the scheduler, the "
        "ReplicaSet controller), per verb and subresource:\n",
        runs, lambda r: r.pod_writes_until_ready, pod_verbs, lambda r, v: str(v), "0",
    )  # fmt: skip
    allocating = [
        allocation_row(r) for r in runs if r.children_s and r.allocations_until_children.get("count")
    ]
    if allocating:
        out.append("\nWhat bounded the time until all children existed: the API server's ClusterIP "
                   "allocator, which serves one Service at a time (a lock held across the create of "
                   "each address's IPAddress object): its allocations over that span, their seconds in "
                   "all and as a share of the span (100 %: the allocator was never idle), and per "
                   "allocation the IPAddress POST as the API server's handler timed it, of that the "
                   "etcd create, and the rest (the allocator's request to its own API server and back, "
                   "waiting for CPU on the way):\n")  # fmt: skip
        out.append(common.markdown_table(
            ["impl", "N", "children s", "allocations", "allocating s", "of the span", "per allocation ms",
             "IPAddress POST ms", "of it etcd ms", "rest ms"], allocating))  # fmt: skip
    served = [r for r in runs if r.server_requests_until_children]
    kinds = sorted(
        {k for r in served for k in r.server_requests_until_children if not k.startswith(("WATCH", "GET /"))},
        key=lambda k: -max(r.server_requests_until_children.get(k, [0, 0])[0] / r.count for r in served),
    )[:12]
    keyed_section(
        out,
        "\nWhat the API server served from the first create until all children existed, every "
        "client's (the implementation's and the control plane's; `apiserver_request_total`), "
        "per InferenceService, the most frequent kinds:\n",
        served, lambda r: r.server_requests_until_children, kinds, lambda r, v: f"{v[0] / r.count:.2f}",
    )  # fmt: skip
    closed = [
        [r.impl, str(r.count),
         ", ".join(f"{k} {v}" for k, v in r.watch_restarts_until_ready.items()) or "none"]
        for r in runs if r.pod_writes_until_ready
    ]  # fmt: skip
    if closed:
        out.append("\nWhat made watchers start over from the first create until all Ready: watchers the API "
                   "server closed as too slow (`apiserver_terminated_watchers_total`), init events sent "
                   "to watches starting from a full state (`apiserver_init_events_total`), watch caches "
                   "initialized (`apiserver_watch_cache_initializations_total`), and pod LIST requests "
                   "and pod WATCH requests that ended (`apiserver_request_total`):\n")  # fmt: skip
        out.append(common.markdown_table(["impl", "N", "watch restarts"], closed))
    tails = [
        [r.impl, str(r.count), str(len(r.change_idle.samples_ms)), fmt(r.change_idle.p50, 0),
         fmt(r.change_idle.p99, 0), fmt(max(r.change_idle.samples_ms), 0),
         fmt(common.percentile(r.change_idle.tail_ms, 50), 0), fmt(max(r.change_idle.tail_ms), 0)]
        for r in runs if r.change_idle and r.change_idle.samples_ms and r.change_idle.tail_ms
    ]  # fmt: skip
    if tails:
        out.append("\nSpec changes at idle (target: p99 <= 100 ms): each made once the InferenceService and "
                   "Deployment of the change before had not changed for `--settle-seconds`; the tail is "
                   "how long after its rollout that object's last event came (the old pod's removal and "
                   "the status writes that follow it):\n")  # fmt: skip
        out.append(
            common.markdown_table(
                ["impl", "N", "changes", "p50 ms", "p99 ms", "max ms", "tail p50 ms", "tail max ms"], tails
            )
        )
    split = [
        split_row(r)
        for r in runs
        if r.change_idle and any(x is not None for x in r.change_idle.server_ms or ())
    ]
    if split:
        out.append("\nWhere the idle spec changes' time went: the implementation's own apply of the "
                   "Deployment as it timed it (request to answer, from its log's `requests_ms`: the "
                   "operator's), the API server's time over that write (its audit log: received to "
                   "response complete), and the rest of the change outside the API server (the watch "
                   "events to the implementation and back to this benchmark, the queue, the decision, "
                   "the client's side of the apply), each per change:\n")  # fmt: skip
        header = ["impl", "N", "changes", "change p50 / p99 ms", "apply p50 / p99 ms",
                  "API server p50 / p99 ms", "outside it p50 / p99 ms", "changes > 100 ms",
                  "of them API server > half"]  # fmt: skip
        out.append(common.markdown_table(header, split))
    server = [
        [r.impl, str(r.count), key, fmt(v["count"], 0), fmt(v["over_50ms"], 0), fmt(v["over_100ms"], 0),
         f"{fmt(v['p50_le'] * 1000, 0)} / {fmt(v['p99_le'] * 1000, 0)}"]
        for r in runs for key, v in r.server_during_changes.items()
    ]  # fmt: skip
    if server:
        out.append("\nThe API server's own durations of the Deployment and InferenceService writes during "
                   "the idle spec changes (every writer's; `apiserver_request_duration_seconds`, "
                   "`etcd_request_duration_seconds`): requests, slower than 50 / 100 ms, and the upper "
                   "bounds of the buckets holding p50 / p99:\n")  # fmt: skip
        header = ["impl", "N", "request", "count", "> 50 ms", "> 100 ms", "p50 / p99 bucket ms"]
        out.append(common.markdown_table(header, server))
    collections = [
        [r.impl, str(r.count), *(
            f"{fmt(g.get('count'), 0)} / {fmt(g.get('seconds', 0) * 1000, 0)} / {fmt(g.get('slow'), 0)}"
            for g in (r.gc_during_changes.get(str(i), {}) for i in range(3))
        )]
        for r in runs if r.gc_during_changes
    ]  # fmt: skip
    if collections:
        out.append("\nGarbage collections during the idle spec changes (`python_gc_duration_seconds`): "
                   "collections / ms in all / paused >= 50 ms, per generation:\n")  # fmt: skip
        out.append(
            common.markdown_table(["impl", "N", "generation 0", "generation 1", "generation 2"], collections)
        )
    sharded = [
        [str(r.count), " / ".join(f"{c:.1f}" for c in r.shards["cpu_s_per_replica"]),
         fmt(r.converge_cpu_s), fmt(r.shards["takeover_s"]), fmt(r.shards["lease_duration_s"], 0),
         fmt(common.percentile(r.shards["orphan_change_ms"], 50), 0),
         fmt(common.percentile(r.shards["orphan_change_ms"], 99), 0)]
        for r in runs if r.shards
    ]  # fmt: skip
    if sharded:
        out.append(f"\n{SHARDS} shards (`--shards {SHARDS}`): CPU per replica while converging, and a "
                   "SIGKILLed replica's partition taken over (target: within lease + 5 s):\n")  # fmt: skip
        out.append(common.markdown_table(
            ["N", "CPU s per replica", "CPU s all", "takeover s", "lease s",
             "orphan change p50 ms", "orphan change p99 ms"], sharded))  # fmt: skip
    return "\n".join(out)


def keyed_section(
    out: list[str],
    intro: str,
    runs: Sequence[Run],
    values: Callable[[Run], Mapping[str, Any]],
    keys: Sequence[str],
    cell: Callable[[Run, Any], str],
    missing: str = "-",
) -> None:
    """When there are ``keys``: ``intro`` and a table of one row per run with a per-key figure
    (``values(run)``: watch events per resource, pod writes per verb, requests per kind, ...) in
    columns ``keys``, ``cell`` formatting each (a run without any is left out), appended to ``out``."""
    if not keys:
        return
    rows = [
        [r.impl, str(r.count), *(cell(r, values(r)[k]) if k in values(r) else missing for k in keys)]
        for r in runs
        if values(r)
    ]
    out += [intro, common.markdown_table(["impl", "N", *keys], rows)]


def allocation_row(r: Run) -> list[str]:
    """A row of the allocator table: count, seconds, share of the children time, and per allocation
    its milliseconds in all, in the IPAddress POST, in etcd and in the rest."""
    a, span = r.allocations_until_children, r.children_s or math.nan
    n = a["count"]
    per = {k: 1000 * a.get(k, 0.0) / n for k in ("seconds", "post_seconds", "etcd_seconds")}
    return [
        r.impl, str(r.count), fmt(span), f"{n:.0f}", fmt(a["seconds"]), f"{100 * a['seconds'] / span:.0f} %",
        fmt(per["seconds"]), fmt(per["post_seconds"]), fmt(per["etcd_seconds"]),
        fmt(per["seconds"] - per["post_seconds"]),
    ]  # fmt: skip


def split_row(r: Run) -> list[str]:
    """A row of the idle spec changes' split: the implementation's Deployment apply as it timed it
    (its log), the API server's time over that write (the audit log), and the change's time outside
    the API server (the change less the server's: the watch events there and back, the queue, the
    decision, the client's side of the apply), over the changes the audit log gave."""
    assert r.change_idle is not None
    idle = r.change_idle
    n = len(idle.samples_ms)
    applies = idle.apply_ms or [None] * n
    servers = idle.server_ms or [None] * n
    rows = [(t, a, s) for t, a, s in zip(idle.samples_ms, applies, servers, strict=True) if s is not None]
    total = [t for t, _, _ in rows]
    apply = [a for _, a, _ in rows if a is not None]
    server = [s for _, _, s in rows]
    outside = [max(0.0, t - s) for t, _, s in rows]
    slow = [(t, s) for t, _, s in rows if t > 100]

    def p(xs: list[float]) -> str:
        return f"{fmt(common.percentile(xs, 50), 0)} / {fmt(common.percentile(xs, 99), 0)}" if xs else "-"

    return [r.impl, str(r.count), str(len(rows)), p(total), p(apply), p(server), p(outside),
            str(len(slow)), str(sum(1 for t, s in slow if s > t / 2))]  # fmt: skip


def _split_leases(
    requests: Counter[tuple[str, str]], count: Callable[[Mapping[tuple[str, str], int]], int]
) -> str:
    """``count`` of the requests, Lease renewals and polls (sharding, election) shown apart."""
    leases = Counter({k: v for k, v in requests.items() if k[1].startswith("leases")})
    rest = count(requests) - count(leases)
    return f"{rest} (+{count(leases)} Lease)" if count(leases) else str(rest)


def _counter(d: Mapping[str, int]) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for k, v in d.items():
        verb, _, resource = k.partition(" ")
        out[(verb, resource)] += v
    return out


def plots(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    series: dict[str, list[Run]] = {}
    for r in runs:
        label = r.impl if r.impl != "raw" else "raw (best)"
        if r.impl == "raw" and best_raw(runs, r.count) is not r:
            continue
        series.setdefault(label, []).append(r)
    charts: list[tuple[str, str, Callable[[Run], float | None]]] = [
        ("scale-ready.png", "seconds until all Ready", lambda r: r.ready_s),
        ("scale-children.png", "seconds until all children exist", lambda r: r.children_s),
        ("scale-requests.png", "writes per InferenceService", lambda r: r.writes_per_isvc),
        ("scale-rss.png", "RSS peak (MiB)", lambda r: r.rss_peak / 2**20),
    ]
    for name, ylabel, value in charts:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, rs in sorted(series.items()):
            rs = sorted(rs, key=lambda r: r.count)
            ys = [math.nan if (v := value(r)) is None else v for r in rs]
            if name == "scale-rss.png" and label.startswith("raw"):
                continue
            ax.plot([r.count for r in rs], ys, marker="o", label=label)
        ax.set_xlabel("InferenceServices (N)")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--workers", type=int, default=16, help="operator and reference workers")
    p.add_argument("--raw-concurrency", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--raw-sweep-min", type=int, default=1000, help="below this N, one in-flight count")
    p.add_argument("--raw-sweep-max", type=int, default=5000, help="from this N on, only the best")
    p.add_argument("--sharded-counts", type=int, nargs="*", default=[5000], help="N at which to shard")
    p.add_argument("--create-concurrency", type=int, default=32)
    p.add_argument(
        "--repeat", type=int, default=1, help="rounds per N, implementations interleaved; medians and ranges"
    )
    p.add_argument("--changes", type=int, default=200)
    p.add_argument("--resync-counts", type=int, nargs="*", default=[5000])
    p.add_argument("--quiet-seconds", type=float, default=20.0, help="> the HPA controller's 15 s sync")
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument(
        "--settle-seconds",
        type=float,
        default=1.0,
        help="idle spec changes: after each rollout, wait until its objects have not changed for this long",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="per phase")
    p.add_argument(
        "--all-children",
        action="store_true",
        help="the operator also builds its ServiceMonitor, PrometheusRule and NetworkPolicy (--monitoring "
        "--network-policy); the raw writer and the reference build none: compare such runs with each other",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        choices=range(20),
        metavar="0-19",
        help="start each implementation under `nice -n` this: on a machine where the control plane and "
        "the implementation share the CPUs, the control plane runs first whenever both want one "
        "(docs/measurements.md, 'The control plane first for the CPU'); 0: equal priority",
    )
    p.add_argument("--cluster-name", default="mlops-bench-scale")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--smoke", action="store_true", help="N=50, operator only; exit 1 on a steady write/read")
    p.add_argument(
        "--report",
        nargs="+",
        metavar="JSON",
        help="run nothing: write the tables and plots of these runs (scale.json or scale.partial.json of "
        "one or more invocations, in order; each file's rounds follow the ones before it)",
    )
    a = p.parse_args(argv)
    if a.smoke:
        a.counts, a.impls, a.changes, a.resync_counts = [50], ["operator"], 20, [50]
        a.sharded_counts = []
        # quiet 16 s: still longer than the HPA controller's 15 s sync (its status write would show)
        a.idle_seconds, a.quiet_seconds, a.out = 10.0, 16.0, None
        a.settle_seconds = 0.3  # the settle path exercised; latency is no target of the smoke
    return a


def raw_sweep(a: argparse.Namespace, runs: Sequence[Run], n: int) -> list[int]:
    """The raw writer's in-flight counts at ``n``: all of ``--raw-concurrency`` for ``--raw-sweep-min``
    <= N < ``--raw-sweep-max``; below, the middle one; from ``--raw-sweep-max`` on only the best of
    the largest N swept before (a sweep at 5,000 would take half an hour per point; the sweep below
    shows where more stops helping)."""
    if n < a.raw_sweep_min:
        return [sorted(a.raw_concurrency)[len(a.raw_concurrency) // 2]]
    if n < a.raw_sweep_max:
        return list(a.raw_concurrency)
    swept = sorted({r.count for r in runs if r.impl == "raw" and r.count < n})
    best = best_raw(runs, swept[-1]) if swept else None
    return [best.concurrency] if best else [max(a.raw_concurrency)]


def round_order(impls: Sequence[str], rnd: int) -> list[str]:
    """The implementations in round ``rnd``'s order: rotated by one each round, so that over
    ``len(impls)`` rounds each runs first once. This machine drifts over an invocation (on
    2026-12-04 the raw writer's and the reference's runs got faster round after round, the raw
    writer's Ready 93.9, 80.2, 74.7 s at N=1000), and a fixed order puts such a drift on the
    ratios of whichever implementation always runs first."""
    k = rnd % len(impls) if impls else 0
    return [*impls[k:], *impls[:k]]


async def amain(a: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="mlops-bench-scale-") as tmp:
        log_dir = Path(os.environ.get("BENCH_LOG_DIR", tmp))
        try:
            for n in a.counts:
                for rnd in range(a.repeat):
                    for impl in round_order(a.impls, rnd):
                        if impl == "sharded" and n not in a.sharded_counts:
                            continue
                        for c in raw_sweep(a, runs, n) if impl == "raw" else [a.workers]:
                            try:
                                run = await one_run(a, impl, n, c, log_dir)
                            except (TimeoutError, SystemExit) as e:
                                common.log(f"{impl} N={n} failed: {e}")
                                run = Run(impl, n, c, failures=[str(e)])
                            run.round = rnd
                            runs.append(run)
                            of = f" (round {rnd + 1} of {a.repeat})" if a.repeat > 1 else ""
                            common.log(f"{impl} N={n} done{of}: {asdict(run) | {'requests': '...'}}")
                            if a.out:  # every run as soon as it ends: a long matrix cut short keeps them
                                partial = Path(a.out) / "scale.partial.json"
                                partial.parent.mkdir(parents=True, exist_ok=True)
                                partial.write_text(json.dumps([asdict(r) for r in runs], indent=1))
        finally:
            if not a.keep_cluster:
                common.dev_cluster_down(a.cluster_name)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if "BENCH_LOG_DIR" in os.environ:
        Path(os.environ["BENCH_LOG_DIR"]).mkdir(parents=True, exist_ok=True)
    runs = load_reports(a.report) if a.report else asyncio.run(amain(a))
    table = render(runs)
    print(table)
    if a.out:
        out, machine, args = common.results_dir(a, REPO)
        data = {"machine": machine, "args": args, "runs": [asdict(r) for r in runs]}
        common.write_json(out / "scale.json", data)
        if not a.report:  # a report may be reading it
            (out / "scale.partial.json").unlink(missing_ok=True)
        made = plots(runs, out)
        (out / "scale.md").write_text(
            "# Scale benchmark\n\n`.venv/bin/python -m bench.scale "
            + " ".join(sys.argv[1:])
            + "`\n\nMachine: "
            + json.dumps(machine)
            + "\n\n"
            + table
            + "\n\n"
            + "\n".join(f"![{p.stem}]({p.name})" for p in made)
            + "\n"
        )
        common.log(f"wrote {out / 'scale.md'} and {len(made)} plots")
    if a.smoke:
        bad = [
            r for r in runs
            if r.failures or writes(_counter(r.steady_requests)) or reads(_counter(r.steady_requests))
            or (r.resync and (r.resync["mutating"] or r.resync["get_list"]))
        ]  # fmt: skip
        for r in bad:
            common.log(f"SMOKE FAILED: {r.impl} N={r.count}: failures {r.failures}, "
                f"steady {r.steady_requests}, resync {r.resync}")  # fmt: skip
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
