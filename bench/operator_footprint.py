#!/usr/bin/env python3
"""CPU and memory of the operator process, idle and with N InferenceServices, and its API requests.

The operator runs as a SUBPROCESS started exactly as a user starts it::

    python -m mlops_platform.cli run --kubeconfig K \\
        --health-probe-bind-address 127.0.0.1:0 --metrics-bind-address 127.0.0.1:PORT \\
        --webhook-bind-address off

(``PORT``: a free port picked by the script; no conversion webhook server: the benchmark creates and
reads only v1, the storage version, and the CRD serves v1 alone, see ``bench._common.install_crd``).
Its CPU time comes from ``/proc/<pid>/stat`` (``utime + stime`` in clock ticks), its memory from
``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``), its API requests from its own ``/metrics``
(``rest_client_requests_by_resource_total{verb,resource,code}``).

Phases:

1. ``dev up --name mlops-bench-op`` (unless ``--kubeconfig``), the CRD, the namespace ``bench-op``.
2. Start the operator; wait until ``/metrics`` answers and its log says ``caches synced``.
3. ``empty``: ``--empty-seconds`` with no InferenceService (idle cost of an empty operator).
4. ``create``: ``--count`` ``mlops.platform/v1`` InferenceServices (runtime triton/seldon/torchserve in
   turn, minReplicas 1, maxReplicas 1, 1, 2, 3 in turn so half of them get an HPA), ``--concurrency``
   creates in flight; polled (LIST every ``--poll-interval``) until every one reports ``Ready=True``.
5. ``settle``: until the operator made no API request for ``--quiet-seconds`` (trailing reconciles
   after the last Ready, e.g. status updates of pods that became ready late).
6. ``steady``: ``--idle-seconds`` with nothing changing: CPU and every request (expected: 0 writes).
7. SIGTERM: exit code and shutdown time; delete the namespace; ``dev down`` unless ``--keep-cluster``.

Progress goes to stderr; the results are printed as Markdown tables on stdout and, with ``--json
FILE``, written as JSON (every phase, every request counter). The machine-wide busy CPU (from
``/proc/stat``) is reported next to the operator's, split into the cluster's control plane (every
process whose command line names the kubeconfig's directory: etcd, kube-*, kwok) and the rest, so that
load from other processes is visible. The rest is a difference of tick-sampled (``/proc/stat``) and
per-process accounting and can come out slightly negative.

The local dev cluster's Service range is a /17 of its address block (``devcluster.realnode.addressing``:
32,765 Services); a cluster created before blocks had 10.96.0.0/16, and one before that kube-apiserver's
default /24, which fits only 253 Services.

The run is collect (the phases, as a ``Footprint``) -> summarise (the figures) -> render (the tables).

Examples (``.venv/bin/python bench/operator_footprint.py ...`` works the same)::

    .venv/bin/python -m bench.operator_footprint --json /tmp/operator-footprint.json
    .venv/bin/python -m bench.operator_footprint --count 250 --keep-cluster
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a script (`python bench/operator_footprint.py`): import `bench` as a package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench import _common as common
from mlops_platform.testing.ports import free_port

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client

FRAMEWORKS = ("triton", "seldon", "torchserve")
PORTS = {"triton": 8000, "seldon": 9000, "torchserve": 8080}
MAX_REPLICAS = (1, 1, 2, 3)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
REQUESTS_METRIC = "rest_client_requests_by_resource_total"
RECONCILE_METRIC = "controller_runtime_reconcile_total"
#: the dev cluster's --service-cluster-ip-range (a /17 of its block), less network, broadcast and `kubernetes`
DEV_CLUSTER_MAX_SERVICES = 2**15 - 3
RequestKey = tuple[str, str, str]  # (verb, resource, code)


# ---------------------------------------------------------------------------------------------------
# readings of the operator process and the machine (from /proc, through bench._common)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSample:
    """One reading of the operator process and the machine."""

    t: float  # time.monotonic()
    cpu_seconds: float  # operator utime + stime
    rss: int  # VmRSS bytes
    hwm: int  # VmHWM bytes
    threads: int
    machine_busy_seconds: float  # all CPUs, all processes (non-idle, non-iowait jiffies)
    control_plane_seconds: float  # utime + stime of the cluster's processes (etcd, kube-*, kwok)
    bench_seconds: float  # this benchmark's own process
    loadavg_1m: float


def control_plane_cpu(cluster_dir: str | None) -> float:
    """CPU seconds of every process whose command line names ``cluster_dir`` (the dev cluster's
    etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok-controller)."""
    if not cluster_dir:
        return 0.0
    total = 0.0
    for pid in common.pids_naming(cluster_dir):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            total += common.read_proc(pid).cpu_seconds
    return total


def sample_proc(pid: int, cluster_dir: str | None) -> ProcSample:
    t = time.monotonic()
    operator = common.read_proc(pid)
    machine = common.read_machine()
    own = os.times()
    return ProcSample(
        t=t,
        cpu_seconds=operator.cpu_seconds,
        rss=operator.rss,
        hwm=operator.hwm,
        threads=operator.threads,
        machine_busy_seconds=machine.busy_seconds,
        control_plane_seconds=control_plane_cpu(cluster_dir),
        bench_seconds=own.user + own.system,
        loadavg_1m=machine.loadavg_1m,
    )


# ---------------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    requests: Counter[RequestKey]
    reconciles: Counter[str]  # by result


def _scrape_sync(url: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    requests: Counter[RequestKey] = Counter()
    reconciles: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == REQUESTS_METRIC:
                requests[(s.labels["verb"], s.labels["resource"], s.labels["code"])] += int(s.value)
            elif s.name == RECONCILE_METRIC:
                reconciles[s.labels["result"]] += int(s.value)
    return Scrape(requests, reconciles)


async def scrape(url: str) -> Scrape:
    return await asyncio.to_thread(_scrape_sync, url)


def diff(after: Counter[Any], before: Counter[Any]) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for k, v in after.items():
        if v - before.get(k, 0):
            out[k] = v - before.get(k, 0)
    return out


def by_verb(requests: Mapping[RequestKey, int]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (verb, _res, _code), n in requests.items():
        out[verb] += n
    return out


def writes(requests: Mapping[RequestKey, int]) -> int:
    return sum(n for (verb, _r, _c), n in requests.items() if verb in WRITE_VERBS)


def requests_json(requests: Mapping[RequestKey, int]) -> list[dict[str, Any]]:
    return [{"verb": v, "resource": r, "code": c, "count": n} for (v, r, c), n in sorted(requests.items())]


# ---------------------------------------------------------------------------------------------------
# cluster, operator
# ---------------------------------------------------------------------------------------------------


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    metrics_url: str
    log_path: Path
    command: list[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def log_levels(self) -> dict[str, int]:
        levels: Counter[str] = Counter()
        for line in self.log_lines():
            try:
                levels[str(json.loads(line).get("level", "?"))] += 1
            except ValueError:
                levels["(not JSON)"] += 1
        return dict(levels)


def start_operator(kubeconfig: str, log_dir: Path) -> Operator:
    port = free_port()
    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "run",
        "--kubeconfig", kubeconfig,
        "--health-probe-bind-address", "127.0.0.1:0",
        "--metrics-bind-address", f"127.0.0.1:{port}",
        *common.NO_WEBHOOK_SERVER,
    ]  # fmt: skip
    log_path = log_dir / "operator.log"
    common.log(f"starting the operator: {' '.join(cmd)} (log {log_path})")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Operator(proc, f"http://127.0.0.1:{port}/metrics", log_path, cmd)


async def wait_started(op: Operator, timeout: float, poll: float) -> tuple[float, float]:
    """Seconds until /metrics answers and until the log says ``caches synced``."""
    t0 = time.monotonic()
    metrics_at: float | None = None
    while True:
        if op.proc.poll() is not None:
            tail = "\n".join(op.log_lines()[-20:])
            raise SystemExit(f"the operator exited with code {op.proc.returncode} at startup:\n{tail}")
        if metrics_at is None:
            with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
                await scrape(op.metrics_url)
                metrics_at = time.monotonic() - t0
                common.log(f"/metrics answers after {metrics_at:.2f} s")
        if metrics_at is not None and any('"caches synced"' in ln for ln in op.log_lines()):
            synced_at = time.monotonic() - t0
            common.log(f"caches synced after {synced_at:.2f} s")
            return metrics_at, synced_at
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"the operator did not sync within {timeout:.0f} s (log {op.log_path})")
        await asyncio.sleep(poll)


def stop_operator(op: Operator, timeout: float = 60.0) -> tuple[int | None, float]:
    """SIGTERM; the exit code and the seconds until the process was gone (SIGKILL after timeout)."""
    if op.proc.poll() is not None:
        return op.proc.returncode, 0.0
    t0 = time.monotonic()
    op.proc.send_signal(signal.SIGTERM)
    try:
        code = op.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        common.log(f"operator still running {timeout:.0f} s after SIGTERM; SIGKILL")
        op.proc.kill()
        op.proc.wait()
        return None, time.monotonic() - t0
    return code, time.monotonic() - t0


# ---------------------------------------------------------------------------------------------------
# InferenceServices
# ---------------------------------------------------------------------------------------------------


def inference_service(namespace: str, i: int) -> dict[str, Any]:
    """The ``i``-th benchmark InferenceService, at ``mlops.platform/v1`` (the storage version: the API
    server never converts it). The same service the benchmarks always created (its v1alpha1 form:
    ``modelUri``, ``framework``, ``port``, ``minReplicas``, ``maxReplicas``, ``resources.cpuRequest`` and
    ``memoryRequest``), so the same children."""
    from mlops_platform import api

    framework = FRAMEWORKS[i % len(FRAMEWORKS)]
    return {
        "apiVersion": api.RESOURCE.api_version,
        "kind": api.RESOURCE.kind,
        "metadata": {"name": f"bench-{i:04d}", "namespace": namespace, "labels": {"bench": "footprint"}},
        "spec": {
            "predictor": {
                "model": {"uri": f"s3://models/bench/{i}"},
                "runtime": framework,
                "port": PORTS[framework],
                # small requests: N pods must fit on the fake nodes (the default request is 1 CPU)
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "autoscaling": {"minReplicas": 1, "maxReplicas": MAX_REPLICAS[i % len(MAX_REPLICAS)]},
            }
        },
    }


def max_replicas(isvc: Mapping[str, Any]) -> int:
    """``spec.predictor.autoscaling.maxReplicas`` of a benchmark InferenceService (> 1: it gets an HPA)."""
    return int(isvc["spec"]["predictor"]["autoscaling"]["maxReplicas"])


def not_ready_summary(items: Sequence[Mapping[str, Any]]) -> str:
    """The Ready reasons of the objects that are not Ready, with one example message each."""
    from mlops_platform.runtime import objects

    reasons: Counter[str] = Counter()
    example: dict[str, str] = {}
    for o in items:
        if objects.condition_is(o, "Ready"):
            continue
        cond = objects.condition(o, "Ready")
        reason = str(cond.get("reason")) if cond else "(no Ready condition)"
        reasons[reason] += 1
        if cond:
            example.setdefault(reason, f"{o['metadata']['name']}: {cond.get('message', '')}")
    return "; ".join(f"{n} {r} (e.g. {example.get(r, '-')})" for r, n in reasons.most_common())


async def ensure_namespace(client: Client, namespace: str) -> None:
    """Create ``namespace``; it must not exist yet (one left ``Terminating`` is waited for)."""
    from mlops_platform.runtime.transport import resources

    if await common.wait_while_terminating(client, namespace) is not None:
        raise SystemExit(f"namespace {namespace} exists already; delete it or pick --namespace")
    await client.create(
        resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )


async def create_all(client: Client, namespace: str, count: int, concurrency: int) -> float:
    """Create the InferenceServices, ``concurrency`` in flight; the seconds it took."""
    from mlops_platform import api

    sem = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()

    async def one(i: int) -> None:
        async with sem:
            await client.create(api.RESOURCE, inference_service(namespace, i))

    async with asyncio.TaskGroup() as tg:
        for i in range(count):
            tg.create_task(one(i))
    return time.monotonic() - t0


async def wait_all_ready(
    client: Client, namespace: str, count: int, timeout: float, poll: float, t0: float
) -> float:
    """Poll (LIST) until ``count`` InferenceServices report Ready=True; seconds since ``t0``."""
    from mlops_platform import api
    from mlops_platform.runtime import objects

    last = -1
    while True:
        items = (await client.list(api.RESOURCE, namespace, label_selector="bench=footprint"))["items"]
        ready = sum(1 for o in items if objects.condition_is(o, "Ready"))
        elapsed = time.monotonic() - t0
        if ready != last:
            common.log(f"  {ready}/{count} Ready=True after {elapsed:.1f} s")
            last = ready
        if ready >= count:
            return elapsed
        if elapsed > timeout:
            raise SystemExit(
                f"only {ready}/{count} InferenceServices Ready=True after {timeout:.0f} s; "
                f"the others: {not_ready_summary(items)}"
            )
        await asyncio.sleep(poll)


async def wait_quiet(op: Operator, quiet: float, poll: float, timeout: float) -> tuple[float, Scrape]:
    """Until the operator's request counters did not move for ``quiet`` seconds; (seconds, scrape)."""
    t0 = time.monotonic()
    last = await scrape(op.metrics_url)
    last_change = time.monotonic()
    while time.monotonic() - last_change < quiet:
        if time.monotonic() - t0 > timeout:
            common.log(f"still making requests {timeout:.0f} s after the last Ready; measuring anyway")
            break
        await asyncio.sleep(poll)
        now = await scrape(op.metrics_url)
        if now.requests != last.requests:
            last, last_change = now, time.monotonic()
    # the quiet period itself is not part of the settling time
    return last_change - t0, last


