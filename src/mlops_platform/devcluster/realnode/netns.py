"""The namespaces a real node lives in, and the one link between them and the host.

- The cluster's *fabric*: a network namespace with a bridge (``br0``, the API server's address and
  the nodes' gateway) and the fabric's end of the ONE veth pair to the host. It forwards between the
  nodes and from the host into the cluster (``ip_forward`` is set in it, never on the host), has no
  default route (nothing leaves the cluster's block through it), and drops connections that nodes or
  pods open towards the host (an nftables rule of its own namespace). It routes each node's pod
  range to that node, and the Service range to the first node, whose kube-proxy translates a
  ClusterIP as on any node: that is how kube-apiserver (on the host) reaches a conversion webhook
  behind its Service, as in a cluster whose control plane runs kube-proxy.
- Each node: a network namespace (``eth0`` on the fabric's bridge, default route via the fabric) and
  a persistent mount namespace where ``/var/lib``, ``/var/log`` and ``/run`` are the node's own
  directories (its CNI configuration is a directory of its own, named in containerd's config),
  ``/etc/resolv.conf`` names only the node's loopback (:data:`NODE_RESOLV_CONF`) and
  the global sysctls the kubelet would rewrite are masked read-only with
  the values it wants (:data:`configs.KUBELET_SYSCTLS`). Processes enter both with ``nsenter``
  (``ip netns exec`` remounts ``/sys`` and would hide the cgroup hierarchies), and join the node's
  cgroup root (a private one in every cgroup v1 hierarchy, where kubelet puts the pods too), so
  that a teardown finds every process of the node there.

On the host only these are added: the veth's host end with its /30 address, and one route for the
cluster's whole block into it. :func:`host_network` reads what a test compares before and after.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from mlops_platform.devcluster.realnode import configs
from mlops_platform.devcluster.realnode.addressing import Block

CGROUP_FS = Path("/sys/fs/cgroup")
#: how long the host's end of a fabric may take to go once its namespace is deleted
LINK_GONE_TIMEOUT = 10.0
#: the v1 hierarchies kubelet checks (and the unified one of a hybrid host)
CGROUP_HIERARCHIES = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "systemd",
    "devices",
    "freezer",
    "blkio",
    "unified",
)
_FABRIC_NFT = """table inet mlops-fabric {
  chain forward {
    type filter hook forward priority 0; policy accept;
    iifname "br0" oifname "uplink" ct state new counter drop
  }
}
"""


def run(*args: str, input: str | None = None) -> str:
    """Run a command; on failure raise naming it and what it printed."""
    proc = subprocess.run(list(args), capture_output=True, text=True, input=input, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def fabric_name(block: Block) -> str:
    return f"mlops-c{block.slot}"


def host_link(block: Block) -> str:
    return f"mlops-c{block.slot}"


def node_netns(block: Block, index: int) -> str:
    return f"mlops-c{block.slot}-n{index}"


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _link_up(ns: str, link: str, address: str) -> None:
    """In namespace ``ns``: loopback up, ``address`` (CIDR) on its veth end ``link``, ``link`` up."""
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "addr", "add", address, "dev", link)
    run("ip", "-n", ns, "link", "set", link, "up")


def fabric_up(block: Block) -> None:
    """Create the fabric and its link to the host (idempotent: an existing fabric is kept)."""
    ns, link = fabric_name(block), host_link(block)
    if _netns_exists(ns):
        return
    run("ip", "netns", "add", ns)
    try:
        run("ip", "link", "add", link, "type", "veth", "peer", "name", "uplink", "netns", ns)
        # IPv4 only on the host's end (no link-local address or route of its own)
        Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6").write_text("1\n")
        run("ip", "addr", "add", f"{block.host_address}/{block.transit_prefix}", "dev", link)
        run("ip", "link", "set", link, "up")
        _link_up(ns, "uplink", f"{block.fabric_uplink_address}/{block.transit_prefix}")
        run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", ns, "addr", "add", f"{block.api_address}/{block.node_link_prefix}", "dev", "br0")
        run("ip", "-n", ns, "link", "set", "br0", "up")
        in_netns(ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        in_netns(ns, "nft", "-f", "-", input=_FABRIC_NFT)
        # the whole block into the fabric: no cluster address ever takes the host's default route
        run("ip", "route", "add", block.network, "via", block.fabric_uplink_address, "dev", link)
    except Exception:
        fabric_down(block)
        raise


def fabric_down(block: Block) -> None:
    """Remove the fabric: deleting its namespace destroys its veth end, and the host's end with it."""
    with contextlib.suppress(RuntimeError):
        run("ip", "netns", "del", fabric_name(block))
    link = Path("/sys/class/net", host_link(block))
    if link.exists():
        try:
            run("ip", "link", "del", host_link(block))
        except RuntimeError:
            # the kernel destroys a deleted namespace's devices asynchronously: the host's end may
            # go between the check and the delete ("Cannot find device"); fail only if it stays
            deadline = time.monotonic() + LINK_GONE_TIMEOUT
            while link.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            if link.exists():
                raise
    # `ip netns add` mounted /run/netns (shared, on itself) at its first use: unmount it once empty
    runs = Path("/run/netns")
    if runs.is_dir() and not any(runs.iterdir()) and _is_mountpoint(runs):
        with contextlib.suppress(RuntimeError):
            run("umount", str(runs))


