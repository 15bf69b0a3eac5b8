#!/usr/bin/env python3
"""Memory of the controller runtime: import-time RSS, and RSS of an informer cache of N ConfigMaps.

Every figure comes from a FRESH child process (``bench/import_child.py``, ``bench.cache_child``) so that
nothing the benchmark itself imported or allocated is counted. Progress goes to stderr; the results
are printed as Markdown tables on stdout and, with ``--json FILE``, written as JSON with every single
run.

Modes:

``import``
    Max RSS (``getrusage().ru_maxrss``) and ``VmRSS`` of a child that only runs one import statement:
    the bare interpreter, the runtime's dependencies one by one, and everything a runtime user imports.
    For comparison ``kopf`` and ``kubernetes_asyncio`` are pip-installed, each into a throwaway venv of
    its own under /tmp (never into the project; kopf imports kubernetes_asyncio when it is installed
    next to it); if that fails the table says so. Median of ``--repeat`` runs.

``cache``
    Needs an API server: ``--kubeconfig`` or, by default, the local dev cluster
    ``mlops-platform dev up --name mlops-bench`` (taken down at the end unless ``--keep-cluster``).
    Server-side-applies ``--count`` ConfigMaps (so each has real ``managedFields``) into the namespace
    ``bench-rss``, skipping those that exist, then for each variant (``stripped``: the informer's
    default transform; ``kept``: ``transform=None``; ``stripped-per-page``: a bench-only diagnostic
    that strips every LIST page as it arrives instead of after the whole LIST) starts an ``Informer``
    in a fresh child, waits for sync, ``gc.collect()``s and reports VmRSS, the delta over the
    post-import baseline, bytes per object, the peak (VmHWM), the RSS after ``malloc_trim(0)``, the
    deep ``sys.getsizeof`` of the cached objects and the sync time. Median of ``--repeat`` runs.

Each mode is collect (the children's runs) -> summarise (the medians and differences) -> render (the
tables).

Examples (``.venv/bin/python bench/runtime_rss.py ...`` works the same)::

    .venv/bin/python -m bench.runtime_rss import --json /tmp/rss-import.json
    .venv/bin/python -m bench.runtime_rss cache --json /tmp/rss-cache.json
    .venv/bin/python -m bench.runtime_rss cache --kubeconfig ~/.kube/config --count 2000 --keep-objects
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a script (`python bench/runtime_rss.py`): import `bench` as a package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench import _common as common
from bench.cache_child import CacheRun

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client

KIB = 1024
#: the repository root: the cache child runs there as `python -m bench.cache_child`
REPO_ROOT = Path(__file__).resolve().parents[1]
#: the import child runs by path (see its docstring: `-m` would load modules that then count)
IMPORT_CHILD = Path(__file__).resolve().with_name("import_child.py")

RUNTIME_MODULES = (
    "manager",
    "controller",
    "informer",
    "cache",
    "leaderelection",
    "events",
    "logs",
)
RUNTIME_IMPORT = "import " + ", ".join(f"mlops_platform.runtime.{m}" for m in RUNTIME_MODULES)


@dataclass(frozen=True)
class ImportTarget:
    label: str
    stmt: str
    #: "project": the project's venv; otherwise the comparison package whose throwaway venv runs it
    venv: str = "project"


IMPORT_TARGETS: tuple[ImportTarget, ...] = (
    ImportTarget("bare interpreter (`pass`)", "pass"),
    ImportTarget(
        "stdlib floor of an asyncio HTTPS client (asyncio, ssl, json, logging)",
        "import asyncio, ssl, json, logging",
    ),
    ImportTarget("msgspec", "import msgspec"),
    ImportTarget("yaml (PyYAML)", "import yaml"),
    ImportTarget("prometheus_client", "import prometheus_client"),
    ImportTarget("httpx2 (lightkube's HTTP stack)", "import httpx2"),
    ImportTarget("httpx2 + prometheus_client", "import httpx2, prometheus_client"),
    ImportTarget(
        "lightkube config layer (what client.py imports)",
        "import lightkube.config.kubeconfig, lightkube.config.client_adapter",
    ),
    ImportTarget("mlops_platform.runtime.transport.client", "import mlops_platform.runtime.transport.client"),
    ImportTarget("runtime: " + " + ".join(RUNTIME_MODULES), RUNTIME_IMPORT),
    ImportTarget("bare interpreter (kopf venv)", "pass", venv="kopf"),
    ImportTarget("kopf", "import kopf", venv="kopf"),
    ImportTarget("bare interpreter (kubernetes_asyncio venv)", "pass", venv="kubernetes_asyncio"),
    ImportTarget(
        "kubernetes_asyncio (`client, config, watch`)",
        "from kubernetes_asyncio import client, config, watch",
        venv="kubernetes_asyncio",
    ),
)
#: each in a venv of its own: kopf imports kubernetes_asyncio when it is installed next to it
COMPARE_PACKAGES = ("kopf", "kubernetes_asyncio")


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def fresh_python(python: str, *args: str) -> list[str]:
    """The command line of a fresh ``python args...`` whose ru_maxrss is its own.

    Linux carries a process's peak RSS across ``exec`` (``signal->maxrss`` keeps the old address
    space's high-water mark), and this benchmark's own process (20+ MiB, far more in cache mode) is
    that old address space when ``subprocess`` forks/vforks and execs the child directly: the child's
    ``ru_maxrss`` would report the parent's size (measured: 211 MiB for a bare interpreter started
    from a parent holding a 200 MiB buffer). A tiny ``/bin/sh`` in between forks again (a fork starts
    with a zeroed ``maxrss`` and the shell's small address space) and then execs Python. ``VmRSS`` and
    ``VmHWM`` are per address space and unaffected either way.
    """
    return ["/bin/sh", "-c", '"$0" "$@"; exit $?', python, *args]


# ---------------------------------------------------------------------------------------------------
# import mode: collect
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportRun:
    """What one import child measured."""

    ru_maxrss: int  # bytes
    vmrss: int  # bytes
    vmhwm: int  # bytes
    modules: int
    seconds: float


@dataclass(frozen=True)
class ImportResult:
    """The runs of one target; ``error`` when a run failed (the runs before it are kept)."""

    target: ImportTarget
    python: str
    runs: tuple[ImportRun, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ImportMeasurement:
    results: tuple[ImportResult, ...]
    #: per comparison package: how its throwaway venv was prepared, or why it was not measured
    compare_status: Mapping[str, str]


def run_import_child(python: str, stmt: str, timeout: float = 300.0) -> ImportRun:
    """Run ``stmt`` in a fresh ``import_child``; read its VmRSS/VmHWM while it waits for its stdin."""
    cmd = fresh_python(python, "-I", str(IMPORT_CHILD), stmt)
    with subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        start_new_session=True,  # its own process group: /bin/sh and the interpreter it forked
    ) as proc:
        assert proc.stdout is not None
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            line = proc.stdout.readline()
            status = common.read_proc(int(line.split()[1])) if line.startswith("RESULT ") else None
            _, stderr = proc.communicate()  # closes its stdin: the child exits
        finally:
            timer.cancel()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout)
    if proc.returncode != 0 or status is None:
        raise RuntimeError(stderr.strip().splitlines()[-1] if stderr.strip() else "failed")
    _, _pid, maxrss, modules, secs = line.split()
    return ImportRun(int(maxrss) * KIB, status.rss, status.hwm, int(modules), float(secs))


def prepare_compare_venv(path: Path, pkg: str) -> tuple[str | None, str]:
    """Create a throwaway venv at ``path`` and pip-install ``pkg`` into it; return (python, status).

    Never touches the project's venv. An existing venv is reused (pip then only checks).
    """
    python = path / "bin" / "python"
    if not python.exists():
        common.log(f"creating throwaway venv {path}")
        base = getattr(sys, "_base_executable", sys.executable)
        proc = subprocess.run([base, "-m", "venv", str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return None, f"not measured: venv creation failed: {proc.stderr.strip()[-300:]}"
    common.log(f"pip install {pkg} into {path} (not into the project)")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", pkg],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["unknown error"]
        status = f"not measured: could not be pip-installed: {tail[0][:300]}"
        common.log(f"  {pkg}: {status}")
        return None, status
    ver = subprocess.run(
        [str(python), "-m", "pip", "show", pkg], capture_output=True, text=True, check=False
    ).stdout
    version = next((ln.split(":", 1)[1].strip() for ln in ver.splitlines() if ln.startswith("Version:")), "?")
    common.log(f"  {pkg} {version}")
    return str(python), f"installed {version} into the throwaway venv {path}"


def compare_pythons(args: argparse.Namespace) -> tuple[dict[str, str | None], dict[str, str]]:
    """The interpreter of each venv (``None``: not measured) and the status of each comparison package."""
    pythons: dict[str, str | None] = {"project": sys.executable}
    status: dict[str, str] = {}
    for pkg in COMPARE_PACKAGES:
        if args.no_compare:
            pythons[pkg], status[pkg] = None, "not measured: --no-compare"
        else:
            pythons[pkg], status[pkg] = prepare_compare_venv(Path(args.compare_venvs) / pkg, pkg)
    return pythons, status


def measure_target(target: ImportTarget, python: str, repeat: int) -> ImportResult:
    """``repeat`` fresh children of ``python`` running ``target``; stops at the first that fails."""
    runs: list[ImportRun] = []
    for i in range(repeat):
        try:
            run = run_import_child(python, target.stmt)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return ImportResult(target, python, tuple(runs), f"import failed: {e}")
        runs.append(run)
        common.log(f"{target.label}: run {i + 1}/{repeat}: VmRSS {common.mib(run.vmrss)} MiB")
    return ImportResult(target, python, tuple(runs))


def collect_imports(args: argparse.Namespace) -> ImportMeasurement:
    pythons, compare_status = compare_pythons(args)
    results: list[ImportResult] = []
    for target in IMPORT_TARGETS:
        python = pythons[target.venv]
        if python is None:
            results.append(ImportResult(target, "", error=compare_status[target.venv]))
        else:
            results.append(measure_target(target, python, args.repeat))
    return ImportMeasurement(tuple(results), compare_status)


# ---------------------------------------------------------------------------------------------------
# import mode: summarise, render
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportMedians:
    ru_maxrss: float
    vmrss: float
    vmhwm: float
    modules: float
    seconds: float


@dataclass(frozen=True)
class ImportFigures:
    result: ImportResult
    median: ImportMedians | None  # None: no run
    #: median VmRSS over the bare interpreter of the same venv (NaN when that has no run)
    delta_vmrss: float


def import_medians(runs: Sequence[ImportRun]) -> ImportMedians | None:
    if not runs:
        return None
    return ImportMedians(
        *(
            median([float(getattr(r, k)) for r in runs])
            for k in ("ru_maxrss", "vmrss", "vmhwm", "modules", "seconds")
        )
    )


def summarise_imports(measurement: ImportMeasurement) -> list[ImportFigures]:
    medians = [import_medians(r.runs) for r in measurement.results]
    baselines = {
        r.target.venv: m for r, m in zip(measurement.results, medians, strict=True) if r.target.stmt == "pass"
    }
    figures: list[ImportFigures] = []
    for res, med in zip(measurement.results, medians, strict=True):
        base = baselines[res.target.venv]
        delta = med.vmrss - base.vmrss if med and base else float("nan")
        figures.append(ImportFigures(res, med, delta))
    return figures


def render_imports(figures: Sequence[ImportFigures], compare_status: Mapping[str, str], repeat: int) -> None:
    rows: list[list[str]] = []
    for f in figures:
        if f.result.error or f.median is None:
            rows.append([f.result.target.label, "—", "—", "—", "—", "—", f.result.error or "no run"])
            continue
        m = f.median
        rows.append(
            [
                f.result.target.label,
                common.mib(m.ru_maxrss),
                common.mib(m.vmrss),
                f"{f.delta_vmrss / common.MIB:+.1f}",
                str(int(m.modules)),
                f"{m.seconds * 1000:.0f}",
                "",
            ]
        )
    header = [
        "import",
        "max RSS (ru_maxrss) MiB",
        "VmRSS MiB",
        "Δ VmRSS vs its interpreter MiB",
        "modules in sys.modules",
        "import ms",
        "note",
    ]
    print(f"## Import-time RSS (median of {repeat} fresh processes each)\n")
    print(common.markdown_table(header, rows))
    print()
    for pkg, st in compare_status.items():
        print(f"- {pkg}: {st}")


def import_mode(args: argparse.Namespace) -> dict[str, Any]:
    measurement = collect_imports(args)
    figures = summarise_imports(measurement)
    render_imports(figures, measurement.compare_status, args.repeat)
    return {
        "mode": "import",
        "machine": common.machine_info(),
        "repeat": args.repeat,
        "compare_venvs": args.compare_venvs,
        "compare_packages": dict(measurement.compare_status),
        "results": [
            {
                "label": f.result.target.label,
                "stmt": f.result.target.stmt,
                "python": f.result.python,
                "error": f.result.error,
                "median": asdict(f.median) if f.median else None,
                "runs": [asdict(run) for run in f.result.runs],
            }
            for f in figures
        ],
    }


# ---------------------------------------------------------------------------------------------------
# cache mode: collect
# ---------------------------------------------------------------------------------------------------

VARIANT_LABELS = {
    "stripped": "stripped (default transform)",
    "kept": "kept (`transform=None`)",
    "stripped-per-page": "stripped per LIST page (bench-only patch, not the runtime's behaviour)",
}
LABEL_KEY = "app.kubernetes.io/name"
LABEL_VALUE = "bench-rss"
FIELD_MANAGER = "bench-rss"


def config_map(namespace: str, i: int) -> dict[str, Any]:
    """A small ConfigMap (~300 bytes of data, four labels), the same every time for a given i."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"bench-{i:05d}",
            "namespace": namespace,
            "labels": {
                LABEL_KEY: LABEL_VALUE,
                "app.kubernetes.io/part-of": "mlops-platform",
                "bench.mlops.platform/shard": str(i % 16),
                "bench.mlops.platform/index": str(i),
            },
        },
        "data": {
            "model": f"resnet50-v1.5-{i % 97}",
            "endpoint": f"http://model-{i}.{namespace}.svc.cluster.local:8080/v1/models/m{i}:predict",
            "replicas": str(1 + i % 7),
            "runtime": "triton-24.08",
            "settings.json": '{"maxBatchSize": 32, "dynamicBatching": true, "instanceGroup": '
            f'"gpu", "preferredBatch": [4, 8, 16], "timeoutMs": {100 + i % 900}}}',
            "owner": "team-inference@example.com",
        },
    }