# ---------------------------------------------------------------------------------------------------
# the run: collect
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """The operator's CPU, memory and requests between two readings."""

    name: str
    seconds: float
    cpu_seconds: float
    machine_busy_seconds: float
    control_plane_seconds: float
    bench_seconds: float
    rss_before: int
    rss_after: int
    hwm_after: int
    threads_after: int
    loadavg_1m_after: float
    requests: dict[RequestKey, int]
    reconciles: dict[str, int]

    @property
    def writes(self) -> int:
        return writes(self.requests)

    @property
    def others_busy_seconds(self) -> float:
        """The machine's busy CPU less the operator, the control plane and this benchmark (approx.)."""
        return self.machine_busy_seconds - self.cpu_seconds - self.control_plane_seconds - self.bench_seconds

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["requests"] = requests_json(self.requests)
        d["requests_by_verb"] = dict(by_verb(self.requests))
        d["writes"] = self.writes
        d["others_busy_seconds"] = self.others_busy_seconds
        return d


def phase(
    name: str, a: ProcSample, b: ProcSample, sa: Scrape, sb: Scrape, *, seconds: float | None = None
) -> Phase:
    return Phase(
        name=name,
        seconds=seconds if seconds is not None else b.t - a.t,
        cpu_seconds=b.cpu_seconds - a.cpu_seconds,
        machine_busy_seconds=b.machine_busy_seconds - a.machine_busy_seconds,
        control_plane_seconds=b.control_plane_seconds - a.control_plane_seconds,
        bench_seconds=b.bench_seconds - a.bench_seconds,
        rss_before=a.rss,
        rss_after=b.rss,
        hwm_after=b.hwm,
        threads_after=b.threads,
        loadavg_1m_after=b.loadavg_1m,
        requests=dict(diff(sb.requests, sa.requests)),
        reconciles=dict(diff(sb.reconciles, sa.reconciles)),
    )


