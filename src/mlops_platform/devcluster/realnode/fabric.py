"""A cluster's real nodes as a whole: its fabric, the bridge to the API server, its nodes.

The API server binds the host's loopback only, which no other network namespace reaches. The bridge
carries it into the fabric through a unix socket (a file: it crosses network namespaces), with socat
at both ends: on the host, ``UNIX-LISTEN`` -> ``127.0.0.1:<port>``; in the fabric,
``<api address>:<port>`` -> the socket. So nothing listens beyond loopback on the host, and nodes
and pods reach the API server at the address it advertises (the ``kubernetes`` Service's endpoint).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from mlops_platform.devcluster import pids
from mlops_platform.devcluster.realnode import addressing, imagebuild, netns
from mlops_platform.devcluster.realnode.addressing import Block
from mlops_platform.devcluster.realnode.node import NodeBinaries, RealNode

_BRIDGE_ENDS = ("api-bridge-host", "api-bridge-fabric")


class Fabric:
    """The cluster's fabric; ``api_port``: the API server's port on the host's loopback, which the
    bridge listens on at the fabric's address too (the ``kubernetes`` endpoint the API server
    advertises has its own port)."""

    def __init__(self, cluster: str, cluster_dir: Path, block: Block, api_port: int = 0) -> None:
        self.cluster, self.cluster_dir, self.block, self.api_port = cluster, cluster_dir, block, api_port
        self.dir = cluster_dir / "fabric"

    @property
    def server(self) -> str:
        """The API server's URL as nodes and pods reach it."""
        return f"https://{self.block.api_address}:{self.api_port}"

    def _pid(self, end: str) -> int | None:
        return pids.running(self.dir / f"{end}.pid")

    def up(self) -> None:
        """The fabric namespace and the API bridge (idempotent)."""
        if not self.api_port:
            raise ValueError("the API server's port is needed to bridge it into the fabric")
        api_port = self.api_port
        netns.fabric_up(self.block)
        self.dir.mkdir(parents=True, exist_ok=True)
        sock = self.dir / "api.sock"
        if self._pid("api-bridge-host") is None:
            sock.unlink(missing_ok=True)
            self._spawn(
                "api-bridge-host", ["socat", f"UNIX-LISTEN:{sock},fork,mode=600", f"TCP:127.0.0.1:{api_port}"]
            )
            _wait(lambda: sock.exists(), "the API bridge's socket")
        if self._pid("api-bridge-fabric") is None:
            listen = f"TCP-LISTEN:{api_port},bind={self.block.api_address},fork,reuseaddr"
            ns = f"--net=/run/netns/{netns.fabric_name(self.block)}"
            self._spawn("api-bridge-fabric", ["nsenter", ns, "--", "socat", listen, f"UNIX-CONNECT:{sock}"])
            _wait(self._fabric_listens, "the API bridge in the fabric")

    def _fabric_listens(self) -> bool:
        out = netns.in_netns(netns.fabric_name(self.block), "ss", "-Hltn")
        return re.search(rf"{re.escape(self.block.api_address)}:{self.api_port}\b", out) is not None

    def _spawn(self, end: str, argv: list[str]) -> None:
        with (self.dir / f"{end}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        (self.dir / f"{end}.pid").write_text(f"{proc.pid}\n")

    def nodes(self) -> list[RealNode]:
        """The nodes that exist (have a directory), by index."""
        found = []
        for d in sorted((self.cluster_dir / "realnodes").glob("real-node-*")):
            with contextlib.suppress(ValueError):
                found.append(int(d.name.rsplit("-", 1)[1]))
        return [RealNode(self.cluster, self.cluster_dir, self.block, i) for i in sorted(found)]

    def node(self, index: int) -> RealNode:
        return RealNode(self.cluster, self.cluster_dir, self.block, index)

    def up_nodes(self, count: int, bins: NodeBinaries, max_pods: int) -> list[RealNode]:
        """Nodes 0..count-1 up (existing ones keep running); nodes beyond ``count`` are left as they
        are. Their policy agents start once the nodes are registered (:meth:`RealNode.start_policy_agent`)."""
        started = []
        for i in range(count):
            node = self.node(i)
            node.up(bins, self.server, max_pods)
            started.append(node)
        return started

    def import_images(self, bins: NodeBinaries, recipes: list[imagebuild.Recipe]) -> None:
        """The images built (or cached) and imported into every node."""
        for r in recipes:
            imagebuild.archive(r)  # built before any node is asked
        nodes = self.nodes()
        if not nodes:
            raise RuntimeError(f"cluster {self.cluster!r} has no real node to import images into")
        for node in nodes:
            node.import_images(bins, recipes)

    def tag_image(self, bins: NodeBinaries, ref: str, new_ref: str) -> None:
        """``new_ref`` for the image ``ref`` (imported) on every node."""
        for node in self.nodes():
            node.ctr(bins, "images", "tag", "--force", ref, new_ref)

    def down(self) -> None:
        """Every node down, then the bridge and the fabric; idempotent."""
        for node in self.nodes():
            node.down()
        for end in _BRIDGE_ENDS:
            pid = self._pid(end)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        netns.fabric_down(self.block)


def _wait(ok: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not up after {timeout:.0f}s")
        time.sleep(0.05)


# -- the cluster's slot (addressing.Block), claimed at its creation, released at its ``dev down``


def _slot_file(workdir: Path, cluster: str) -> Path:
    return workdir / f"{cluster}.slot"


def block_of(workdir: Path, cluster: str) -> Block | None:
    """The block the cluster holds; None for a cluster created before blocks (or not created)."""
    with contextlib.suppress(OSError, ValueError):
        return Block(int(_slot_file(workdir, cluster).read_text()))
    return None


def claim_block(workdir: Path, cluster: str) -> Block:
    """The cluster's block: the one it holds, else the lowest free one (the caller holds the start
    lock, so two clusters never claim the same)."""
    held = block_of(workdir, cluster)
    if held is not None:
        return held
    taken = set()
    for f in workdir.glob("*.slot"):
        with contextlib.suppress(OSError, ValueError):
            taken.add(int(f.read_text()))
    routes = [line.split()[0] for line in netns.run("ip", "route", "show").splitlines() if line.strip()]
    block = Block(addressing.free_slot(taken, routes))
    _slot_file(workdir, cluster).write_text(f"{block.slot}\n")
    return block


def release_block(workdir: Path, cluster: str) -> None:
    _slot_file(workdir, cluster).unlink(missing_ok=True)