SELECTOR = f"{LABEL_KEY}={LABEL_VALUE}"


@dataclass(frozen=True)
class CacheSetup:
    """The benchmark's ConfigMaps: how many existed and were created, and their size as compact JSON."""

    existing_before: int
    created: int
    create_seconds: float
    create_rate_per_s: float | None
    sample_json_bytes_with_managed_fields: float
    sample_json_bytes_without_managed_fields: float
    sample_data_json_bytes: float


@dataclass(frozen=True)
class CacheMeasurement:
    kubeconfig: str
    started_cluster: bool
    setup: CacheSetup
    runs: Mapping[str, Sequence[CacheRun]]  # by variant


async def existing_names(client: Client, namespace: str) -> set[str]:
    """The names of the benchmark's ConfigMaps in ``namespace`` (LIST in pages of 500)."""
    from mlops_platform.runtime.transport import resources

    existing: set[str] = set()
    cont: str | None = None
    while True:
        page = await client.list(
            resources.CONFIG_MAP, namespace, label_selector=SELECTOR, limit=500, continue_=cont
        )
        existing.update(o["metadata"]["name"] for o in page.get("items") or ())
        cont = (page.get("metadata") or {}).get("continue") or None
        if not cont:
            return existing


async def apply_config_maps(client: Client, namespace: str, wanted: Sequence[int], concurrency: int) -> float:
    """Server-side-apply the ConfigMaps ``wanted``, ``concurrency`` in flight; the seconds it took."""
    from mlops_platform.runtime.transport import resources

    sem = asyncio.Semaphore(concurrency)
    done = 0
    t0 = time.perf_counter()

    async def apply_one(i: int) -> None:
        nonlocal done
        async with sem:
            await client.apply(resources.CONFIG_MAP, config_map(namespace, i), field_manager=FIELD_MANAGER)
        done += 1
        if done % 1000 == 0 or done == len(wanted):
            rate = done / (time.perf_counter() - t0)
            common.log(f"  applied {done}/{len(wanted)} ({rate:.0f}/s)")

    async with asyncio.TaskGroup() as tg:
        for i in wanted:
            tg.create_task(apply_one(i))
    return time.perf_counter() - t0 if wanted else 0.0