@dataclass(frozen=True)
class Startup:
    """From exec until the operator's caches synced."""

    metrics_after_seconds: float
    synced_after_seconds: float
    cpu_seconds: float
    rss: int
    hwm: int
    threads: int
    wall_seconds: float
    requests: dict[RequestKey, int]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["requests"] = requests_json(self.requests)
        return d


@dataclass(frozen=True)
class Phases:
    """What the operator did while it ran: startup, then the phases empty, create, settle, steady."""

    startup: Startup
    phases: tuple[Phase, ...]
    create_requests_seconds: float
    all_ready_seconds: float
    settle_seconds_until_last_request: float
    final_requests: dict[RequestKey, int]
    final_reconciles: dict[str, int]

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)


@dataclass(frozen=True)
class Shutdown:
    exit_code: int | None  # None: killed (SIGKILL) after it ignored SIGTERM
    shutdown_seconds: float
    log_levels: dict[str, int]
    log_path: str


@dataclass(frozen=True)
class Footprint:
    """Everything one run measured."""

    control_plane_dir: str
    operator_command: list[str]
    run: Phases
    shutdown: Shutdown
    #: seconds until the namespace was gone (None: still there after --delete-timeout); absent if kept
    namespace_deleted_seconds: float | None
    namespace_kept: bool

    def to_json(self) -> dict[str, Any]:
        run = self.run
        d: dict[str, Any] = {
            "control_plane_dir": self.control_plane_dir,
            "operator_command": self.operator_command,
            "startup": run.startup.to_json(),
            "create_requests_seconds": run.create_requests_seconds,
            "all_ready_seconds": run.all_ready_seconds,
            "settle_seconds_until_last_request": run.settle_seconds_until_last_request,
            "final_requests": requests_json(run.final_requests),
            "final_reconciles": run.final_reconciles,
            **asdict(self.shutdown),
            "phases": [p.to_json() for p in run.phases],
        }
        if not self.namespace_kept:
            d["namespace_deleted_seconds"] = self.namespace_deleted_seconds
        return d


