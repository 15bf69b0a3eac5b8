"""Lifecycle of the local control plane: kwokctl's binary runtime driven with our pinned binaries.

``up`` is idempotent (a running cluster is left alone, a stopped one restarted) and everything binds
to 127.0.0.1. The cluster runs etcd, kube-apiserver (RBAC + admission on, service-account token
signing on), kube-controller-manager, kube-scheduler, the kwok controller, which plays the
kubelet for fake nodes: 3 CPU nodes and 2 nodes advertising ``nvidia.com/gpu``, and metrics-server
(the resource metrics API: ``kubectl top``, the HPA), which scrapes the kubelet resource metrics
that kwok emulates from simulated usage (:mod:`~mlops_platform.devcluster.usage`). kwok's Stage,
Metric and (Cluster)ResourceUsage CRDs are enabled and the upstream default stages and metrics
are installed as objects, so tests can add their own stages (e.g. a CrashLoopBackOff) and set pods'
usage at run time. The configuration it is created from: :mod:`~.clusterconfig`; what it is filled
with once started: :mod:`~.populate`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from mlops_platform.devcluster import binaries, clusterconfig, kwokctl, logs, nodes, pids, populate
from mlops_platform.devcluster.realnode import fabric, lifecycle
from mlops_platform.runtime import wait as rwait
from mlops_platform.runtime.transport import client as rclient

DEFAULT_NAME = "mlops-dev"


def _log(msg: str, started: float | None = None) -> None:
    prefix = f"[dev {time.monotonic() - started:5.1f}s] " if started is not None else "[dev] "
    print(prefix + msg, file=sys.stderr, flush=True)


def workdir() -> Path:
    return binaries.cache_root() / "kwok"


def cluster_dir(name: str) -> Path:
    return workdir() / "clusters" / name


def kubeconfig_path(name: str) -> Path:
    return cluster_dir(name) / "kubeconfig.yaml"


def audit_logs(name: str) -> list[Path]:
    """kube-apiserver's audit log files of the cluster (:data:`.clusterconfig.AUDIT_POLICY`), the
    rotated one first; JSON lines, one ``audit.k8s.io/v1`` Event each. Empty for a cluster created
    without it."""
    logs = cluster_dir(name) / "logs"
    return sorted(logs.glob("audit-*.log")) + [p for p in [logs / "audit.log"] if p.exists()]


def exists(name: str) -> bool:
    return (cluster_dir(name) / "kwok.yaml").is_file()


def _creating_marker(name: str) -> Path:
    """Present from before ``kwokctl create cluster`` until it succeeded: a cluster that has it was
    interrupted while being created (a Ctrl-C) and is created again, not reused half-made."""
    return workdir() / f"{name}.creating"


async def _api_serves(name: str, timeout: float = 3.0) -> bool:
    """Whether the cluster's kube-apiserver passes ``/readyz``."""
    if not kubeconfig_path(name).is_file():
        return False
    async with rclient.Client.from_kubeconfig(kubeconfig_path(name)) as c:
        try:
            await c.request("GET", "/readyz", resource="readyz", timeout=timeout)
            return True
        except Exception:
            return False


def _api_ready(name: str, timeout: float = 3.0) -> bool:
    return asyncio.run(_api_serves(name, timeout))


def up(
    name: str = DEFAULT_NAME,
    *,
    install_crds: bool = True,
    wait: float = 180.0,
    cpu_nodes: int = nodes.CPU_NODES,
    unthrottled: bool = False,
    metrics_server: bool = True,
    real_nodes: int = 1,
) -> Path:
    """Start (or reuse) the cluster ``name``; return its kubeconfig path.

    ``cpu_nodes``: fake CPU nodes (each fits :data:`nodes.PODS_PER_NODE` pods), added to a running
    cluster too; ``real_nodes``: real worker nodes (:mod:`~mlops_platform.devcluster.realnode`),
    added to a running cluster too; ``unthrottled`` (see :func:`.clusterconfig.kwokctl_config`) and
    ``metrics_server`` (metrics-server, kwok's Metric and resource-usage CRDs, the default usage)
    apply when the cluster is created."""
    started = time.monotonic()

    def progress(msg: str) -> None:
        _log(msg, started)

    _log("resolving control-plane binaries", started)
    bins = binaries.find()
    if _creating_marker(name).exists():
        _log(f"cluster {name!r} was interrupted while being created: re-creating it", started)
        down(name)
    if exists(name) and _api_ready(name):
        _log(f"cluster {name!r} is already running", started)
        asyncio.run(_ports_bound(name, wait, bins, started))
    else:
        with _ports_lock(name, started):
            if exists(name):
                _log(f"starting the stopped cluster {name!r}", started)
                result = kwokctl.run(
                    workdir(),
                    bins,
                    "start",
                    "cluster",
                    "--name",
                    name,
                    "--wait",
                    f"{int(wait)}s",
                    check=False,
                )
                if result.returncode != 0:
                    _log(f"restart failed ({result.stderr.strip()[-300:]}); re-creating {name!r}", started)
                    down(name)
                    _create(bins, name, wait, started, unthrottled, metrics_server)
            else:
                _create(bins, name, wait, started, unthrottled, metrics_server)
            # the fabric and the API bridge, before another cluster starts
            lifecycle.bridge(workdir(), name, cluster_dir(name), kubeconfig_path(name), progress)
            # kwokctl returns before every component listens (metrics-server binds seconds later):
            # a cluster started meanwhile would count down to the same free port
            asyncio.run(_ports_bound(name, wait, bins, started))
    asyncio.run(
        populate.populate(
            kubeconfig_path(name),
            name,
            install_crds=install_crds,
            wait=wait,
            cpu_nodes=cpu_nodes,
            progress=progress,
        )
    )
    if real_nodes:
        lifecycle.start(workdir(), name, cluster_dir(name), kubeconfig_path(name), real_nodes, wait, progress)
    _log(f"ready: export KUBECONFIG={kubeconfig_path(name)}", started)
    return kubeconfig_path(name)