async def json_sizes(client: Client, namespace: str) -> tuple[float, float, float]:
    """Median compact-JSON bytes of one object with and without managedFields, and of its data."""
    from mlops_platform.runtime.transport import resources

    sample = (await client.list(resources.CONFIG_MAP, namespace, label_selector=SELECTOR, limit=500))["items"]
    enc = json.dumps
    full = [len(enc(o, separators=(",", ":"))) for o in sample]
    stripped = []
    for o in sample:
        o["metadata"].pop("managedFields", None)
        stripped.append(len(enc(o, separators=(",", ":"))))
    data_bytes = [len(enc(config_map(namespace, i)["data"], separators=(",", ":"))) for i in range(500)]
    return median(full), median(stripped), median(data_bytes)


async def ensure_objects(kubeconfig: str, namespace: str, count: int, concurrency: int) -> CacheSetup:
    """Create the namespace and the ConfigMaps that are missing (server-side apply); return stats."""
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    async with rclient.Client.from_kubeconfig(kubeconfig) as client:
        # a namespace left Terminating by an earlier cleanup must be gone before we can re-create it
        await common.wait_while_terminating(client, namespace)
        await client.apply(
            resources.NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            field_manager=FIELD_MANAGER,
        )
        existing = await existing_names(client, namespace)
        wanted = [i for i in range(count) if f"bench-{i:05d}" not in existing]
        common.log(
            f"{len(existing)} ConfigMaps already in {namespace}; creating {len(wanted)} (server-side apply)"
        )
        create_seconds = await apply_config_maps(client, namespace, wanted, concurrency)
        # what one object costs on the wire, with and without managedFields
        with_mf, without_mf, data = await json_sizes(client, namespace)
    return CacheSetup(
        existing_before=len(existing),
        created=len(wanted),
        create_seconds=create_seconds,
        create_rate_per_s=len(wanted) / create_seconds if create_seconds else None,
        sample_json_bytes_with_managed_fields=with_mf,
        sample_json_bytes_without_managed_fields=without_mf,
        sample_data_json_bytes=data,
    )