async def reading(op: Operator, cluster_dir: str) -> tuple[ProcSample, Scrape]:
    return sample_proc(op.pid, cluster_dir), await scrape(op.metrics_url)


async def startup(
    op: Operator, args: argparse.Namespace, cluster_dir: str
) -> tuple[Startup, ProcSample, Scrape]:
    """Wait until the operator started; its startup figures and the reading that ends the startup."""
    t_start = time.monotonic()
    metrics_after, synced_after = await wait_started(op, args.startup_timeout, min(args.poll_interval, 0.05))
    p0, s0 = await reading(op, cluster_dir)
    common.log(
        f"startup: {p0.cpu_seconds:.2f} CPU s, VmRSS {common.mib(p0.rss)} MiB, VmHWM {common.mib(p0.hwm)} MiB"
    )
    started = Startup(
        metrics_after_seconds=metrics_after,
        synced_after_seconds=synced_after,
        cpu_seconds=p0.cpu_seconds,
        rss=p0.rss,
        hwm=p0.hwm,
        threads=p0.threads,
        wall_seconds=p0.t - t_start,
        requests=dict(s0.requests),
    )
    return started, p0, s0


async def run_phases(args: argparse.Namespace, client: Client, op: Operator, cluster_dir: str) -> Phases:
    """Startup, then the phases empty, create, settle and steady (see the module's docstring)."""
    poll: float = args.poll_interval
    started, p0, s0 = await startup(op, args, cluster_dir)

    common.log(f"empty: {args.empty_seconds:.0f} s with no InferenceService")
    await asyncio.sleep(args.empty_seconds)
    p1, s1 = await reading(op, cluster_dir)

    common.log(f"create: {args.count} InferenceServices, {args.concurrency} in flight")
    t0 = time.monotonic()
    create_seconds = await create_all(client, args.namespace, args.count, args.concurrency)
    common.log(f"  created in {create_seconds:.1f} s")
    ready_after = await wait_all_ready(client, args.namespace, args.count, args.ready_timeout, poll, t0)
    p2, s2 = await reading(op, cluster_dir)

    common.log(f"settle: until no request for {args.quiet_seconds:.0f} s")
    settle_seconds, s3 = await wait_quiet(op, args.quiet_seconds, poll, args.settle_timeout)
    p3 = sample_proc(op.pid, cluster_dir)

    common.log(f"steady: {args.idle_seconds:.0f} s with nothing changing")
    await asyncio.sleep(args.idle_seconds)
    p4, s4 = await reading(op, cluster_dir)
    steady = phase("steady", p3, p4, s3, s4)
    common.log(f"  steady: {p4.cpu_seconds - p3.cpu_seconds:.2f} CPU s, {steady.writes} writes")
    return Phases(
        startup=started,
        phases=(
            phase("empty", p0, p1, s0, s1),
            phase("create", p1, p2, s1, s2, seconds=ready_after),
            phase("settle", p2, p3, s2, s3),
            steady,
        ),
        create_requests_seconds=create_seconds,
        all_ready_seconds=ready_after,
        settle_seconds_until_last_request=settle_seconds,
        final_requests=dict(s4.requests),
        final_reconciles=dict(s4.reconciles),
    )


