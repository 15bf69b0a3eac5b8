"""The real worker node's numbers: start, pod latency, idle footprint, capacity (``make bench-node``).

On a fresh local cluster (``dev up --real-nodes 1``, no third-party CRDs):

1. **start**: ``dev up`` wall time, and node Ready after its kubelet started (the Ready condition's
   transition time against the kubelet process' start time, both to the second);
2. **pods**: ``--pods`` pods (a Python HTTP server with a readiness probe, the locally built image)
   created one after another; for each, create -> Running and create -> Ready, polled every 50 ms;
   p50 and p99;
3. **idle**: CPU (utime + stime deltas) and RSS of the node's processes (containerd and its shims,
   kubelet, kube-proxy, kube-router, the API bridge, CoreDNS) over ``--idle-seconds`` with no pod of
   the benchmark left;
4. **capacity**: pods (a sleeping Python process, 10m CPU / 16Mi requested each) created in batches until
   one is not admitted (the scheduler's or the kubelet's reason is recorded) or ``--max-pods`` run;
   the node's and the machine's state at that point.

Results: ``docs/benchmarks/realnode.json`` and ``realnode.md`` (``--out``).

    .venv/bin/python -m bench.realnode
    .venv/bin/python -m bench.realnode --pods 20 --idle-seconds 60 --out /tmp/node
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/realnode.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common as common

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-node"


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


def _started_at(pid: int) -> float:
    """The process' start as a Unix time (to the clock tick)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return _boot_time() + int(rest[19]) / common.CLK_TCK


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _real_node(name: str) -> Any:
    """The cluster's ``real-node-0`` (a ``devcluster.realnode.node.RealNode``)."""
    from mlops_platform.devcluster import cluster
    from mlops_platform.devcluster.realnode import fabric

    block = fabric.block_of(cluster.workdir(), name)
    if block is None:
        raise SystemExit(f"cluster {name!r} has no address block (created before real nodes came)")
    return fabric.Fabric(name, cluster.cluster_dir(name), block).node(0)


async def _node_ready_after_kubelet(c: Any, name: str) -> float:
    from mlops_platform.runtime.transport import resources

    node = _real_node(name)
    pid = node.pid("kubelet")
    assert pid is not None
    live = await c.get(resources.NODE, node.name)
    ready = next(x for x in live["status"]["conditions"] if x["type"] == "Ready")
    return _parse_time(ready["lastTransitionTime"]) - _started_at(pid)


async def _pod_latencies(c: Any, count: int) -> list[tuple[float, float]]:
    """(create -> Running, create -> Ready) seconds of ``count`` server pods created one by one."""
    from tqdm import tqdm

    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import realnode as rn

    out = []
    for i in tqdm(range(count), desc="pods create -> Ready", unit="pod", file=sys.stderr):
        name = f"lat-{i}"
        t0 = time.monotonic()
        await c.create(resources.POD, rn.server(name), NAMESPACE)
        running = ready = None
        while ready is None:
            p = await c.get(resources.POD, name, NAMESPACE)
            now = time.monotonic() - t0
            if running is None and (p.get("status") or {}).get("phase") == "Running":
                running = now
            if rn.is_ready(p):
                ready = now
            elif now > 120:
                raise TimeoutError(f"pod {name} not Ready after 120 s: {p.get('status')}")
            else:
                await asyncio.sleep(0.05)
        out.append((running if running is not None else ready, ready))
    return out


async def _delete_pods(c: Any, prefix: str) -> None:
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import wait

    for p in (await c.list(resources.POD, NAMESPACE))["items"]:
        if p["metadata"]["name"].startswith(prefix):
            await c.delete(resources.POD, p["metadata"]["name"], NAMESPACE)

    async def gone() -> bool:
        items = (await c.list(resources.POD, NAMESPACE))["items"]
        return not any(p["metadata"]["name"].startswith(prefix) for p in items)

    await wait.until(gone, timeout=300, interval=0.5, what=f"pods {prefix}* deleted")