async def delete_bench_namespace(kubeconfig: str, namespace: str, wait: float = 600.0) -> None:
    """Delete ``namespace`` with a client of its own and wait (up to ``wait`` s) until it is gone."""
    from mlops_platform.runtime.transport import client as rclient

    async with rclient.Client.from_kubeconfig(kubeconfig) as client:
        await common.delete_namespace(client, namespace, wait, 2, digits=0)


def run_cache_child(kubeconfig: str, namespace: str, variant: str, page_size: int) -> CacheRun:
    """One fresh ``python -m bench.cache_child`` (from the repository root, else isolated like ``-I``)."""
    cmd = fresh_python(
        sys.executable, "-E", "-s", "-m", "bench.cache_child",
        str(Path(kubeconfig).absolute()), namespace, SELECTOR, variant, str(page_size),
    )  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO_ROOT, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"cache child ({variant}) failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return CacheRun(**json.loads(line[len("RESULT ") :]))


def measure_variants(args: argparse.Namespace, kubeconfig: str) -> dict[str, list[CacheRun]]:
    """``--repeat`` children of each variant, interleaved so a drift of the machine spreads over all."""
    runs: dict[str, list[CacheRun]] = {v: [] for v in args.variants}
    for i in range(args.repeat):
        for variant in args.variants:
            r = run_cache_child(kubeconfig, args.namespace, variant, args.page_size)
            runs[variant].append(r)
            common.log(
                f"{variant}: run {i + 1}/{args.repeat}: {r.objects} objects, "
                f"VmRSS {common.mib(r.rss)} MiB (baseline {common.mib(r.baseline_rss)}), "
                f"peak {common.mib(r.hwm)} MiB, "
                f"sync {r.sync_seconds:.2f} s"
            )
            if r.objects < args.count:
                common.log(f"WARNING: only {r.objects} of {args.count} objects cached")
    return runs