def shut_down(op: Operator) -> Shutdown:
    common.log("stopping the operator (SIGTERM)")
    code, seconds = stop_operator(op)
    common.log(f"  exit code {code} after {seconds:.2f} s")
    return Shutdown(code, seconds, op.log_levels(), str(op.log_path))


async def measure(args: argparse.Namespace, kubeconfig: str, cluster_dir: str, log_dir: Path) -> Footprint:
    """Install the CRD, create the namespace, start the operator and run the phases; clean up."""
    from mlops_platform.runtime.transport import client as rclient

    deleted: float | None = None
    async with rclient.Client.from_kubeconfig(kubeconfig) as client:
        common.log("installing the InferenceService CRD")
        await common.install_crd(client)
        await ensure_namespace(client, args.namespace)
        op = start_operator(kubeconfig, log_dir)
        try:
            run = await run_phases(args, client, op, cluster_dir)
        finally:
            stopped = shut_down(op)
            if not args.keep_objects:
                deleted = await common.delete_namespace(
                    client, args.namespace, args.delete_timeout, args.poll_interval
                )
    return Footprint(cluster_dir, op.command, run, stopped, deleted, args.keep_objects)


# ---------------------------------------------------------------------------------------------------
# summarise
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerbCount:
    verb: str
    create: int  # create -> all Ready
    settle: int
    per_object: float  # (create + settle) / N


