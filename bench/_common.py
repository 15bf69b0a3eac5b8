"""Helpers shared by the benchmarks in this package (``runtime_rss``, ``operator_footprint``, ``scale``,
``conversion``).

``bench`` is a package: run a benchmark as ``.venv/bin/python -m bench.<script>`` from the repository
root (``.venv/bin/python bench/<script>.py`` works too: each script then puts the repository root on
``sys.path`` itself). The child programs the benchmarks start (``bench.import_child``,
``bench.cache_child``) are modules of it as well.

Only what the benchmarks do exactly alike lives here, among it the one reader of ``/proc``
(:func:`read_proc`, :func:`read_machine`, :func:`pids_naming`). The project (``mlops_platform``) is
imported inside the functions that need it, never at module level, as the scripts themselves do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlops_platform.api.internal import InferenceService
    from mlops_platform.controllers.inferenceservice.children.base import BuildContext, Slot
    from mlops_platform.runtime.transport.client import JSON, Client

MIB = 1024 * 1024


def desired_children(isvc: InferenceService, ctx: BuildContext) -> list[tuple[Slot, JSON | None]]:
    """Each child slot of ``isvc`` with what the operator's builder makes for it under ``ctx`` (None
    where the slot's component is absent: no child), as a reconcile computes them."""
    from mlops_platform.controllers.inferenceservice import children
    from mlops_platform.controllers.inferenceservice.children import base

    return [
        (slot, slot.child.build(slot.target, ctx) if slot.target.component.present else None)
        for slot in base.slots(isvc, children.CHILDREN)
    ]


# ---------------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    """Print a progress line, prefixed with the wall-clock time, to stderr (stdout is for results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mib(n: float) -> str:
    """``n`` bytes as MiB with one decimal, without the unit (``"12.3"``)."""
    return f"{n / MIB:.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``header`` and ``rows`` (cells already formatted), without a final newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_json(path: str | Path, data: object) -> None:
    """Write ``data`` to ``path`` as indented JSON with a final newline, and log that it was written."""
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
    log(f"wrote {path}")


def percentile(xs: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ``xs`` (``nan`` when empty)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


class Percentiles:
    """``p50`` and ``p99`` of ``samples_ms``, for the dataclasses of latencies that have that field."""

    samples_ms: list[float]

    @property
    def p50(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)


def results_dir(a: argparse.Namespace, repo: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Where a benchmark writes its results, and what its JSON says of the run: the directory ``a.out``
    (created), the machine (:func:`machine_info` without the interpreter's path: a path of this
    machine, not a property of the run) and the arguments (``out`` relative to ``repo``)."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    machine.pop("executable", None)
    return out, machine, vars(a) | {"out": os.path.relpath(a.out, repo)}


# ---------------------------------------------------------------------------------------------------
# /proc (the one place that reads it) and the machine
# ---------------------------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcReading:
    """One reading of a process from ``/proc/<pid>/stat`` and ``/proc/<pid>/status``."""

    rss: int  # VmRSS bytes (0 when the process has no address space: a zombie, a kernel thread)
    hwm: int  # VmHWM bytes (the peak of VmRSS), 0 likewise
    cpu_seconds: float  # utime + stime
    threads: int


def read_proc(pid: int | str = "self") -> ProcReading:
    """Memory, CPU time and threads of ``pid`` (``"self"``: the calling process).

    Raises ``OSError`` when the process is gone or not ours to read.
    """
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    rest = stat[stat.rindex(")") + 2 :].split()
    status: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                status[key] = int(value.split()[0]) * 1024
    return ProcReading(
        rss=status.get("VmRSS", 0),
        hwm=status.get("VmHWM", 0),
        cpu_seconds=(int(rest[11]) + int(rest[12])) / CLK_TCK,
        threads=int(rest[17]),
    )


def pids_naming(text: str) -> list[int]:
    """The processes whose command line contains ``text`` (those we may read)."""
    pids: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def command_name(pid: int) -> str:
    """The base name of ``pid``'s executable as started (``argv[0]``); raises ``OSError`` when gone."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0", 1)[0].decode(errors="replace").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class MachineReading:
    """One reading of the whole machine from ``/proc/stat`` and ``/proc/loadavg``."""

    busy_seconds: float  # all CPUs, all processes (non-idle, non-iowait jiffies)
    loadavg_1m: float


def read_machine() -> MachineReading:
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    busy = sum(cpu[:8]) - cpu[3] - cpu[4]
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return MachineReading(busy_seconds=busy / CLK_TCK, loadavg_1m=load)


def machine_info() -> dict[str, Any]:
    """Where a measurement ran, for its JSON."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "executable": sys.executable,
        "clock_ticks_per_second": CLK_TCK,
    }


# ---------------------------------------------------------------------------------------------------
# the local dev cluster (`mlops-platform dev up/down`)
# ---------------------------------------------------------------------------------------------------


def cli_binary() -> list[str]:
    """The command that runs the ``mlops-platform`` CLI: the one next to the interpreter, else on PATH.

    Exits (``SystemExit``) when there is neither.
    """
    exe = Path(sys.executable).parent / "mlops-platform"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mlops-platform")
    if found:
        return [found]
    raise SystemExit("mlops-platform CLI not found next to the interpreter nor on PATH; use --kubeconfig")


def dev_cluster_up(name: str, *options: str) -> tuple[str, float]:
    """Start the local dev cluster ``name`` (``options``: more ``dev up`` flags); return (its kubeconfig
    path, the seconds ``dev up`` took).

    The kubeconfig path is the last non-empty line ``dev up`` prints on stdout; its stderr (progress)
    passes through. Exits (``SystemExit``) when ``dev up`` fails.
    """
    cmd = [*cli_binary(), "dev", "up", "--name", name, *options]
    log(f"starting the local dev cluster: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed with exit code {proc.returncode}")
    path = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()][-1]
    seconds = time.perf_counter() - t0
    log(f"cluster {name} up in {seconds:.1f} s, kubeconfig {path}")
    return path, seconds