def collect_cache(args: argparse.Namespace) -> CacheMeasurement:
    started_cluster = False
    kubeconfig: str = args.kubeconfig or ""
    if not kubeconfig:
        kubeconfig, _ = common.dev_cluster_up(args.cluster_name, "--real-nodes", "0")
        started_cluster = True
    teardown = started_cluster and not args.keep_cluster
    try:
        setup = asyncio.run(ensure_objects(kubeconfig, args.namespace, args.count, args.concurrency))
        runs = measure_variants(args, kubeconfig)
    finally:
        if teardown:
            common.dev_cluster_down(args.cluster_name)
        elif not args.keep_objects:
            asyncio.run(delete_bench_namespace(kubeconfig, args.namespace))
    return CacheMeasurement(kubeconfig, started_cluster, setup, runs)


# ---------------------------------------------------------------------------------------------------
# cache mode: summarise, render
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantSummary:
    """Medians over one variant's runs (Δ: over each run's own post-import baseline)."""

    objects: float
    objects_with_managed_fields: float
    baseline_rss: float
    rss: float
    delta_rss: float
    bytes_per_object: float
    delta_rss_after_malloc_trim: float
    hwm: float
    deep_size: float
    sync_seconds: float
    delta_rss_min: float
    delta_rss_max: float