@dataclass(frozen=True)
class Summary:
    """The figures of the report; counts per InferenceService divide by ``n``."""

    n: int
    quiet_seconds: float
    startup: Startup
    empty: Phase
    create: Phase
    settle: Phase
    steady: Phase
    rss_growth: int  # VmRSS steady - empty (bytes)
    rss_growth_per_object: float
    hwm_growth_per_object: float
    create_cpu_ms_per_object: float  # create -> all Ready
    create_settle_cpu_ms_per_object: float  # create -> last request
    reconciles_per_object: float  # create + settle
    all_ready_seconds: float
    create_requests_seconds: float
    verbs: tuple[VerbCount, ...]  # create + settle, by verb, then "**all**"
    #: create + settle, by ("verb resource", code): (requests, per InferenceService)
    by_resource: tuple[tuple[str, str, int, float], ...]
    steady_requests: tuple[tuple[RequestKey, int], ...]  # sorted
    steady_reconciles: int
    empty_requests: int
    startup_by_verb: dict[str, int]
    shutdown: Shutdown


def verb_counts(
    create: Mapping[RequestKey, int], settle: Mapping[RequestKey, int], n: int
) -> list[VerbCount]:
    cv, sv = by_verb(create), by_verb(settle)
    rows = [VerbCount(v, cv[v], sv[v], (cv[v] + sv[v]) / n) for v in sorted(set(cv | sv))]
    c, s = sum(cv.values()), sum(sv.values())
    return [*rows, VerbCount("**all**", c, s, (c + s) / n)]


def resource_counts(
    create: Mapping[RequestKey, int], settle: Mapping[RequestKey, int], n: int
) -> list[tuple[str, str, int, float]]:
    res: Counter[tuple[str, str]] = Counter()
    for requests in (create, settle):
        for (verb, resource, code), k in requests.items():
            res[(f"{verb} {resource}", code)] += k
    return [(vr, c, k, k / n) for (vr, c), k in sorted(res.items())]


