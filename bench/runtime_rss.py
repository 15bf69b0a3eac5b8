#!/usr/bin/env python3
"""Memory of the controller runtime: import-time RSS, and RSS of an informer cache of N ConfigMaps.

Every figure comes from a FRESH child process (``sys.executable -I -c CODE``) so that nothing the
benchmark itself imported or allocated is counted. Progress goes to stderr; the results are printed
as Markdown tables on stdout and, with ``--json FILE``, written as JSON with every single run.

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

Examples::

    .venv/bin/python bench/runtime_rss.py import --json /tmp/rss-import.json
    .venv/bin/python bench/runtime_rss.py cache --json /tmp/rss-cache.json
    .venv/bin/python bench/runtime_rss.py cache --kubeconfig ~/.kube/config --count 2000 --keep-objects
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    MIB,
    delete_namespace,
    dev_cluster_down,
    dev_cluster_up,
    log,
    markdown_table,
    mib,
    wait_while_terminating,
    write_json,
)

KIB = 1024

# ---------------------------------------------------------------------------------------------------
# child programs (run with `python -I -c CODE args...`; they import nothing they do not measure)
# ---------------------------------------------------------------------------------------------------

# `{stmt}` is replaced by the import statement under test. Only `resource` and `time` (both tiny C
# modules, loaded for every target, the bare interpreter included) are imported besides it; the
# result is printed with plain string formatting so no `json` import pollutes the figure.
IMPORT_CHILD = """\
import resource, sys, time
_t0 = time.perf_counter()
{stmt}
_secs = time.perf_counter() - _t0
_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
_status = {{}}
with open('/proc/self/status') as _f:
    for _line in _f:
        if _line.startswith(('VmRSS:', 'VmHWM:')):
            _k, _v = _line.split(':', 1)
            _status[_k] = int(_v.split()[0])
print('RESULT', _maxrss, _status['VmRSS'], _status['VmHWM'], len(sys.modules), repr(_secs))
"""

# argv: kubeconfig namespace label_selector variant(stripped|kept|stripped-per-page) page_size
CACHE_CHILD = """\
import asyncio, ctypes, gc, resource, sys, time

def _status():
    out = {}
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(('VmRSS:', 'VmHWM:')):
                k, v = line.split(':', 1)
                out[k] = int(v.split()[0]) * 1024
    return out

from mlops_platform.runtime import client as kclient
from mlops_platform.runtime import informer as inf
from mlops_platform.runtime import resources

kubeconfig, namespace, selector, variant, page_size = sys.argv[1:6]


def _deep_size(root):
    # bytes of every distinct object reachable from root (dict/list/str/int/float/bool/None)
    seen = set()
    total = 0
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
    return total


async def main():
    client = kclient.Client.from_kubeconfig(kubeconfig)
    # warm-up: TLS handshake, connection pool, first response buffers are not the cache's cost
    await client.list(resources.CONFIG_MAP, namespace, label_selector=selector, limit=1)
    gc.collect()
    base = _status()
    if variant == 'stripped-per-page':
        # bench-only diagnostic, NOT the runtime's behaviour: strip every LIST page as it arrives,
        # before the informer accumulates all pages (the runtime transforms after the whole LIST)
        _list = client.list

        async def _list_stripped(*a, **kw):
            page = await _list(*a, **kw)
            for o in page.get('items') or ():
                inf.strip_managed_fields(o)
            return page

        client.list = _list_stripped
    informer = inf.Informer(
        client,
        resources.CONFIG_MAP,
        namespace=namespace,
        label_selector=selector,
        transform=None if variant == 'kept' else inf.strip_managed_fields,
        page_size=int(page_size),
    )
    t0 = time.perf_counter()
    informer.start()
    await informer.wait_for_sync(900)
    sync_seconds = time.perf_counter() - t0
    gc.collect()
    after = _status()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
        trimmed = _status()['VmRSS']
    except OSError:
        trimmed = -1
    objects = informer.store.list()
    with_mf = sum(1 for o in objects if o.get('metadata', {}).get('managedFields'))
    deep = _deep_size(informer.store._items)
    await informer.stop()
    await client.close()
    import json
    print('RESULT ' + json.dumps({
        'baseline_rss': base['VmRSS'],
        'rss': after['VmRSS'],
        'hwm': after['VmHWM'],
        'rss_after_malloc_trim': trimmed,
        'ru_maxrss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        'objects': len(objects),
        'objects_with_managed_fields': with_mf,
        'deep_size': deep,
        'sync_seconds': sync_seconds,
    }))