@contextlib.contextmanager
def _ports_lock(name: str, started: float) -> Iterator[None]:
    """One cluster start on this machine at a time, until its components have bound their ports.
    kwokctl picks each port by counting down from 32767 to the first one nothing listens on, so two
    clusters created at once (``make test`` starts two) pick the same ports, and one never serves."""
    workdir().mkdir(parents=True, exist_ok=True)
    with (workdir() / ".start.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another cluster's start before starting {name!r} (their ports)", started)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def component_ports(name: str) -> dict[str, list[int]]:
    """The loopback ports kwokctl gave each component of the cluster (from its ``kwok.yaml``)."""
    ports: dict[str, list[int]] = {}
    for doc in yaml.safe_load_all((cluster_dir(name) / "kwok.yaml").read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
            for component in doc.get("components") or ():
                found = [int(p["port"]) for p in component.get("ports") or () if p.get("port")]
                if found:
                    ports[component["name"]] = found
    return ports


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True
    except OSError:
        return False


def pid_file(name: str, component: str) -> Path:
    """Where kwokctl keeps the PID of the component's process."""
    return cluster_dir(name) / "pids" / f"{component}.pid"


def component_pid(name: str, component: str) -> int:
    """The PID kwokctl (or :mod:`~mlops_platform.devcluster.chaos`) last started the component as."""
    return int(pid_file(name, component).read_text().strip())


def component_running(name: str, component: str) -> bool:
    """Whether the component's process is alive: not gone, not a zombie (kwokctl's own check,
    signal 0, counts a zombie as running, and would not start it again)."""
    return pids.running(pid_file(name, component)) is not None


def _log_tail(name: str, component: str, lines: int = 5) -> str:
    return logs.tail(cluster_dir(name) / "logs" / f"{component}.log", lines)


#: how many times a start gives a component that exited another go before it fails
COMPONENT_RESTARTS = 3


async def _ports_bound(name: str, timeout: float, bins: binaries.Binaries, started: float) -> None:
    """Until every component of the cluster listens on its ports.

    kwokctl starts every component at once and never restarts one; metrics-server exits (a panic:
    ``unable to load configmap based request-header-client-ca-file ... connection refused``) when
    kube-apiserver does not answer yet as it starts, which happens on a loaded machine (``make
    test`` starts its clusters beside the unit tests). A component that exited before it listened
    is started again (``kwokctl start cluster``: only the components not running) once kube-apiserver
    serves, up to :data:`COMPONENT_RESTARTS` times; then the start fails with its log's last lines."""
    ports = component_ports(name)
    restarts: collections.Counter[str] = collections.Counter()

    async def bound() -> bool:
        missing = {c: [p for p in ps if not _listening(p)] for c, ps in ports.items()}
        missing = {c: ps for c, ps in missing.items() if ps}
        if not missing:
            return True
        exited = [c for c in missing if not component_running(name, c)]
        if exited and await _api_serves(name):
            for c in exited:
                if restarts[c] >= COMPONENT_RESTARTS:
                    raise RuntimeError(
                        f"{c} of cluster {name!r} exited again after {restarts[c]} restarts;"
                        f" the last lines of its log:\n{_log_tail(name, c)}"
                    )
                restarts[c] += 1
                last = _log_tail(name, c, lines=1)[-300:]
                _log(f"{c} is not running (its log's last line: {last}); starting it again", started)
                pid_file(name, c).unlink(missing_ok=True)  # kwokctl starts what has no live PID
            result = await asyncio.to_thread(
                kwokctl.run, workdir(), bins, "start", "cluster", "--name", name, check=False
            )
            if result.returncode != 0:
                raise RuntimeError(f"kwokctl start cluster {name} failed: {result.stderr.strip()[-500:]}")
        listed = ", ".join(f"{c}:{p}" for c, ps in missing.items() for p in ps)
        raise ConnectionError(f"not listening: {listed}")

    await rwait.until(
        bound,
        timeout=timeout,
        interval=0.2,
        what=f"every component of {name!r} listening",
        retry_on=(ConnectionError,),
    )


def import_images(name: str, names: list[str]) -> list[str]:
    """Build (or take from the cache) the named local images and import them into every real node
    of the cluster (:func:`lifecycle.import_images`); return their references."""
    if not exists(name):
        raise RuntimeError(f"cluster {name!r} does not exist: `mlops-platform dev up --name {name}`")
    return lifecycle.import_images(workdir(), name, cluster_dir(name), names)


def _create(
    bins: binaries.Binaries, name: str, wait: float, started: float, unthrottled: bool, metrics_server: bool
) -> None:
    """Create the cluster; once more, from nothing, when kwokctl failed: on a loaded machine
    kube-apiserver can take longer to serve than kwokctl waits before it loads kwok's CRDs
    (``failed to init crds ... resource not handled`` after 40 s of refused connections)."""
    try:
        _create_once(bins, name, wait, started, unthrottled, metrics_server)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        _log(f"{first}: deleting {name!r} and creating it once more (its last lines: see below)", started)
        for line in str(e).splitlines()[-3:]:
            _log(f"  {kwokctl.message(line)}", started)
        down(name)
        _create_once(bins, name, wait, started, unthrottled, metrics_server)


def _create_once(
    bins: binaries.Binaries, name: str, wait: float, started: float, unthrottled: bool, metrics_server: bool
) -> None:
    workdir().mkdir(parents=True, exist_ok=True)
    block = fabric.claim_block(workdir(), name)
    config_file = workdir() / f"{name}.kwokctl.yaml"
    policy_file = workdir() / f"{name}.audit-policy.yaml"
    policy_file.write_text(yaml.safe_dump(clusterconfig.AUDIT_POLICY, sort_keys=False))
    config_file.write_text(
        clusterconfig.kwokctl_config(
            bins,
            unthrottled=unthrottled,
            metrics_server=metrics_server,
            audit_policy=str(policy_file),
            block=block,
            pki_dir=cluster_dir(name) / "pki",
        )
    )
    _creating_marker(name).touch()
    parts = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok"
    _log(f"creating cluster {name!r} ({parts}{', metrics-server' if metrics_server else ''})", started)
    kwokctl.create(workdir(), bins, name, config_file, wait, lambda msg: _log(msg, started))
    _creating_marker(name).unlink()


def _pids(name: str) -> Iterator[int]:
    """PIDs of processes whose command line mentions this cluster's directory."""
    marker = str(cluster_dir(name))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmdline:
                yield int(proc.name)


def down(name: str = DEFAULT_NAME) -> None:
    """Delete the cluster ``name`` and make sure none of its processes is left: its real nodes and
    their namespaces, cgroups and state first, then the control plane."""
    lifecycle.stop(workdir(), name, cluster_dir(name))
    if exists(name):
        bins = binaries.find(build=False, names=("kwokctl", "kubectl"))
        result = kwokctl.run(workdir(), bins, "delete", "cluster", "--name", name, check=False)
        if result.returncode != 0:
            _log(f"kwokctl delete cluster failed: {result.stderr.strip()[-300:]}")
    deadline = time.monotonic() + 20
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(_pids(name)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        while list(_pids(name)) and time.monotonic() < deadline:
            time.sleep(0.1)
        deadline = time.monotonic() + 10
    left = list(_pids(name))
    if left:
        raise RuntimeError(f"processes of cluster {name!r} still running: {left}")
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    (workdir() / f"{name}.kwokctl.yaml").unlink(missing_ok=True)
    (workdir() / f"{name}.audit-policy.yaml").unlink(missing_ok=True)
    _creating_marker(name).unlink(missing_ok=True)
    fabric.release_block(workdir(), name)
    _log(f"cluster {name!r} is down; no process left")


def status(name: str = DEFAULT_NAME) -> dict[str, Any]:
    """What is known about the cluster: existence, API readiness, processes, kubeconfig."""
    return {
        "name": name,
        "exists": exists(name),
        "apiserver_ready": exists(name) and _api_ready(name),
        "processes": len(list(_pids(name))),
        "kubeconfig": str(kubeconfig_path(name)),
    }


def kubectl(name: str, args: list[str]) -> int:
    bins = binaries.find(build=False, names=("kubectl",))
    return subprocess.call([str(bins["kubectl"]), "--kubeconfig", str(kubeconfig_path(name)), *args])