def summarise(fp: Footprint, count: int, quiet_seconds: float) -> Summary:
    n, run = count, fp.run
    empty, create, settle, steady = (run.phase(p) for p in ("empty", "create", "settle", "steady"))
    return Summary(
        n=n,
        quiet_seconds=quiet_seconds,
        startup=run.startup,
        empty=empty,
        create=create,
        settle=settle,
        steady=steady,
        rss_growth=steady.rss_after - empty.rss_after,
        rss_growth_per_object=(steady.rss_after - empty.rss_after) / n,
        hwm_growth_per_object=(steady.hwm_after - empty.hwm_after) / n,
        create_cpu_ms_per_object=1000 * create.cpu_seconds / n,
        create_settle_cpu_ms_per_object=1000 * (create.cpu_seconds + settle.cpu_seconds) / n,
        reconciles_per_object=(sum(create.reconciles.values()) + sum(settle.reconciles.values())) / n,
        all_ready_seconds=run.all_ready_seconds,
        create_requests_seconds=run.create_requests_seconds,
        verbs=tuple(verb_counts(create.requests, settle.requests, n)),
        by_resource=tuple(resource_counts(create.requests, settle.requests, n)),
        steady_requests=tuple(sorted(steady.requests.items())),
        steady_reconciles=sum(steady.reconciles.values()),
        empty_requests=sum(empty.requests.values()),
        startup_by_verb=dict(by_verb(dict(sorted(run.startup.requests.items())))),
        shutdown=fp.shutdown,
    )


# ---------------------------------------------------------------------------------------------------
# render
# ---------------------------------------------------------------------------------------------------

PHASE_HEADER = (
    "phase",
    "wall s",
    "operator CPU s",
    "operator CPU %",
    "machine busy CPU s",
    "of which the cluster's control plane",
    "this benchmark",
    "rest of the machine (approx.)",
    "VmRSS after MiB",
    "VmHWM after MiB",
    "API writes",
)


def phase_rows(s: Summary) -> list[list[str]]:
    st = s.startup
    rows = [
        ["startup (exec → caches synced)", f"{st.wall_seconds:.2f}", f"{st.cpu_seconds:.2f}"]
        + ["-"] * 5
        + [common.mib(st.rss), common.mib(st.hwm), "-"]
    ]
    for label, p in (
        (f"empty (no InferenceService, {s.empty.seconds:.0f} s)", s.empty),
        (f"create {s.n} → all Ready=True", s.create),
        (f"settle (last Ready → {s.quiet_seconds:g} s without a request)", s.settle),
        (f"steady ({s.n} objects, nothing changing, {s.steady.seconds:.0f} s)", s.steady),
    ):
        rows.append(
            [
                label,
                f"{p.seconds:.2f}",
                f"{p.cpu_seconds:.2f}",
                f"{100 * p.cpu_seconds / p.seconds:.1f}" if p.seconds else "-",
                f"{p.machine_busy_seconds:.2f}",
                f"{p.control_plane_seconds:.2f}",
                f"{p.bench_seconds:.2f}",
                f"{p.others_busy_seconds:.2f}",
                common.mib(p.rss_after),
                common.mib(p.hwm_after),
                str(p.writes),
            ]
        )
    return rows


def per_object_rows(s: Summary) -> list[list[str]]:
    return [
        [
            "VmRSS growth (steady - empty) / N",
            f"{s.rss_growth_per_object:.0f} bytes ({common.mib(s.rss_growth)} MiB in all)",
        ],
        ["VmHWM growth (steady - empty) / N", f"{s.hwm_growth_per_object:.0f} bytes"],
        ["operator CPU, create → all Ready, / N", f"{s.create_cpu_ms_per_object:.1f} ms"],
        [
            "operator CPU, create → last request (incl. settle), / N",
            f"{s.create_settle_cpu_ms_per_object:.1f} ms",
        ],
        ["reconciles (create + settle) / N", f"{s.reconciles_per_object:.2f}"],
        [
            "all Ready=True after",
            f"{s.all_ready_seconds:.1f} s (creates sent in {s.create_requests_seconds:.1f} s)",
        ],
    ]