def summarise_variant(runs: Sequence[CacheRun]) -> VariantSummary:
    def med(get: Callable[[CacheRun], float]) -> float:
        return median([float(get(r)) for r in runs])

    deltas = [r.rss - r.baseline_rss for r in runs]
    return VariantSummary(
        objects=med(lambda r: r.objects),
        objects_with_managed_fields=med(lambda r: r.objects_with_managed_fields),
        baseline_rss=med(lambda r: r.baseline_rss),
        rss=med(lambda r: r.rss),
        delta_rss=median(deltas),
        bytes_per_object=median([d / r.objects for d, r in zip(deltas, runs, strict=True)]),
        delta_rss_after_malloc_trim=median([r.rss_after_malloc_trim - r.baseline_rss for r in runs]),
        hwm=med(lambda r: r.hwm),
        deep_size=med(lambda r: r.deep_size),
        sync_seconds=med(lambda r: r.sync_seconds),
        delta_rss_min=float(min(deltas)),
        delta_rss_max=float(max(deltas)),
    )


def summarise_cache(measurement: CacheMeasurement) -> dict[str, VariantSummary]:
    return {variant: summarise_variant(runs) for variant, runs in measurement.runs.items()}


CACHE_HEADER = (
    "variant",
    "objects cached",
    "post-import baseline VmRSS MiB",
    "VmRSS after sync + gc MiB",
    "Δ RSS MiB (min..max)",
    "Δ bytes / object",
    "Δ after malloc_trim MiB",
    "peak VmHWM MiB",
    "Python objects bytes / object",
    "sync s",
)


def variant_row(variant: str, s: VariantSummary) -> list[str]:
    return [
        VARIANT_LABELS[variant],
        f"{int(s.objects)} ({int(s.objects_with_managed_fields)} with mF)",
        common.mib(s.baseline_rss),
        common.mib(s.rss),
        f"{common.mib(s.delta_rss)} ({common.mib(s.delta_rss_min)}..{common.mib(s.delta_rss_max)})",
        f"{s.bytes_per_object:.0f}",
        common.mib(s.delta_rss_after_malloc_trim),
        common.mib(s.hwm),
        f"{s.deep_size / s.objects:.0f}" if s.objects else "—",
        f"{s.sync_seconds:.2f}",
    ]