def _node_processes(name: str) -> dict[str, list[int]]:
    """The node's processes by role: its daemons (and the shims they started) from its cgroup root,
    CoreDNS's container, the API bridge's two ends."""
    from mlops_platform.devcluster import cluster

    node = _real_node(name)
    roles: dict[str, list[int]] = {}
    for pid in sorted(node.cgroup.pids()):
        with contextlib.suppress(OSError):
            cmd = common.command_name(pid)
            role = {"pause": "pause (sandboxes)"}.get(cmd, cmd)
            roles.setdefault(role, []).append(pid)
    roles["api bridge (socat)"] = common.pids_naming(str(cluster.cluster_dir(name) / "fabric" / "api.sock"))
    return roles


def _idle(name: str, seconds: float) -> dict[str, dict[str, float]]:
    procs = _node_processes(name)
    start = {r: {p: common.read_proc(p) for p in ps} for r, ps in procs.items()}
    common.log(f"idle: sampling {sum(len(p) for p in procs.values())} processes for {seconds:.0f} s")
    time.sleep(seconds)  # the measurement window itself, not a synchronisation
    out: dict[str, dict[str, float]] = {}
    for role, before in start.items():
        cpu = rss = 0.0
        for pid, r0 in before.items():
            with contextlib.suppress(OSError):
                r1 = common.read_proc(pid)
                cpu += r1.cpu_seconds - r0.cpu_seconds
                rss += r1.rss
        out[role] = {"processes": len(before), "cpu_percent_of_a_core": 100 * cpu / seconds, "rss_bytes": rss}
    return out


async def _capacity(c: Any, max_pods: int, batch: int) -> dict[str, Any]:
    """Pods created ``batch`` at a time until one is not admitted (or ``max_pods``); then, once every
    admitted one runs, how many run and what the machine spent on it."""
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import realnode as rn
    from mlops_platform.testing import wait

    sleeper = ["python3", "-c", "import signal; signal.pause()"]
    created, refusal = 0, None
    t0, m0, avail0 = time.monotonic(), common.read_machine(), _mem_available()

    async def pods() -> list[dict[str, Any]]:
        items = (await c.list(resources.POD, NAMESPACE))["items"]
        return [p for p in items if p["metadata"]["name"].startswith("cap-")]

    async def settled() -> bool:
        """Every created pod Running or refused."""
        nonlocal refusal
        items = await pods()
        running = sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")
        refused = [r for p in items if (r := _not_admitted(p))]
        refusal = refusal or (refused[0] if refused else None)
        common.log(f"capacity: {created} created, {running} running, {len(refused)} not admitted")
        return running + len(refused) == created

    while created < max_pods and refusal is None:
        for i in range(created, min(created + batch, max_pods)):
            await c.create(resources.POD, rn.pod(f"cap-{i}", sleeper, limits={"memory": "32Mi"}), NAMESPACE)
        created = min(created + batch, max_pods)
        await wait.until(settled, timeout=300, interval=1, what=f"{created} pods Running or refused")
    seconds = time.monotonic() - t0
    running = sum(1 for p in await pods() if (p.get("status") or {}).get("phase") == "Running")
    return {
        "admitted": running,
        "first_refusal": refusal,
        "seconds": seconds,
        "machine_cpus_busy": (common.read_machine().busy_seconds - m0.busy_seconds) / seconds,
        "machine_memory_used_bytes": avail0 - _mem_available(),
    }


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _not_admitted(p: dict[str, Any]) -> str | None:
    status = p.get("status") or {}
    if status.get("phase") == "Failed":
        return f"{status.get('reason')}: {status.get('message')}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return f"Unschedulable: {cond.get('message')}"
    return None