def render_requests(s: Summary) -> str:
    out = ["\n\nOperator API requests while the objects were created (from its /metrics):\n\n"]
    out.append(
        common.markdown_table(
            ["verb", "create → all Ready", "settle", "per InferenceService"],
            [[v.verb, str(v.create), str(v.settle), f"{v.per_object:.2f}"] for v in s.verbs],
        )
    )
    out.append("\n\nBy verb, resource and code (create + settle):\n\n")
    out.append(
        common.markdown_table(
            ["verb resource", "code", "requests", "per InferenceService"],
            [[vr, c, str(k), f"{per:.2f}"] for vr, c, k, per in s.by_resource],
        )
    )
    return "".join(out)


def render_notes(s: Summary) -> str:
    sreq = s.steady_requests
    return (
        f"\n\nSteady state ({s.steady.seconds:.0f} s): {sum(k for _, k in sreq)} requests, "
        f"{s.steady.writes} writes"
        + (f" ({', '.join(f'{v} {r} {c}: {k}' for (v, r, c), k in sreq)})" if sreq else "")
        + f"; {s.steady_reconciles} reconciles. Empty phase: "
        f"{s.empty_requests} requests, {s.empty.writes} writes."
        f"\n\nStartup requests: {s.startup_by_verb}. "
        f"Shutdown: SIGTERM → exit code {s.shutdown.exit_code} after {s.shutdown.shutdown_seconds:.2f} s. "
        f"Operator log lines by level: {s.shutdown.log_levels}."
    )


def render(s: Summary) -> str:
    """The report: Markdown tables and notes, with a final newline."""
    return (
        f"### Operator with {s.n} InferenceServices\n\n"
        + common.markdown_table(PHASE_HEADER, phase_rows(s))
        + "\n\n"
        + common.markdown_table(["per InferenceService", "value"], per_object_rows(s))
        + render_requests(s)
        + render_notes(s)
        + "\n"
    )


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", help="use this cluster (default: start the local dev cluster)")
    p.add_argument("--cluster-name", default="mlops-bench-op", help="local dev cluster name")
    p.add_argument("--keep-cluster", action="store_true", help="leave the local dev cluster running")
    p.add_argument("--keep-objects", action="store_true", help="do not delete the namespace at the end")
    p.add_argument("--namespace", default="bench-op")
    p.add_argument("--count", type=int, default=100, help="InferenceServices to create")
    p.add_argument("--concurrency", type=int, default=16, help="creates in flight")
    p.add_argument("--empty-seconds", type=float, default=15.0, help="idle window with no object")
    p.add_argument("--idle-seconds", type=float, default=60.0, help="steady-state window with N objects")
    p.add_argument("--quiet-seconds", type=float, default=5.0, help="no request this long = settled")
    p.add_argument("--poll-interval", type=float, default=0.5)
    p.add_argument("--startup-timeout", type=float, default=120.0)
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--settle-timeout", type=float, default=120.0)
    p.add_argument("--delete-timeout", type=float, default=300.0)
    p.add_argument("--json", type=Path, help="also write every figure here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.count < 1:
        raise SystemExit("--count must be >= 1")
    started_cluster = False
    kubeconfig: str = args.kubeconfig or ""
    result: dict[str, Any] = {
        "machine": common.machine_info(),
        "count": args.count,
        "args": vars(args).copy(),
    }
    result["args"]["json"] = str(args.json) if args.json else None
    if not kubeconfig:
        if args.count > DEV_CLUSTER_MAX_SERVICES:
            common.log(
                f"warning: the dev cluster's service range fits {DEV_CLUSTER_MAX_SERVICES} Services; "
                f"--count {args.count} will not all get Ready"
            )
        kubeconfig, up_seconds = common.dev_cluster_up(args.cluster_name, "--real-nodes", "0")
        result["cluster_up_seconds"] = up_seconds
        started_cluster = True
    log_dir = Path(tempfile.mkdtemp(prefix="mlops-bench-op-"))
    try:
        # the dev cluster's kubeconfig sits in its directory, which every control-plane process names
        cluster_dir = str(Path(kubeconfig).resolve().parent) + os.sep
        footprint = asyncio.run(measure(args, kubeconfig, cluster_dir, log_dir))
    finally:
        if started_cluster and not args.keep_cluster:
            common.dev_cluster_down(args.cluster_name)
    result.update(footprint.to_json())
    print(render(summarise(footprint, args.count, args.quiet_seconds)), flush=True)
    if args.json:
        common.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