def dev_cluster_down(name: str) -> None:
    """Take the local dev cluster ``name`` down (``dev down``); a failure is not an error here."""
    cmd = [*cli_binary(), "dev", "down", "--name", name]
    log(f"taking the dev cluster down: {' '.join(cmd)}")
    subprocess.run(cmd, check=False)


@contextlib.contextmanager
def cluster_for(
    name: str | None, default: str, *, keep: bool = False, options: Sequence[str] = ()
) -> Iterator[tuple[str, str]]:
    """(name, kubeconfig path) of the cluster a benchmark runs on: ``name``, an existing local
    cluster, kept; else ``default``, started fresh (``dev up`` with ``options``; an earlier one taken
    down first) and taken down after unless ``keep``."""
    from mlops_platform.devcluster import cluster

    if name is not None:
        yield name, str(cluster.kubeconfig_path(name))
        return
    dev_cluster_down(default)
    try:
        yield default, dev_cluster_up(default, *options)[0]
    finally:
        if not keep:
            dev_cluster_down(default)


def stamped(
    a: argparse.Namespace,
    result: dict[str, Any],
    provenance: tuple[dict[str, Any], dict[str, Any]],
    module: str,
    argv: list[str] | None,
    figures: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """``result`` with what its page says of the run: the machine and arguments
    (:func:`results_dir`'s ``provenance``) and the command line; written to ``a.json`` with its
    ``figures`` when that was asked."""
    machine, arguments = provenance
    out = result | {"machine": machine, "arguments": arguments, "command": command_line(module, argv)}
    if a.json:
        write_json(a.json, out | {"figures": figures(out)})
    return out


def write_page(out: Path, name: str, text: str) -> int:
    """Write a benchmark's results page ``out/name`` (``out`` created), say where, print it; the
    benchmark's exit code (0)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
    log(f"wrote {out / name}")
    print(text)
    return 0


def command_line(module: str, argv: list[str] | None) -> str:
    """``python -m MODULE ARGS`` for a results page, without ``--json FILE`` (where the run was also
    written, not how it was measured: a path of the machine)."""
    args = list(argv if argv is not None else sys.argv[1:])
    if "--json" in args:
        i = args.index("--json")
        del args[i : i + 2]
    args = [x for x in args if not x.startswith("--json=")]
    return " ".join(["python -m", module, *args])


# ---------------------------------------------------------------------------------------------------
# the InferenceService API the benchmarks speak: v1, the storage version, only
# ---------------------------------------------------------------------------------------------------

#: In every operator command line the benchmarks build: no webhook server (the CRD the benchmarks
#: install serves v1 alone, see :func:`install_crd`: nothing to convert; and no port for the sharded
#: replicas to share).
NO_WEBHOOK_SERVER = ("--webhook-bind-address", "off")


async def install_crd(client: Client) -> None:
    """Server-side apply the InferenceService CRD serving v1, the storage version, alone.

    The benchmarks measure v1 traffic only: they create and read InferenceServices at v1, and a
    request at another version fails loudly (404) rather than being converted and measured as v1
    traffic. Serving one version matters beyond that: the API server keeps a watch cache for each
    served version of a CRD, filled by converting every object it stores. The CRD with all three
    versions and a conversion webhook nothing serves had the API server's v1alpha1 and v1beta1
    caches fail their first list and list all InferenceServices from etcd again, about once a second
    each, for the whole run (its log at N=5000: 1,519 ``unexpected ListAndWatch error ... conversion
    webhook ... failed`` in 21 minutes): load on etcd and the API server that no user has and that
    every implementation's figures carried."""
    from mlops_platform.api import crd

    await crd.install(client, webhook_url=None, versions=tuple(v for v in crd.VERSIONS if v.storage))


async def stored_versions(client: Client) -> list[str]:
    """The InferenceService CRD's ``status.storedVersions`` (on a fresh cluster: ``["v1"]``)."""
    from mlops_platform import api
    from mlops_platform.runtime.transport import resources

    live = await client.get(resources.CRD, api.CRD_NAME)
    return [str(v) for v in (live.get("status") or {}).get("storedVersions") or []]


# ---------------------------------------------------------------------------------------------------
# namespaces
# ---------------------------------------------------------------------------------------------------


async def wait_while_terminating(client: Client, namespace: str) -> JSON | None:
    """Wait (up to 300 s, polling every 2 s) while ``namespace`` is ``Terminating``.

    A namespace left ``Terminating`` by an earlier cleanup must be gone before it can be created again.
    Returns the namespace object if it exists and is not ``Terminating``, ``None`` if it does not exist;
    exits (``SystemExit``) if it is still ``Terminating`` after 300 s.
    """
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    deadline = time.monotonic() + 300
    while True:
        try:
            ns = await client.get(resources.NAMESPACE, namespace)
        except rclient.ApiError as e:
            if not e.not_found:
                raise
            return None
        if (ns.get("status") or {}).get("phase") != "Terminating":
            return ns
        if time.monotonic() > deadline:
            raise SystemExit(f"namespace {namespace} is still Terminating after 300 s")
        log(f"namespace {namespace} is Terminating; waiting")
        await asyncio.sleep(2)


async def delete_namespace(
    client: Client, namespace: str, wait: float, poll: float, *, digits: int = 1
) -> float | None:
    """Delete ``namespace`` (background propagation) and poll every ``poll`` s until it is gone.

    Returns the seconds until it was gone (``0.0`` if it did not exist), or ``None`` if it was still
    there after ``wait`` seconds. ``digits``: decimals of those seconds in the "gone after" log line.
    """
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    log(f"deleting namespace {namespace}")
    try:
        await client.delete(resources.NAMESPACE, namespace, propagation_policy="Background")
    except rclient.ApiError as e:
        if e.not_found:
            return 0.0
        raise
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait:
        try:
            await client.get(resources.NAMESPACE, namespace)
        except rclient.ApiError as e:
            if e.not_found:
                log(f"namespace {namespace} gone after {time.monotonic() - t0:.{digits}f} s")
                return time.monotonic() - t0
            raise
        await asyncio.sleep(poll)
    log(f"namespace {namespace} still terminating after {wait:.0f} s; not waiting longer")
    return None