async def measure(a: argparse.Namespace, kubeconfig: str, up_seconds: float) -> dict[str, Any]:
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    result: dict[str, Any] = {"dev_up_seconds": up_seconds}
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        result["node_ready_after_kubelet_start_seconds"] = await _node_ready_after_kubelet(c, a.cluster_name)
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await c.create(resources.NAMESPACE, ns)
        lat = await _pod_latencies(c, a.pods)
        result["pods"] = {
            "count": len(lat),
            "running_s": [r for r, _ in lat],
            "ready_s": [r for _, r in lat],
        }
        await _delete_pods(c, "lat-")
        result["idle"] = _idle(a.cluster_name, a.idle_seconds)
        result["capacity"] = await _capacity(c, a.max_pods, a.batch)
        await _delete_pods(c, "cap-")
    return result


def render(r: dict[str, Any]) -> str:
    pods = r["pods"]
    rows = [
        ["`dev up` (fresh cluster, 1 real node, binaries and images cached)", f"{r['dev_up_seconds']:.1f} s"],
        [
            "node Ready after its kubelet started",
            f"{r['node_ready_after_kubelet_start_seconds']:.1f} s (1 s resolution)",
        ],
    ]
    for key, what in (("running_s", "Running"), ("ready_s", "Ready")):
        xs = pods[key]
        rows.append(
            [
                f"pod create -> {what}, {pods['count']} pods one by one",
                f"p50 {common.percentile(xs, 50):.2f} s, p99 {common.percentile(xs, 99):.2f} s",
            ]
        )
    idle = r["idle"]
    table = common.markdown_table(
        ["process", "count", "CPU (% of a core)", "RSS (MiB)"],
        [
            [k, str(v["processes"]), f"{v['cpu_percent_of_a_core']:.2f}", common.mib(v["rss_bytes"])]
            for k, v in sorted(idle.items())
        ]
        + [
            [
                "**total**",
                str(sum(v["processes"] for v in idle.values())),
                f"{sum(v['cpu_percent_of_a_core'] for v in idle.values()):.2f}",
                common.mib(sum(v["rss_bytes"] for v in idle.values())),
            ]
        ],
    )
    cap = r["capacity"]
    refusal = cap["first_refusal"] or "none (the --max-pods bound)"
    cap_line = (
        f"{cap['admitted']} pods Running in {cap['seconds']:.0f} s (the machine's CPUs"
        f" {cap['machine_cpus_busy']:.2f} busy meanwhile,"
        f" {common.mib(cap['machine_memory_used_bytes'])} MiB more memory in use); the first refused:"
        f" {refusal}"
    )
    return (
        "# The real worker node\n\n"
        f"`{r['command']}` on {r['machine']['date']} ({r['machine']['cpus']} CPUs).\n\n"
        + common.markdown_table(["what", "figure"], rows)
        + f"\n\n## Idle, {r['arguments']['idle_seconds']:.0f} s, no benchmark pod\n\n"
        + table
        + "\n\n## Capacity\n\n"
        + cap_line
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster-name", default="mlops-bench-node")
    p.add_argument("--pods", type=int, default=20)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--max-pods", type=int, default=110, help="stop the capacity step at this many pods")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    a = p.parse_args(argv)
    out, machine, arguments = common.results_dir(a, REPO)
    common.dev_cluster_down(a.cluster_name)
    try:
        kubeconfig, up_seconds = common.dev_cluster_up(a.cluster_name, "--without-crds", "--real-nodes", "1")
        result = asyncio.run(measure(a, kubeconfig, up_seconds))
    finally:
        if not a.keep_cluster:
            common.dev_cluster_down(a.cluster_name)
    result |= {
        "machine": machine,
        "arguments": arguments,
        "command": "python -m bench.realnode " + " ".join(argv or sys.argv[1:]),
    }
    common.write_json(out / "realnode.json", result)
    return common.write_page(out, "realnode.md", render(result))


if __name__ == "__main__":
    sys.exit(main())
