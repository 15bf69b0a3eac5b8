#!/usr/bin/env python3
"""CPU and memory of the operator process, idle and with N InferenceServices, and its API requests.

The operator runs as a SUBPROCESS started exactly as a user starts it::

    python -m mlops_platform.cli run --kubeconfig K \\
        --health-probe-bind-address 127.0.0.1:0 --metrics-bind-address 127.0.0.1:PORT

(``PORT``: a free port picked by the script). Its CPU time comes from ``/proc/<pid>/stat``
(``utime + stime`` in clock ticks), its memory from ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``), its
API requests from its own ``/metrics`` (``rest_client_requests_by_resource_total{verb,resource,code}``).

Phases:

1. ``dev up --name mlops-bench-op`` (unless ``--kubeconfig``), the CRD, the namespace ``bench-op``.
2. Start the operator; wait until ``/metrics`` answers and its log says ``caches synced``.
3. ``empty``: ``--empty-seconds`` with no InferenceService (idle cost of an empty operator).
4. ``create``: ``--count`` InferenceServices (framework triton/seldon/torchserve in turn, minReplicas 1,
   maxReplicas 1, 1, 2, 3 in turn so half of them get an HPA), ``--concurrency`` creates in flight;
   polled (LIST every ``--poll-interval``) until every one reports ``Ready=True``.
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

The local dev cluster's Service range is 10.96.0.0/16 (``devcluster.cluster.SERVICE_CIDR``); a cluster
created before that change had kube-apiserver's default /24, which fits only 253 Services.

Examples::

    .venv/bin/python bench/operator_footprint.py --json /tmp/operator-footprint.json
    .venv/bin/python bench/operator_footprint.py --count 250 --keep-cluster
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _common import (
    delete_namespace,
    dev_cluster_down,
    dev_cluster_up,
    log,
    markdown_table,
    mib,
    wait_while_terminating,
    write_json,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")
FRAMEWORKS = ("triton", "seldon", "torchserve")
PORTS = {"triton": 8000, "seldon": 9000, "torchserve": 8080}
MAX_REPLICAS = (1, 1, 2, 3)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
REQUESTS_METRIC = "rest_client_requests_by_resource_total"
RECONCILE_METRIC = "controller_runtime_reconcile_total"
#: the dev cluster's --service-cluster-ip-range 10.96.0.0/16, less network, broadcast and `kubernetes`
DEV_CLUSTER_MAX_SERVICES = 2**16 - 3
RequestKey = tuple[str, str, str]  # (verb, resource, code)


# ---------------------------------------------------------------------------------------------------
# /proc readings
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


def _stat_cpu(pid: int | str) -> tuple[float, int]:
    """(utime + stime in seconds, threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    rest = stat[stat.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK, int(rest[17])


def control_plane_cpu(cluster_dir: str | None) -> float:
    """CPU seconds of every process whose command line names ``cluster_dir`` (the dev cluster's
    etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok-controller)."""
    if not cluster_dir:
        return 0.0
    total = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if cluster_dir.encode() not in f.read():
                    continue
            total += _stat_cpu(entry.name)[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return total


def read_proc(pid: int, cluster_dir: str | None) -> ProcSample:
    t = time.monotonic()
    cpu_seconds, threads = _stat_cpu(pid)
    status: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                status[key] = int(value.split()[0]) * 1024
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    busy = sum(cpu[:8]) - cpu[3] - cpu[4]
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    own = os.times()
    return ProcSample(
        t=t,
        cpu_seconds=cpu_seconds,
        rss=status["VmRSS"],
        hwm=status["VmHWM"],
        threads=threads,
        machine_busy_seconds=busy / CLK_TCK,
        control_plane_seconds=control_plane_cpu(cluster_dir),
        bench_seconds=own.user + own.system,
        loadavg_1m=load,
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    ]  # fmt: skip
    log_path = log_dir / "operator.log"
    log(f"starting the operator: {' '.join(cmd)} (log {log_path})")
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
                log(f"/metrics answers after {metrics_at:.2f} s")
        if metrics_at is not None and any('"caches synced"' in ln for ln in op.log_lines()):
            synced_at = time.monotonic() - t0
            log(f"caches synced after {synced_at:.2f} s")
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
        log(f"operator still running {timeout:.0f} s after SIGTERM; SIGKILL")
        op.proc.kill()
        op.proc.wait()
        return None, time.monotonic() - t0
    return code, time.monotonic() - t0


# ---------------------------------------------------------------------------------------------------
# InferenceServices
# ---------------------------------------------------------------------------------------------------


def inference_service(namespace: str, i: int) -> dict[str, Any]:
    framework = FRAMEWORKS[i % len(FRAMEWORKS)]
    return {
        "apiVersion": "mlops.platform/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": f"bench-{i:04d}", "namespace": namespace, "labels": {"bench": "footprint"}},
        "spec": {
            "modelUri": f"s3://models/bench/{i}",
            "framework": framework,
            "port": PORTS[framework],
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS[i % len(MAX_REPLICAS)],
            # small requests: N pods must fit on the fake nodes (the default request is 1 CPU)
            "resources": {"cpuRequest": "100m", "memoryRequest": "128Mi"},
        },
    }


def is_ready(obj: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


async def ensure_namespace(client: Any, namespace: str) -> None:
    """Create ``namespace``; it must not exist yet (one left ``Terminating`` is waited for)."""
    from mlops_platform.runtime import resources

    if await wait_while_terminating(client, namespace) is not None:
        raise SystemExit(f"namespace {namespace} exists already; delete it or pick --namespace")
    await client.create(
        resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )


async def create_all(client: Any, namespace: str, count: int, concurrency: int) -> float:
    """Create the InferenceServices, ``concurrency`` in flight; the seconds it took."""
    from mlops_platform.api import crd

    sem = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()

    async def one(i: int) -> None:
        async with sem:
            await client.create(crd.RESOURCE, inference_service(namespace, i))

    async with asyncio.TaskGroup() as tg:
        for i in range(count):
            tg.create_task(one(i))
    return time.monotonic() - t0


async def wait_all_ready(
    client: Any, namespace: str, count: int, timeout: float, poll: float, t0: float
) -> float:
    """Poll (LIST) until ``count`` InferenceServices report Ready=True; seconds since ``t0``."""
    from mlops_platform.api import crd

    last = -1
    while True:
        items = (await client.list(crd.RESOURCE, namespace, label_selector="bench=footprint"))["items"]
        ready = sum(1 for o in items if is_ready(o))
        elapsed = time.monotonic() - t0
        if ready != last:
            log(f"  {ready}/{count} Ready=True after {elapsed:.1f} s")
            last = ready
        if ready >= count:
            return elapsed
        if elapsed > timeout:
            raise SystemExit(
                f"only {ready}/{count} InferenceServices Ready=True after {timeout:.0f} s; "
                f"the others: {not_ready_summary(items)}"
            )
        await asyncio.sleep(poll)


def not_ready_summary(items: Sequence[Mapping[str, Any]]) -> str:
    """The Ready reasons of the objects that are not Ready, with one example message each."""
    reasons: Counter[str] = Counter()
    example: dict[str, str] = {}
    for o in items:
        if is_ready(o):
            continue
        conds = [c for c in (o.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"]
        reason = str(conds[0].get("reason")) if conds else "(no Ready condition)"
        reasons[reason] += 1
        if conds:
            example.setdefault(reason, f"{o['metadata']['name']}: {conds[0].get('message', '')}")
    return "; ".join(f"{n} {r} (e.g. {example.get(r, '-')})" for r, n in reasons.most_common())


async def wait_quiet(op: Operator, quiet: float, poll: float, timeout: float) -> tuple[float, Scrape]:
    """Until the operator's request counters did not move for ``quiet`` seconds; (seconds, scrape)."""
    t0 = time.monotonic()
    last = await scrape(op.metrics_url)
    last_change = time.monotonic()
    while time.monotonic() - last_change < quiet:
        if time.monotonic() - t0 > timeout:
            log(f"still making requests {timeout:.0f} s after the last Ready; measuring anyway")
            break
        await asyncio.sleep(poll)
        now = await scrape(op.metrics_url)
        if now.requests != last.requests:
            last, last_change = now, time.monotonic()
    # the quiet period itself is not part of the settling time
    return last_change - t0, last


# ---------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
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

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["requests"] = requests_json(self.requests)
        d["requests_by_verb"] = dict(by_verb(self.requests))
        d["writes"] = self.writes
        d["others_busy_seconds"] = (
            self.machine_busy_seconds - self.cpu_seconds - self.control_plane_seconds - self.bench_seconds
        )
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


async def measure(
    args: argparse.Namespace, kubeconfig: str, cluster_dir: str, log_dir: Path
) -> dict[str, Any]:
    from mlops_platform.api import crd
    from mlops_platform.runtime import client as kclient

    poll: float = args.poll_interval
    result: dict[str, Any] = {"control_plane_dir": cluster_dir}
    async with kclient.Client.from_kubeconfig(kubeconfig) as client:
        log("installing the InferenceService CRD")
        await crd.install(client)
        await ensure_namespace(client, args.namespace)

        op = start_operator(kubeconfig, log_dir)
        result["operator_command"] = op.command
        phases: list[Phase] = []
        try:
            t_start = time.monotonic()
            metrics_after, synced_after = await wait_started(op, args.startup_timeout, min(poll, 0.05))
            p0, s0 = read_proc(op.pid, cluster_dir), await scrape(op.metrics_url)
            result["startup"] = {
                "metrics_after_seconds": metrics_after,
                "synced_after_seconds": synced_after,
                "cpu_seconds": p0.cpu_seconds,
                "rss": p0.rss,
                "hwm": p0.hwm,
                "threads": p0.threads,
                "wall_seconds": p0.t - t_start,
                "requests": requests_json(s0.requests),
            }
            log(f"startup: {p0.cpu_seconds:.2f} CPU s, VmRSS {mib(p0.rss)} MiB, VmHWM {mib(p0.hwm)} MiB")

            log(f"empty: {args.empty_seconds:.0f} s with no InferenceService")
            await asyncio.sleep(args.empty_seconds)
            p1, s1 = read_proc(op.pid, cluster_dir), await scrape(op.metrics_url)
            phases.append(phase("empty", p0, p1, s0, s1))

            log(f"create: {args.count} InferenceServices, {args.concurrency} in flight")
            t0 = time.monotonic()
            create_seconds = await create_all(client, args.namespace, args.count, args.concurrency)
            log(f"  created in {create_seconds:.1f} s")
            ready_after = await wait_all_ready(
                client, args.namespace, args.count, args.ready_timeout, poll, t0
            )
            p2, s2 = read_proc(op.pid, cluster_dir), await scrape(op.metrics_url)
            phases.append(phase("create", p1, p2, s1, s2, seconds=ready_after))
            result["create_requests_seconds"] = create_seconds
            result["all_ready_seconds"] = ready_after

            log(f"settle: until no request for {args.quiet_seconds:.0f} s")
            settle_seconds, s3 = await wait_quiet(op, args.quiet_seconds, poll, args.settle_timeout)
            p3 = read_proc(op.pid, cluster_dir)
            phases.append(phase("settle", p2, p3, s2, s3))
            result["settle_seconds_until_last_request"] = settle_seconds

            log(f"steady: {args.idle_seconds:.0f} s with nothing changing")
            await asyncio.sleep(args.idle_seconds)
            p4, s4 = read_proc(op.pid, cluster_dir), await scrape(op.metrics_url)
            phases.append(phase("steady", p3, p4, s3, s4))
            log(f"  steady: {p4.cpu_seconds - p3.cpu_seconds:.2f} CPU s, {phases[-1].writes} writes")
            result["final_requests"] = requests_json(s4.requests)
            result["final_reconciles"] = dict(s4.reconciles)
        finally:
            log("stopping the operator (SIGTERM)")
            code, shutdown = stop_operator(op)
            log(f"  exit code {code} after {shutdown:.2f} s")
            result["exit_code"] = code
            result["shutdown_seconds"] = shutdown
            result["log_levels"] = op.log_levels()
            result["log_path"] = str(op.log_path)
            result["phases"] = [p.to_json() for p in phases]
            if not args.keep_objects:
                result["namespace_deleted_seconds"] = await delete_namespace(
                    client, args.namespace, args.delete_timeout, poll
                )
    return result


def machine_info() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "clock_ticks_per_second": CLK_TCK,
    }


# ---------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------


def report(r: dict[str, Any]) -> str:
    n: int = r["count"]
    st = r["startup"]
    ph = {p["name"]: p for p in r["phases"]}
    empty, create, settle, steady = ph["empty"], ph["create"], ph["settle"], ph["steady"]
    out: list[str] = []

    def cpu_pct(p: Mapping[str, Any]) -> str:
        return f"{100 * p['cpu_seconds'] / p['seconds']:.1f}" if p["seconds"] else "-"

    rows = [
        [
            "startup (exec → caches synced)",
            f"{st['wall_seconds']:.2f}",
            f"{st['cpu_seconds']:.2f}",
            "-",
            "-",
            "-",
            "-",
            "-",
            mib(st["rss"]),
            mib(st["hwm"]),
            "-",
        ]
    ]
    for label, p in (
        (f"empty (no InferenceService, {empty['seconds']:.0f} s)", empty),
        (f"create {n} → all Ready=True", create),
        (f"settle (last Ready → {args_quiet(r)} s without a request)", settle),
        (f"steady ({n} objects, nothing changing, {steady['seconds']:.0f} s)", steady),
    ):
        rows.append(
            [
                label,
                f"{p['seconds']:.2f}",
                f"{p['cpu_seconds']:.2f}",
                cpu_pct(p),
                f"{p['machine_busy_seconds']:.2f}",
                f"{p['control_plane_seconds']:.2f}",
                f"{p['bench_seconds']:.2f}",
                f"{p['others_busy_seconds']:.2f}",
                mib(p["rss_after"]),
                mib(p["hwm_after"]),
                str(p["writes"]),
            ]
        )
    out.append(f"### Operator with {n} InferenceServices\n\n")
    out.append(
        markdown_table(
            [
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
            ],
            rows,
        )
    )

    idle_rss = empty["rss_after"]
    loaded_rss = steady["rss_after"]
    create_cpu = create["cpu_seconds"] + settle["cpu_seconds"]
    out.append("\n\n")
    out.append(
        markdown_table(
            ["per InferenceService", "value"],
            [
                [
                    "VmRSS growth (steady - empty) / N",
                    f"{(loaded_rss - idle_rss) / n:.0f} bytes ({mib(loaded_rss - idle_rss)} MiB in all)",
                ],
                [
                    "VmHWM growth (steady - empty) / N",
                    f"{(steady['hwm_after'] - empty['hwm_after']) / n:.0f} bytes",
                ],
                ["operator CPU, create → all Ready, / N", f"{1000 * create['cpu_seconds'] / n:.1f} ms"],
                [
                    "operator CPU, create → last request (incl. settle), / N",
                    f"{1000 * create_cpu / n:.1f} ms",
                ],
                [
                    "reconciles (create + settle) / N",
                    f"{(sum(create['reconciles'].values()) + sum(settle['reconciles'].values())) / n:.2f}",
                ],
                [
                    "all Ready=True after",
                    f"{r['all_ready_seconds']:.1f} s (creates sent in {r['create_requests_seconds']:.1f} s)",
                ],
            ],
        )
    )

    verbs = sorted(set(by_verb(_keys(create)) | by_verb(_keys(settle))))
    cv, sv = by_verb(_keys(create)), by_verb(_keys(settle))
    rows = [[v, str(cv[v]), str(sv[v]), f"{(cv[v] + sv[v]) / n:.2f}"] for v in verbs]
    rows.append(
        [
            "**all**",
            str(sum(cv.values())),
            str(sum(sv.values())),
            f"{(sum(cv.values()) + sum(sv.values())) / n:.2f}",
        ]
    )
    out.append("\n\nOperator API requests while the objects were created (from its /metrics):\n\n")
    out.append(markdown_table(["verb", "create → all Ready", "settle", "per InferenceService"], rows))

    res: Counter[tuple[str, str]] = Counter()
    for (verb, resource, code), k in {**_keys(create)}.items():
        res[(f"{verb} {resource}", code)] += k
    for (verb, resource, code), k in _keys(settle).items():
        res[(f"{verb} {resource}", code)] += k
    out.append("\n\nBy verb, resource and code (create + settle):\n\n")
    out.append(
        markdown_table(
            ["verb resource", "code", "requests", "per InferenceService"],
            [[vr, c, str(k), f"{k / n:.2f}"] for (vr, c), k in sorted(res.items())],
        )
    )

    sreq = _keys(steady)
    out.append(
        f"\n\nSteady state ({steady['seconds']:.0f} s): {sum(sreq.values())} requests, "
        f"{steady['writes']} writes"
        + (f" ({', '.join(f'{v} {r} {c}: {k}' for (v, r, c), k in sorted(sreq.items()))})" if sreq else "")
        + f"; {sum(steady['reconciles'].values())} reconciles. Empty phase: "
        f"{sum(_keys(empty).values())} requests, {empty['writes']} writes."
    )
    out.append(
        f"\n\nStartup requests: {dict(by_verb(_keys(st)))}. "
        f"Shutdown: SIGTERM → exit code {r['exit_code']} after {r['shutdown_seconds']:.2f} s. "
        f"Operator log lines by level: {r['log_levels']}."
    )
    return "".join(out) + "\n"


def args_quiet(r: Mapping[str, Any]) -> str:
    return f"{r['args']['quiet_seconds']:g}"


def _keys(p: Mapping[str, Any]) -> Counter[RequestKey]:
    return Counter({(x["verb"], x["resource"], x["code"]): x["count"] for x in p["requests"]})


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
    result: dict[str, Any] = {"machine": machine_info(), "count": args.count, "args": vars(args).copy()}
    result["args"]["json"] = str(args.json) if args.json else None
    if not kubeconfig:
        if args.count > DEV_CLUSTER_MAX_SERVICES:
            log(
                f"warning: the dev cluster's service range fits {DEV_CLUSTER_MAX_SERVICES} Services; "
                f"--count {args.count} will not all get Ready"
            )
        kubeconfig, up_seconds = dev_cluster_up(args.cluster_name)
        result["cluster_up_seconds"] = up_seconds
        started_cluster = True
    log_dir = Path(tempfile.mkdtemp(prefix="mlops-bench-op-"))
    try:
        # the dev cluster's kubeconfig sits in its directory, which every control-plane process names
        cluster_dir = str(Path(kubeconfig).resolve().parent) + os.sep
        result.update(asyncio.run(measure(args, kubeconfig, cluster_dir, log_dir)))
    finally:
        if started_cluster and not args.keep_cluster:
            dev_cluster_down(args.cluster_name)
    print(report(result), flush=True)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