def render_cache(args: argparse.Namespace, setup: CacheSetup, summary: Mapping[str, VariantSummary]) -> None:
    print(f"## Informer cache of {args.count} ConfigMaps (median of {args.repeat} fresh processes each)\n")
    print(common.markdown_table(CACHE_HEADER, [variant_row(v, s) for v, s in summary.items()]))
    print()
    print(
        f"- objects: {setup.existing_before} existed, {setup.created} created by server-side apply"
        + (
            f" in {setup.create_seconds:.1f} s ({setup.create_rate_per_s:.0f}/s, "
            f"{args.concurrency} in flight)"
            if setup.created
            else ""
        )
    )
    print(
        f"- one object as compact JSON: {setup.sample_json_bytes_with_managed_fields:.0f} bytes with "
        f"managedFields, {setup.sample_json_bytes_without_managed_fields:.0f} without "
        f"(its data: {setup.sample_data_json_bytes:.0f} bytes)"
    )
    for variant in ("stripped", "stripped-per-page"):
        if variant in summary and "kept" in summary:
            saved = summary["kept"].delta_rss - summary[variant].delta_rss
            live = summary["kept"].deep_size - summary[variant].deep_size
            n = max(summary[variant].objects, 1.0)
            print(
                f"- {variant} vs kept: {common.mib(saved)} MiB less RSS ({saved / n:.0f} bytes/object); "
                f"{common.mib(live)} MiB fewer bytes of live Python objects"
            )


def cache_mode(args: argparse.Namespace) -> dict[str, Any]:
    measurement = collect_cache(args)
    summary = summarise_cache(measurement)
    render_cache(args, measurement.setup, summary)
    return {
        "mode": "cache",
        "machine": common.machine_info(),
        "count": args.count,
        "namespace": args.namespace,
        "page_size": args.page_size,
        "repeat": args.repeat,
        "kubeconfig": measurement.kubeconfig,
        "started_cluster": measurement.started_cluster,
        "setup": asdict(measurement.setup),
        "median": {v: asdict(s) for v, s in summary.items()},
        "runs": {v: [asdict(r) for r in rs] for v, rs in measurement.runs.items()},
    }


# ---------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = p.add_subparsers(dest="mode", required=True)

    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--json", metavar="FILE", help="also write every run and the medians as JSON")

    pi = sub.add_parser("import", parents=[shared], help="import-time RSS in fresh interpreters")
    pi.add_argument("--repeat", type=int, default=5, help="fresh processes per target (median)")
    pi.add_argument(
        "--compare-venvs",
        default="/tmp/mlops-bench-rss-venvs",
        help="folder of the throwaway venvs (one per comparison package; created if missing)",
    )
    pi.add_argument("--no-compare", action="store_true", help="skip kopf / kubernetes_asyncio")

    pc = sub.add_parser("cache", parents=[shared], help="RSS of an informer cache of N ConfigMaps")
    pc.add_argument("--kubeconfig", help="use this cluster (default: start the local dev cluster)")
    pc.add_argument("--cluster-name", default="mlops-bench", help="name of the dev cluster to start")
    pc.add_argument("--keep-cluster", action="store_true", help="leave the dev cluster running")
    pc.add_argument(
        "--keep-objects",
        action="store_true",
        help="do not delete the namespace at the end (moot when the started dev cluster is taken down)",
    )
    pc.add_argument("--count", type=int, default=10_000, help="number of ConfigMaps")
    pc.add_argument("--namespace", default="bench-rss")
    pc.add_argument("--concurrency", type=int, default=32, help="server-side applies in flight")
    pc.add_argument("--repeat", type=int, default=3, help="fresh processes per variant (median)")
    pc.add_argument("--page-size", type=int, default=500, help="the informer's LIST page size")
    pc.add_argument(
        "--variants",
        nargs="+",
        choices=tuple(VARIANT_LABELS),
        default=list(VARIANT_LABELS),
        help="stripped: the default transform (drop managedFields); kept: transform=None; "
        "stripped-per-page: diagnostic, strip each LIST page as it arrives (bench-only patch)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    modes: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "import": import_mode,
        "cache": cache_mode,
    }
    result = modes[args.mode](args)
    result["command"] = [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]
    if args.json:
        common.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