asyncio.run(main())
"""

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
    ImportTarget("mlops_platform.runtime.client", "import mlops_platform.runtime.client"),
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


def machine_info() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "executable": sys.executable,
    }


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def fresh_python(python: str, code: str, *argv: str) -> list[str]:
    """The command line of a fresh ``python -I -c code argv...`` whose ru_maxrss is its own.

    Linux carries a process's peak RSS across ``exec`` (``signal->maxrss`` keeps the old address
    space's high-water mark), and this benchmark's own process (20+ MiB, far more in cache mode) is
    that old address space when ``subprocess`` forks/vforks and execs the child directly: the child's
    ``ru_maxrss`` would report the parent's size (measured: 211 MiB for a bare interpreter started
    from a parent holding a 200 MiB buffer). A tiny ``/bin/sh`` in between forks again (a fork starts
    with a zeroed ``maxrss`` and the shell's small address space) and then execs Python. ``VmRSS`` and
    ``VmHWM`` are per address space and unaffected either way.
    """
    return ["/bin/sh", "-c", '"$0" "$@"; exit $?', python, "-I", "-c", code, *argv]


# ---------------------------------------------------------------------------------------------------
# import mode
# ---------------------------------------------------------------------------------------------------


@dataclass
class ImportRun:
    ru_maxrss: int  # bytes
    vmrss: int  # bytes
    vmhwm: int  # bytes
    modules: int
    seconds: float


@dataclass
class ImportResult:
    target: ImportTarget
    python: str
    runs: list[ImportRun] = field(default_factory=list)
    error: str | None = None

    def med(self, attr: str) -> float:
        return median([float(getattr(r, attr)) for r in self.runs])


def run_import_child(python: str, stmt: str) -> ImportRun:
    code = IMPORT_CHILD.format(stmt=stmt)
    proc = subprocess.run(
        fresh_python(python, code), capture_output=True, text=True, check=False, cwd="/", timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    _, maxrss, vmrss, vmhwm, modules, secs = line.split()
    return ImportRun(int(maxrss) * KIB, int(vmrss) * KIB, int(vmhwm) * KIB, int(modules), float(secs))


def prepare_compare_venv(path: Path, pkg: str) -> tuple[str | None, str]:
    """Create a throwaway venv at ``path`` and pip-install ``pkg`` into it; return (python, status).

    Never touches the project's venv. An existing venv is reused (pip then only checks).
    """
    python = path / "bin" / "python"
    if not python.exists():
        log(f"creating throwaway venv {path}")
        base = getattr(sys, "_base_executable", sys.executable)
        proc = subprocess.run([base, "-m", "venv", str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return None, f"not measured: venv creation failed: {proc.stderr.strip()[-300:]}"
    log(f"pip install {pkg} into {path} (not into the project)")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", pkg],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["unknown error"]
        status = f"not measured: could not be pip-installed: {tail[0][:300]}"
        log(f"  {pkg}: {status}")
        return None, status
    ver = subprocess.run(
        [str(python), "-m", "pip", "show", pkg], capture_output=True, text=True, check=False
    ).stdout
    version = next((ln.split(":", 1)[1].strip() for ln in ver.splitlines() if ln.startswith("Version:")), "?")
    log(f"  {pkg} {version}")
    return str(python), f"installed {version} into the throwaway venv {path}"


def import_mode(args: argparse.Namespace) -> dict[str, Any]:
    pythons: dict[str, str | None] = {"project": sys.executable}
    compare_status: dict[str, str] = {}
    for pkg in COMPARE_PACKAGES:
        if args.no_compare:
            pythons[pkg], compare_status[pkg] = None, "not measured: --no-compare"
        else:
            pythons[pkg], compare_status[pkg] = prepare_compare_venv(Path(args.compare_venvs) / pkg, pkg)

    results: list[ImportResult] = []
    for target in IMPORT_TARGETS:
        python = pythons[target.venv]
        res = ImportResult(target, python or "")
        results.append(res)
        if python is None:
            res.error = compare_status[target.venv]
            continue
        for i in range(args.repeat):
            try:
                run = run_import_child(python, target.stmt)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                res.error = f"import failed: {e}"
                break
            res.runs.append(run)
            log(f"{target.label}: run {i + 1}/{args.repeat}: VmRSS {mib(run.vmrss)} MiB")

    baselines = {r.target.venv: r for r in results if r.target.stmt == "pass"}
    rows: list[list[str]] = []
    for res in results:
        if res.error or not res.runs:
            rows.append([res.target.label, "—", "—", "—", "—", "—", res.error or "no run"])
            continue
        base = baselines[res.target.venv]
        delta = res.med("vmrss") - base.med("vmrss") if base.runs else float("nan")
        rows.append(
            [
                res.target.label,
                mib(res.med("ru_maxrss")),
                mib(res.med("vmrss")),
                f"{delta / MIB:+.1f}",
                str(int(res.med("modules"))),
                f"{res.med('seconds') * 1000:.0f}",
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
    print(f"## Import-time RSS (median of {args.repeat} fresh processes each)\n")
    print(markdown_table(header, rows))
    print()
    for pkg, st in compare_status.items():
        print(f"- {pkg}: {st}")
    return {
        "mode": "import",
        "machine": machine_info(),
        "repeat": args.repeat,
        "compare_venvs": args.compare_venvs,
        "compare_packages": compare_status,
        "results": [
            {
                "label": r.target.label,
                "stmt": r.target.stmt,
                "python": r.python,
                "error": r.error,
                "median": (
                    {k: r.med(k) for k in ("ru_maxrss", "vmrss", "vmhwm", "modules", "seconds")}
                    if r.runs
                    else None
                ),
                "runs": [vars(run) for run in r.runs],
            }
            for r in results
        ],
    }


# ---------------------------------------------------------------------------------------------------
# cache mode
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


async def ensure_objects(kubeconfig: str, namespace: str, count: int, concurrency: int) -> dict[str, Any]:
    """Create the namespace and the ConfigMaps that are missing (server-side apply); return stats."""
    from mlops_platform.runtime import client as kclient
    from mlops_platform.runtime import resources

    selector = f"{LABEL_KEY}={LABEL_VALUE}"
    async with kclient.Client.from_kubeconfig(kubeconfig) as client:
        # a namespace left Terminating by an earlier cleanup must be gone before we can re-create it
        await wait_while_terminating(client, namespace)
        await client.apply(
            resources.NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            field_manager=FIELD_MANAGER,
        )

        existing: set[str] = set()
        cont: str | None = None
        while True:
            page = await client.list(
                resources.CONFIG_MAP, namespace, label_selector=selector, limit=500, continue_=cont
            )
            existing.update(o["metadata"]["name"] for o in page.get("items") or ())
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                break
        wanted = [i for i in range(count) if f"bench-{i:05d}" not in existing]
        log(f"{len(existing)} ConfigMaps already in {namespace}; creating {len(wanted)} (server-side apply)")

        sem = asyncio.Semaphore(concurrency)
        done = 0
        t0 = time.perf_counter()

        async def apply_one(i: int) -> None:
            nonlocal done
            async with sem:
                await client.apply(
                    resources.CONFIG_MAP, config_map(namespace, i), field_manager=FIELD_MANAGER
                )
            done += 1
            if done % 1000 == 0 or done == len(wanted):
                rate = done / (time.perf_counter() - t0)
                log(f"  applied {done}/{len(wanted)} ({rate:.0f}/s)")

        async with asyncio.TaskGroup() as tg:
            for i in wanted:
                tg.create_task(apply_one(i))
        create_seconds = time.perf_counter() - t0 if wanted else 0.0

        # what one object costs on the wire, with and without managedFields
        sample = (await client.list(resources.CONFIG_MAP, namespace, label_selector=selector, limit=500))[
            "items"
        ]
        enc = json.dumps
        full = [len(enc(o, separators=(",", ":"))) for o in sample]
        stripped = []
        for o in sample:
            o["metadata"].pop("managedFields", None)
            stripped.append(len(enc(o, separators=(",", ":"))))
        data_bytes = [len(enc(config_map(namespace, i)["data"], separators=(",", ":"))) for i in range(500)]
        return {
            "existing_before": len(existing),
            "created": len(wanted),
            "create_seconds": create_seconds,
            "create_rate_per_s": len(wanted) / create_seconds if create_seconds else None,
            "sample_json_bytes_with_managed_fields": median(full),
            "sample_json_bytes_without_managed_fields": median(stripped),
            "sample_data_json_bytes": median(data_bytes),
        }


async def delete_bench_namespace(kubeconfig: str, namespace: str, wait: float = 600.0) -> None:
    """Delete ``namespace`` with a client of its own and wait (up to ``wait`` s) until it is gone."""
    from mlops_platform.runtime import client as kclient

    async with kclient.Client.from_kubeconfig(kubeconfig) as client:
        await delete_namespace(client, namespace, wait, 2, digits=0)


def run_cache_child(kubeconfig: str, namespace: str, variant: str, page_size: int) -> dict[str, Any]:
    selector = f"{LABEL_KEY}={LABEL_VALUE}"
    proc = subprocess.run(
        fresh_python(sys.executable, CACHE_CHILD, kubeconfig, namespace, selector, variant, str(page_size)),
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        timeout=1200,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cache child ({variant}) failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def _median_of(runs: list[dict[str, Any]]) -> Callable[[str], float]:
    def med(key: str) -> float:
        return median([float(r[key]) for r in runs])

    return med


def cache_mode(args: argparse.Namespace) -> dict[str, Any]:
    started_cluster = False
    kubeconfig: str = args.kubeconfig or ""
    if not kubeconfig:
        kubeconfig, _ = dev_cluster_up(args.cluster_name)
        started_cluster = True
    teardown = started_cluster and not args.keep_cluster
    try:
        setup = asyncio.run(ensure_objects(kubeconfig, args.namespace, args.count, args.concurrency))
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
        # interleave the variants so a drift of the machine (other load) spreads over both
        for i in range(args.repeat):
            for variant in args.variants:
                r = run_cache_child(kubeconfig, args.namespace, variant, args.page_size)
                runs[variant].append(r)
                log(
                    f"{variant}: run {i + 1}/{args.repeat}: {r['objects']} objects, "
                    f"VmRSS {mib(r['rss'])} MiB (baseline {mib(r['baseline_rss'])}), "
                    f"peak {mib(r['hwm'])} MiB, "
                    f"sync {r['sync_seconds']:.2f} s"
                )
                if r["objects"] < args.count:
                    log(f"WARNING: only {r['objects']} of {args.count} objects cached")
    finally:
        if teardown:
            dev_cluster_down(args.cluster_name)
        elif not args.keep_objects:
            asyncio.run(delete_bench_namespace(kubeconfig, args.namespace))

    summary: dict[str, dict[str, float]] = {}
    rows: list[list[str]] = []
    for variant, rs in runs.items():
        med = _median_of(rs)
        deltas = [r["rss"] - r["baseline_rss"] for r in rs]
        per_obj = [d / r["objects"] for d, r in zip(deltas, rs, strict=True)]
        trimmed = [r["rss_after_malloc_trim"] - r["baseline_rss"] for r in rs]
        s = {
            "objects": med("objects"),
            "objects_with_managed_fields": med("objects_with_managed_fields"),
            "baseline_rss": med("baseline_rss"),
            "rss": med("rss"),
            "delta_rss": median(deltas),
            "bytes_per_object": median(per_obj),
            "delta_rss_after_malloc_trim": median(trimmed),
            "hwm": med("hwm"),
            "deep_size": med("deep_size"),
            "sync_seconds": med("sync_seconds"),
            "delta_rss_min": float(min(deltas)),
            "delta_rss_max": float(max(deltas)),
        }
        summary[variant] = s
        label = VARIANT_LABELS[variant]
        rows.append(
            [
                label,
                f"{int(s['objects'])} ({int(s['objects_with_managed_fields'])} with mF)",
                mib(s["baseline_rss"]),
                mib(s["rss"]),
                f"{mib(s['delta_rss'])} ({mib(s['delta_rss_min'])}..{mib(s['delta_rss_max'])})",
                f"{s['bytes_per_object']:.0f}",
                mib(s["delta_rss_after_malloc_trim"]),
                mib(s["hwm"]),
                f"{s['deep_size'] / s['objects']:.0f}" if s["objects"] else "—",
                f"{s['sync_seconds']:.2f}",
            ]
        )
    header = [
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
    ]
    print(f"## Informer cache of {args.count} ConfigMaps (median of {args.repeat} fresh processes each)\n")
    print(markdown_table(header, rows))
    print()
    print(
        f"- objects: {setup['existing_before']} existed, {setup['created']} created by server-side apply"
        + (
            f" in {setup['create_seconds']:.1f} s ({setup['create_rate_per_s']:.0f}/s, "
            f"{args.concurrency} in flight)"
            if setup["created"]
            else ""
        )
    )
    print(
        f"- one object as compact JSON: {setup['sample_json_bytes_with_managed_fields']:.0f} bytes with "
        f"managedFields, {setup['sample_json_bytes_without_managed_fields']:.0f} without "
        f"(its data: {setup['sample_data_json_bytes']:.0f} bytes)"
    )
    for variant in ("stripped", "stripped-per-page"):
        if variant in summary and "kept" in summary:
            saved = summary["kept"]["delta_rss"] - summary[variant]["delta_rss"]
            live = summary["kept"]["deep_size"] - summary[variant]["deep_size"]
            n = max(summary[variant]["objects"], 1.0)
            print(
                f"- {variant} vs kept: {mib(saved)} MiB less RSS ({saved / n:.0f} bytes/object); "
                f"{mib(live)} MiB fewer bytes of live Python objects"
            )
    return {
        "mode": "cache",
        "machine": machine_info(),
        "count": args.count,
        "namespace": args.namespace,
        "page_size": args.page_size,
        "repeat": args.repeat,
        "kubeconfig": kubeconfig,
        "started_cluster": started_cluster,
        "setup": setup,
        "median": summary,
        "runs": runs,
    }


# ---------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = p.add_subparsers(dest="mode", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", metavar="FILE", help="also write every run and the medians as JSON")

    pi = sub.add_parser("import", parents=[common], help="import-time RSS in fresh interpreters")
    pi.add_argument("--repeat", type=int, default=5, help="fresh processes per target (median)")
    pi.add_argument(
        "--compare-venvs",
        default="/tmp/mlops-bench-rss-venvs",
        help="folder of the throwaway venvs (one per comparison package; created if missing)",
    )
    pi.add_argument("--no-compare", action="store_true", help="skip kopf / kubernetes_asyncio")

    pc = sub.add_parser("cache", parents=[common], help="RSS of an informer cache of N ConfigMaps")
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
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
