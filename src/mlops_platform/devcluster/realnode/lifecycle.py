"""A cluster's real nodes from ``dev up``, ``dev import-image`` and ``dev down``: what
:mod:`~mlops_platform.devcluster.cluster` calls, given the cluster's name, directories and kubeconfig."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp
import yaml

from mlops_platform.devcluster import logs, nodes
from mlops_platform.devcluster.realnode import addons, fabric, images
from mlops_platform.devcluster.realnode import node as realnode
from mlops_platform.devcluster.realnode.addressing import Block
from mlops_platform.runtime import wait as rwait
from mlops_platform.runtime.transport import client as rclient

Log = Callable[[str], None]


def api_port(kubeconfig: Path) -> int:
    """The API server's port on the host's loopback (what the fabric's bridge listens on too)."""
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return int(server.rsplit(":", 1)[1])


def held_block(workdir: Path, name: str) -> Block:
    block = fabric.block_of(workdir, name)
    if block is None:
        raise RuntimeError(
            f"cluster {name!r} was created before real nodes came (it has no address block):"
            f" `mlops-platform dev down --name {name}` and up again"
        )
    return block


def bridge(workdir: Path, name: str, cluster_dir: Path, kubeconfig: Path, log: Log) -> None:
    """The cluster's fabric and the API bridge (every cluster with a block has them, nodes or not:
    its addresses are routed into the fabric, never out through the host's default route)."""
    block = fabric.block_of(workdir, name)
    if block is not None:
        log(f"the cluster's network: {block.network} (fabric namespace, one veth to the host)")
        fabric.Fabric(name, cluster_dir, block, api_port(kubeconfig)).up()


def start(
    workdir: Path, name: str, cluster_dir: Path, kubeconfig: Path, count: int, wait: float, log: Log
) -> None:
    """Real nodes 0..count-1 up (the running ones are left alone), Ready, and the cluster DNS
    Available."""
    block = held_block(workdir, name)
    fab = fabric.Fabric(name, cluster_dir, block, api_port(kubeconfig))
    fab.up()
    log(f"starting {count} real node(s): containerd, kubelet, kube-proxy, kube-router")
    bins = realnode.NodeBinaries.find()
    started = fab.up_nodes(count, bins, max_pods=realnode.MAX_PODS)
    names = [n.name for n in started]

    async def ready() -> None:
        async with rclient.Client.from_kubeconfig(kubeconfig) as c:
            await addons.install(c, block)
            log(f"waiting for the real node(s) {', '.join(names)} to be Ready, then the cluster DNS")
            await nodes.wait_ready(c, names, timeout=wait, label_selector=realnode.SELECTOR)
            for node in started:
                node.start_policy_agent(bins)
            await rwait.until(
                lambda: _policy_agents_healthy(started),
                timeout=wait,
                interval=0.5,
                what="the NetworkPolicy agent (kube-router) of every real node healthy",
            )
            await rwait.until(
                lambda: addons.dns_available(c),
                timeout=wait,
                interval=0.5,
                what="the cluster DNS (CoreDNS) Available",
            )

    asyncio.run(ready())


def import_images(workdir: Path, name: str, cluster_dir: Path, image_names: list[str]) -> list[str]:
    """Build (or take from the cache) the named local images (:data:`images.ALL`) and import them into
    every real node of the cluster; return their references. ``NAME:TAG`` imports ``NAME``'s image
    under that tag too (a second reference to the same image: what an upgrade to a new tag rolls to)."""
    parsed = [images.parse_ref(n) for n in image_names]
    recipes = images.by_name([recipe for recipe, _ in parsed])
    fab = fabric.Fabric(name, cluster_dir, held_block(workdir, name))
    bins = realnode.NodeBinaries.find()
    fab.import_images(bins, list(dict.fromkeys(recipes)))
    refs = []
    for recipe, (_, tag) in zip(recipes, parsed, strict=True):
        if tag and tag != recipe.tag:
            fab.tag_image(bins, recipe.ref, recipe.ref_with(tag))
        refs.append(recipe.ref_with(tag or recipe.tag))
    return refs


def stop(workdir: Path, name: str, cluster_dir: Path) -> None:
    """Every real node and the fabric down (before the control plane goes)."""
    block = fabric.block_of(workdir, name)
    if block is not None:
        fabric.Fabric(name, cluster_dir, block).down()


async def _policy_agents_healthy(started: list[realnode.RealNode]) -> bool:
    """Every node's kube-router answers its health check; one that exited fails the wait at once."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        for node in started:
            if node.pid(realnode.POLICY_AGENT) is None:
                raise RuntimeError(
                    f"kube-router of {node.name} exited: {logs.tail(node.log_path(realnode.POLICY_AGENT), 3)}"
                )
            try:
                async with s.get(node.policy_agent_health) as r:
                    if r.status != 200:
                        return False
            except (aiohttp.ClientError, TimeoutError):
                return False
    return True
