"""Failure injection on the local control plane: stop/start a component, compact, defragment etcd.

Used by reliability tests. Works on the binary runtime only (real processes on this machine).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import httpx2 as httpx

from mlops_platform.devcluster import cluster

#: the components that exit when they cannot renew their leader Lease (kube-apiserver down longer
#: than their renew deadline); in a cluster the kubelet starts them again
LEADER_ELECTED = ("kube-controller-manager", "kube-scheduler")


@dataclasses.dataclass
class StoppedComponent:
    """What is needed to start a stopped component again exactly as kwokctl started it."""

    name: str
    argv: list[str]
    cwd: str
    env: dict[str, str]


def pid_of(name: str, component: str) -> int:
    """The PID of the component's running process; raises if it is not running."""
    if not cluster.component_running(name, component):
        raise ProcessLookupError(f"{component} of cluster {name!r} is not running")
    return cluster.component_pid(name, component)


def component_spec(name: str, component: str) -> StoppedComponent:
    """How a running component was started (command line, directory, environment): what
    :func:`start_component` needs to start it again should it exit (a kube-controller-manager or
    kube-scheduler exits when it cannot renew its leader Lease while kube-apiserver is down)."""
    proc = Path("/proc") / str(pid_of(name, component))
    argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
    env = dict(kv.decode().split("=", 1) for kv in (proc / "environ").read_bytes().split(b"\0") if b"=" in kv)
    return StoppedComponent(component, argv, os.readlink(proc / "cwd"), env)


def stop_component(name: str, component: str, *, sig: signal.Signals = signal.SIGKILL) -> StoppedComponent:
    """Kill one component process (default SIGKILL) and wait until it is gone."""
    spec = component_spec(name, component)
    pid = pid_of(name, component)
    proc = Path("/proc") / str(pid)
    os.kill(pid, sig)
    deadline = time.monotonic() + 30
    while Path(proc).exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    return spec


def start_component(name: str, stopped: StoppedComponent) -> int:
    """Start a component stopped by :func:`stop_component` again; return its new PID."""
    log_file = cluster.cluster_dir(name) / "logs" / f"{stopped.name}.log"
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            stopped.argv,
            cwd=stopped.cwd,
            env=stopped.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cluster.pid_file(name, stopped.name).write_text(str(proc.pid))
    return proc.pid


def start_exited(name: str, specs: Iterable[StoppedComponent]) -> list[str]:
    """Start again each component of ``specs`` that is not running, as the kubelet starts a static
    pod again; return the names of those started."""
    started = [spec for spec in specs if not cluster.component_running(name, spec.name)]
    for spec in started:
        start_component(name, spec)
    return [spec.name for spec in started]


def etcd_endpoint(name: str) -> str:
    """The etcd client URL kube-apiserver uses (from its command line)."""
    argv = (Path("/proc") / str(pid_of(name, "kube-apiserver")) / "cmdline").read_bytes().decode()
    match = re.search(r"--etcd-servers=([^\0,]+)", argv)
    if not match:
        raise LookupError("kube-apiserver has no --etcd-servers flag")
    return match.group(1)


def compact_etcd(name: str, endpoint: str | None = None) -> int:
    """Compact etcd at its current revision (physically); return that revision.

    Any watch or list from an older resourceVersion then gets ``410 Gone``.
    """
    url = endpoint or etcd_endpoint(name)
    with httpx.Client(base_url=url, timeout=10) as http:
        rev = int(http.post("/v3/kv/range", json={"key": "AA=="}).json()["header"]["revision"])
        http.post("/v3/kv/compaction", json={"revision": rev, "physical": True}).raise_for_status()
    return rev


#: the key :func:`bump_etcd_revision` writes: outside the API server's prefix (``/registry``)
BUMP_KEY = "/mlops-platform-chaos/revision-bump"


def bump_etcd_revision(name: str, endpoint: str | None = None) -> int:
    """Write and delete a key no API server reads, so etcd's revision moves past every
    resourceVersion any client has seen; return the new revision.

    With kube-apiserver stopped, this makes sure that after a compaction no watch can resume at
    exactly the compacted revision (the last write before the stop): every one gets ``410 Gone``.
    """
    url = endpoint or etcd_endpoint(name)
    key = base64.b64encode(BUMP_KEY.encode()).decode()
    with httpx.Client(base_url=url, timeout=10) as http:
        put = http.post("/v3/kv/put", json={"key": key, "value": base64.b64encode(b"1").decode()})
        put.raise_for_status()
        deleted = http.post("/v3/kv/deleterange", json={"key": key})
        deleted.raise_for_status()
        return int(deleted.json()["header"]["revision"])


def defrag_etcd(name: str, endpoint: str | None = None) -> tuple[int, int]:
    """Defragment etcd (give the pages a compaction freed back: the database file shrinks); return
    the database size in bytes before and after.

    etcd answers no request while it defragments: the API server's requests wait meanwhile.
    """
    url = endpoint or etcd_endpoint(name)
    with httpx.Client(base_url=url, timeout=60) as http:
        before = int(http.post("/v3/maintenance/status", json={}).json()["dbSize"])
        http.post("/v3/maintenance/defragment", json={}).raise_for_status()
        after = int(http.post("/v3/maintenance/status", json={}).json()["dbSize"])
    return before, after
