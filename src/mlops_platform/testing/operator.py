"""The operator for tests: in the test's own process (:func:`running`: the manager and the
InferenceService controller with the test's client; :func:`options` for a manager of a test's own),
or as processes of its own (:func:`start`: ``mlops-platform run``, to kill, restart and read the
logs of)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2 as httpx

from mlops_platform.controllers.inferenceservice import controller
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.devcluster import logs
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import wait

_SRC = Path(__file__).resolve().parents[2]  # the directory holding this package (``src``)


#: Lease timing that notices a lost leader in seconds (4 s / 3 s / 0.5 s), for :func:`options`
FAST_LEASE: dict[str, Any] = {"lease_duration": 4, "renew_deadline": 3, "retry_period": 0.5}


def options(
    namespace: str | None = None, *, lease: str = "", lease_namespace: str | None = None, **more: Any
) -> rmanager.Options:
    """Manager options for the test's own process: watching ``namespace`` (None: all), no probe or
    metrics server; with a ``lease`` name, leader election on that Lease in ``lease_namespace``
    (default ``namespace``, else ``default``); ``more``: other options (``**FAST_LEASE``,
    ``cache_sync_timeout``...)."""
    election: dict[str, Any] = {}
    if lease:
        election = {
            "leader_election": True,
            "leader_election_id": lease,
            "leader_election_namespace": lease_namespace or namespace or "default",
        }
    return rmanager.Options(
        namespace=namespace, health_probe_address=None, metrics_address=None, **election, **more
    )


@contextlib.asynccontextmanager
async def running(
    client: rclient.Client,
    *,
    namespace: str | None = None,
    settings: base.BuildContext | None = None,
    workers: int = 4,
    what: str = "operator ready",
) -> AsyncIterator[rmanager.Manager]:
    """A manager on ``client`` (watching ``namespace``, default all) with the controller set up,
    once it reports ready and the informers of every served optional kind have listed (on a fresh
    cluster the API server serves a just-established CRD a moment later: a test's first object would
    otherwise get its ServiceMonitor inside the test's window); stopped (in-flight reconciles
    finished) when the block exits."""
    mgr = rmanager.Manager(client, options(namespace))
    controller.setup(mgr, workers=workers, settings=settings)
    task = asyncio.create_task(mgr.run())
    try:
        await wait.until(mgr.is_ready, timeout=60, what=what)
        await wait.until(mgr.optional_kinds.all_synced, timeout=60, what=f"{what}: optional kinds listed")
        yield mgr
    finally:
        mgr.stop()
        await asyncio.wait_for(task, 60)


@dataclasses.dataclass
class Process:
    """One ``mlops-platform run`` process: its JSON log (stderr) in ``log``, probes and metrics on
    loopback ports the kernel gave it (``127.0.0.1:0``), as its log's ``serving`` lines say."""

    proc: subprocess.Popen[bytes]
    identity: str  # its leader-election identity (hostname_pid)
    log: Path
    killed_at: float | None = None  # wall clock (time.time), to compare with log timestamps
    log_start: int = 0  # where its lines begin in ``log`` (appended to: an earlier process's come first)
    _ports: dict[str, int] = dataclasses.field(default_factory=dict)

    def _port(self, server: str) -> int | None:
        """The port its ``server`` listens on, once it has logged it."""
        if server not in self._ports:
            for line in self.lines():
                if line.get("msg") == "serving" and "server" in line:
                    self._ports[line["server"]] = int(line["address"].rsplit(":", 1)[1])
        return self._ports.get(server)

    @property
    def health_port(self) -> int | None:
        return self._port("health probe")

    @property
    def metrics_port(self) -> int | None:
        return self._port("metrics")

    def lines(self) -> list[dict[str, Any]]:
        """Its JSON log lines so far (not those of a process before it in the same file)."""
        out = []
        for line in self.log.read_bytes()[self.log_start :].decode(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of its log, for a failure message."""
        return logs.tail(self.log, lines)

    async def ready(self) -> bool:
        """Whether ``/readyz`` answers 200."""
        if self.health_port is None:
            return False
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                return (await http.get(f"http://127.0.0.1:{self.health_port}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    async def metrics(self) -> str:
        """Its ``/metrics`` text."""
        if self.metrics_port is None:
            raise ConnectionError(f"operator {self.identity} has not logged its metrics port yet")
        async with httpx.AsyncClient(timeout=5) as http:
            return (await http.get(f"http://127.0.0.1:{self.metrics_port}/metrics")).text

    async def metric(self, sample: str) -> float | None:
        """The value of ``sample`` (name and labels as exposed) on its /metrics, or None."""
        for line in (await self.metrics()).splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    async def reconciles(self) -> int:
        """Reconciles it has finished so far (every controller and result), from its /metrics."""
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in (await self.metrics()).splitlines()
            if line.startswith("controller_runtime_reconcile_total{")
        )

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) and note the time."""
        self.killed_at = time.time()
        self.proc.send_signal(sig)

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return await asyncio.to_thread(self.proc.wait, 10)


def start(kubeconfig: Path, log: Path, *args: str, env: Mapping[str, str] | None = None) -> Process:
    """Start ``mlops-platform run --kubeconfig KUBECONFIG ARGS...`` from this checkout's sources,
    its probes and metrics on loopback ports the kernel picks as it binds (``args`` must not set
    them: a port picked free beforehand can be taken by another process's connection meanwhile),
    stderr appended to ``log``. The caller stops it (:meth:`Process.stop`)."""
    log_start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "mlops_platform.cli", "run",
                "--kubeconfig", str(kubeconfig),
                "--health-probe-bind-address", "127.0.0.1:0",
                "--metrics-bind-address", "127.0.0.1:0",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(_SRC), **(env or {})},
        )  # fmt: skip
    return Process(proc, f"{socket.gethostname()}_{proc.pid}", log, log_start=log_start)