def in_netns(ns: str, *args: str, input: str | None = None) -> str:
    return run("nsenter", f"--net=/run/netns/{ns}", "--", *args, input=input)


#: the node whose kube-proxy the fabric sends Service addresses to (the API server calls a webhook
#: behind a Service at its ClusterIP, as kube-apiserver does without ``--enable-aggregator-routing``)
SERVICE_NODE = 0


def node_net_up(block: Block, index: int) -> None:
    """The node's network namespace on the fabric's bridge (idempotent)."""
    ns, fabric = node_netns(block, index), fabric_name(block)
    if _netns_exists(ns):
        return
    run("ip", "netns", "add", ns)
    try:
        run(
            "ip",
            "-n",
            fabric,
            "link",
            "add",
            f"n{index}",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        run("ip", "-n", fabric, "link", "set", f"n{index}", "master", "br0")
        run("ip", "-n", fabric, "link", "set", f"n{index}", "up")
        run("ip", "-n", fabric, "route", "add", block.pod_cidr(index), "via", block.node_address(index))
        _link_up(ns, "eth0", f"{block.node_address(index)}/{block.node_link_prefix}")
        run("ip", "-n", ns, "route", "add", "default", "via", block.api_address)
        if index == SERVICE_NODE:
            run("ip", "-n", fabric, "route", "add", block.service_cidr, "via", block.node_address(index))
    except Exception:
        node_net_down(block, index)
        raise


def node_net_down(block: Block, index: int) -> None:
    for cidr in [block.pod_cidr(index)] + ([block.service_cidr] if index == SERVICE_NODE else []):
        with contextlib.suppress(RuntimeError):
            run("ip", "-n", fabric_name(block), "route", "del", cidr)
    with contextlib.suppress(RuntimeError):
        run("ip", "netns", "del", node_netns(block, index))


#: the node's own /etc/resolv.conf: the node's daemons resolve no name (kubelet, containerd and
#: kube-router reach the API server by its address; pods get the cluster DNS from the kubelet). Its
#: loopback refuses at once, so a pull of an image the node lacks fails in seconds instead of after
#: the machine's resolver timed out several times (~50 s), and no query heads for that resolver.
NODE_RESOLV_CONF = "# the node resolves no name (mlops-platform dev cluster)\nnameserver 127.0.0.1\n"


class MountNamespace:
    """The node's persistent mount namespace, held by a bind mount of ``holder``."""

    def __init__(self, root: Path) -> None:
        self.root = root  # the node's directory: its private dirs live under root/fs
        self.dir = root / "ns"
        self.holder = self.dir / "mnt"
        self.sysctls = root / "sysctl"

    @property
    def exists(self) -> bool:
        return _is_mountpoint(self.holder)

    def up(self) -> None:
        if self.exists:
            return
        fs = self.root / "fs"
        private = ("var/lib", "var/log", "run")
        for d in private:
            (fs / d).mkdir(parents=True, exist_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sysctls.mkdir(parents=True, exist_ok=True)
        # a private mount point to hold the namespace (a namespace file must not sit on a shared mount)
        if not _is_mountpoint(self.dir):
            run("mount", "--bind", str(self.dir), str(self.dir))
            run("mount", "--make-private", str(self.dir))
        self.holder.touch()
        run("unshare", f"--mount={self.holder}", "--propagation", "slave", "true")
        binds = [f"mount --bind {shlex.quote(str(fs / d))} /{d}" for d in private]
        resolv = self.root / "resolv.conf"
        resolv.write_text(NODE_RESOLV_CONF)
        # over the host's file only (a symlink into /run now points into the node's own /run, where
        # nothing is: resolvers then ask the loopback, the same as here)
        over = f"mount --bind -o ro {shlex.quote(str(resolv))} /etc/resolv.conf"
        binds.append(f"if [ -f /etc/resolv.conf ]; then {over}; fi")
        for key, value in configs.KUBELET_SYSCTLS.items():
            f = self.sysctls / key.replace("/", ".")
            f.write_text(value + "\n")
            binds.append(f"mount --bind -o ro {shlex.quote(str(f))} /proc/sys/{key}")
        try:
            run("nsenter", f"--mount={self.holder}", "--", "sh", "-euc", " && ".join(binds))
        except RuntimeError:
            self.down()
            raise

    def down(self) -> None:
        for path in (self.holder, self.dir):
            if _is_mountpoint(path):
                run("umount", str(path))


def _is_mountpoint(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def nsenter_prefix(block: Block, index: int, mount: MountNamespace) -> list[str]:
    """The command prefix that runs a command inside the node (its network and mount namespaces)."""
    return ["nsenter", f"--net=/run/netns/{node_netns(block, index)}", f"--mount={mount.holder}", "--"]


class CgroupRoot:
    """The node's cgroup root (kubelet's ``cgroupRoot``) in every hierarchy; its ``daemons`` child
    holds the node's own processes (containerd and its shims, kubelet, kube-proxy...)."""

    def __init__(self, name: str) -> None:
        self.name = name  # e.g. "mlops.<cluster>.<node>"

    @property
    def path(self) -> str:
        return "/" + self.name

    def _dirs(self) -> list[Path]:
        return [CGROUP_FS / h / self.name for h in CGROUP_HIERARCHIES if (CGROUP_FS / h).is_dir()]

    def up(self) -> None:
        for d in self._dirs():
            for sub in (d, d / "daemons"):
                sub.mkdir(exist_ok=True)
                if d.parent.name == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        (sub / f).write_text((sub.parent / f).read_text())

    def adopt(self, pid: int) -> None:
        """Move ``pid`` into the ``daemons`` cgroup of every hierarchy (its children follow it)."""
        for d in self._dirs():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                (d / "daemons" / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self._dirs():
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    found |= {int(p) for p in procs.read_text().split()}
        return found

    def kill_all(self, timeout: float = 20.0) -> None:
        """SIGKILL every process in the root's cgroups until none is left."""
        deadline = time.monotonic() + timeout
        while left := self.pids():
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes left in cgroup {self.path}: {sorted(left)}")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def down(self) -> None:
        self.kill_all()
        for d in self._dirs():
            if d.exists():
                for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    sub.rmdir()
                d.rmdir()

    @property
    def exists(self) -> bool:
        return any(d.exists() for d in self._dirs())


def host_network() -> dict[str, list[str]]:
    """The host namespace's links, routes and firewall rules, as a test compares them before and after."""
    links = sorted(
        f"{link['ifname']}" for link in json.loads(run("ip", "-j", "link", "show")) if "ifname" in link
    )
    routes = sorted(line.strip() for line in run("ip", "route", "show", "table", "all").splitlines())
    rules = run("nft", "list", "ruleset").splitlines()
    mounts = sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    netns = sorted(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else []
    return {"links": links, "routes": routes, "nftables": rules, "mounts": mounts, "netns": netns}
