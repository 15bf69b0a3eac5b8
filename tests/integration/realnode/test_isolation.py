"""A real node leaves the host as it was: while it runs, the host's sysctls are untouched and no
cluster address leaves through the host's default route; after ``dev down``, no link, route, firewall
rule, mount, network namespace, cgroup or process of it is left."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlops_platform.devcluster import cluster
from mlops_platform.devcluster.realnode import fabric, netns
from mlops_platform.devcluster.realnode.addressing import SLOTS, Block
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import realnode as rn

#: global settings a kubelet or kube-proxy would rewrite if it could
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/ip_forward",
    "net/netfilter/nf_conntrack_max",
)


def _sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        path = Path("/proc/sys") / key
        out[key] = path.read_text().strip() if path.exists() else "(absent)"
    return out


def _mine(snapshot: dict[str, list[str]], block: Block) -> dict[str, list[str]]:
    """The snapshot less what belongs to the other local clusters (they may start and stop meanwhile:
    ``make test`` runs bench-smoke beside the tests)."""
    others = [k for k in range(SLOTS) if k != block.slot]
    other = re.compile("|".join([rf"mlops-c{k}\b" for k in others] + [rf"\b10\.{200 + k}\." for k in others]))
    return {key: [e for e in entries if not other.search(e)] for key, entries in snapshot.items()}


def _cgroups(name: str) -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"*/mlops.{name}.*"))


@pytest.fixture
def isolated_cluster() -> Iterator[str]:
    name = f"mlops-iso-{os.getpid()}"
    yield name
    cluster.down(name)


async def test_a_real_node_changes_nothing_on_the_host_and_leaves_nothing(isolated_cluster: str) -> None:
    name = isolated_cluster
    before, sysctls = netns.host_network(), _sysctls()
    kubeconfig = await asyncio.to_thread(
        cluster.up, name, install_crds=False, metrics_server=False, cpu_nodes=1, real_nodes=1
    )
    block = fabric.block_of(cluster.workdir(), name)
    assert block is not None
    during = netns.host_network()
    # on the host: the veth's end and one route for the whole block into it, nothing else of ours
    added_links = set(_mine(during, block)["links"]) - set(_mine(before, block)["links"])
    assert added_links == {f"mlops-c{block.slot}"}
    added_routes = set(_mine(during, block)["routes"]) - set(_mine(before, block)["routes"])
    assert all(f" dev mlops-c{block.slot} " in f"{r} " for r in added_routes), added_routes
    assert f"{block.network} via {block.fabric_uplink_address} dev mlops-c{block.slot}" in added_routes
    assert not any(":" in r.split()[1] for r in added_routes), "no IPv6 on the host's end"
    assert during["nftables"] == before["nftables"]  # no host firewall rule
    assert _sysctls() == sysctls  # kubelet and kube-proxy wrote none of the global settings

    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "iso"}}
        await c.create(resources.NAMESPACE, ns)
        await c.create(resources.POD, rn.server("web"), "iso")
        await rn.wait_pod(c, "iso", "web", rn.is_ready, what="Ready")
    assert _cgroups(name), "the node's pods and daemons live in its own cgroup root"
    assert _sysctls() == sysctls

    await asyncio.to_thread(cluster.down, name)
    after = netns.host_network()
    assert _mine(after, block) == _mine(before, block)
    assert _sysctls() == sysctls
    assert not _cgroups(name)
    assert not cluster.cluster_dir(name).exists()
    assert fabric.block_of(cluster.workdir(), name) is None  # the slot is free again