def elected(
    namespace: str, lease: str, lease_duration: float, renew_deadline: float, retry_period: float
) -> tuple[str, ...]:
    """The ``run`` flags of a replica watching only ``namespace``, with leader election on the Lease
    ``namespace/lease`` at that timing, serving no webhook (the test session's webhook converts)."""
    return (
        "--namespace", namespace,
        "--leader-elect",
        "--leader-election-id", lease,
        "--leader-election-namespace", namespace,
        "--lease-duration", str(lease_duration),
        "--renew-deadline", str(renew_deadline),
        "--retry-period", str(retry_period),
        "--webhook-bind-address", "off",
    )  # fmt: skip


@dataclasses.dataclass
class Replicas:
    """``mlops-platform run`` processes with the same flags, started one at a time (:meth:`add`),
    each logging to ``replica-<n>.log`` in ``logs``; :func:`replicas` stops every one at the end."""

    kubeconfig: Path
    logs: Path
    args: tuple[str, ...]
    started: list[Process] = dataclasses.field(default_factory=list)

    def add(self) -> Process:
        proc = start(self.kubeconfig, self.logs / f"replica-{len(self.started)}.log", *self.args)
        self.started.append(proc)
        return proc


@contextlib.asynccontextmanager
async def replicas(kubeconfig: Path, logs: Path, *args: str) -> AsyncIterator[Replicas]:
    """:class:`Replicas` (none started yet); every one started is stopped when the block exits."""
    group = Replicas(kubeconfig, logs, args)
    try:
        yield group
    finally:
        await asyncio.gather(*(p.stop() for p in group.started))


async def record_lease_holders(
    client: rclient.Client,
    namespace: str,
    changed: Callable[[str, str], None],
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> None:
    """Call ``changed(lease name, holder)`` for every change of the holder of the selected Leases
    ("" when released or deleted), from a watch started at a LIST made first: what replicas'
    takeovers are timed and ordered by. Runs until cancelled."""
    listed = await client.list(
        resources.LEASE, namespace, label_selector=label_selector, field_selector=field_selector
    )
    rv = listed["metadata"]["resourceVersion"]
    last: dict[str, str] = {}
    while True:
        async for event in client.watch(
            resources.LEASE,
            namespace,
            resource_version=rv,
            timeout_seconds=600,
            label_selector=label_selector,
            field_selector=field_selector,
        ):
            obj = event["object"]
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "BOOKMARK":
                continue
            name = obj["metadata"]["name"]
            holder = "" if event["type"] == "DELETED" else str(obj["spec"].get("holderIdentity") or "")
            if last.get(name, "") != holder:
                last[name] = holder
                changed(name, holder)
