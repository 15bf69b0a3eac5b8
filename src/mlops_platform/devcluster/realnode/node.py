"""Starting and stopping a real node: containerd, kubelet, kube-proxy and kube-router inside the
node's namespaces.

A node's files live in ``<cluster dir>/realnodes/<node>/`` (its private ``/var/lib``, ``/var/log``
and ``/run`` under ``fs/``, its CNI configuration, configs, credentials, logs and PID files); its
processes in its cgroup root. :meth:`RealNode.down` kills every process of that cgroup root (daemons, shims,
pods), then removes the cgroups, the mount namespace and the network namespace: nothing is left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import yaml

from mlops_platform.devcluster import binaries, logs, pids
from mlops_platform.devcluster.realnode import configs, imagebuild, images, netns, pki
from mlops_platform.devcluster.realnode.addressing import Block

NODE_PREFIX = "real-node-"
LABELS = {configs.REAL_NODE_LABEL: "true", "mlops.platform/pool": "real", "type": "real"}
SELECTOR = "type=real"
#: pods a real node admits (kubelet's maxPods); docs/dev-cluster.md says what the machine holds
MAX_PODS = 110  # kubelet's default
RUNC = Path("/usr/sbin/runc")  # Debian's runc (docs/design.md: why not a module build)
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


@dataclasses.dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_proxy: Path
    containerd_dir: Path  # containerd, containerd-shim-runc-v2, ctr
    cni_dir: Path
    kube_router: Path

    @property
    def ctr(self) -> Path:
        return self.containerd_dir / "ctr"

    @classmethod
    def find(cls, build: bool = True) -> NodeBinaries:
        """The pinned node binaries from the cache, built when missing and allowed."""
        tools = binaries.node_tools(build=build)
        return cls(
            kubelet=tools["kubelet"],
            kube_proxy=tools["kube-proxy"],
            containerd_dir=tools["containerd"],
            cni_dir=tools["cni-plugins"],
            kube_router=tools["kube-router"] / "kube-router",
        )


#: the node's daemons in start order; kube-router last, once the node is registered (it exits at
#: start, "failed to identify the node", when its Node object does not exist yet)
COMPONENTS = ("containerd", "kubelet", "kube-proxy", "kube-router")
POLICY_AGENT = "kube-router"
POLICY_AGENT_HEALTH_PORT = 20244
#: kube-router's flags: its network-policy controller only (its router, service proxy and
#: load-balancer allocator stay off: they are what its published advisories concern)
KUBE_ROUTER_FLAGS = (
    "--run-firewall=true",
    "--run-router=false",
    "--run-service-proxy=false",
    "--run-loadbalancer=false",
    "--health-port=20244",  # POLICY_AGENT_HEALTH_PORT
    "--metrics-port=0",
    "--v=1",
)


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index}"


class RealNode:
    """Node ``index`` of the cluster ``cluster`` (whose files are under ``cluster_dir``)."""

    def __init__(self, cluster: str, cluster_dir: Path, block: Block, index: int) -> None:
        self.cluster, self.block, self.index = cluster, block, index
        self.name = node_name(index)
        self.root = cluster_dir / "realnodes" / self.name
        self.fs = self.root / "fs"
        self.mount = netns.MountNamespace(self.root)
        self.cgroup = netns.CgroupRoot(f"mlops.{cluster}.{self.name}")
        self.cluster_pki = cluster_dir / "pki"

    # -- where things are, seen from the host
    def log_path(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    def _pid_file(self, component: str) -> Path:
        return self.root / "pids" / f"{component}.pid"

    def pid(self, component: str) -> int | None:
        return pids.running(self._pid_file(component))

    @property
    def exists(self) -> bool:
        return self.root.is_dir()

    # -- lifecycle
    def up(self, bins: NodeBinaries, server: str, max_pods: int) -> None:
        """Namespaces, configs, credentials; containerd with the local images; kubelet, kube-proxy
        (kube-router: :meth:`start_policy_agent`, once the node is registered). A node whose
        daemons all run is left alone (``dev up`` on a running cluster); one whose daemons are
        partly gone has the missing ones started again."""
        if all(self.pid(c) is not None for c in COMPONENTS if c != POLICY_AGENT):
            return
        self.cgroup.up()
        netns.node_net_up(self.block, self.index)
        self.mount.up()
        argv = self._configure(bins, server, max_pods)
        self._start("containerd", argv["containerd"], bins)
        self._wait_containerd(bins)
        self.import_images(bins, list(images.NODE))
        for component in ("kubelet", "kube-proxy"):
            self._start(component, argv[component], bins)

    def start_policy_agent(self, bins: NodeBinaries) -> None:
        """kube-router, unless it runs: its configuration and credentials are :meth:`up`'s."""
        if self.pid(POLICY_AGENT) is None:
            self._start(POLICY_AGENT, self._commands(bins)[POLICY_AGENT], bins)

    @property
    def policy_agent_health(self) -> str:
        """kube-router's health URL: on the node's address, which the host reaches through the fabric."""
        return f"http://{self.block.node_address(self.index)}:{POLICY_AGENT_HEALTH_PORT}/healthz"

    def _configure(self, bins: NodeBinaries, server: str, max_pods: int) -> dict[str, list[str]]:
        """Write every component's configuration and credentials; return their command lines."""
        conf, cni_conf, pki_dir = self.root / "config", self.root / "cni", self.root / "pki"
        for d in (conf, cni_conf):
            d.mkdir(parents=True, exist_ok=True)
        conflist = configs.cni_conflist(block=self.block, index=self.index)
        (cni_conf / "10-mlops-pods.conflist").write_text(conflist)
        containerd = configs.containerd_config(
            cni_bin_dir=bins.cni_dir, cni_conf_dir=cni_conf, runc=RUNC, pause_image=images.PAUSE.ref
        )
        (conf / "containerd.toml").write_text(containerd)
        for who in (pki.kubelet(self.name), pki.KUBE_PROXY, pki.KUBE_ROUTER):
            pki.write_kubeconfig(pki_dir, self.cluster_pki, who, server)
        kubelet = configs.kubelet_config(
            block=self.block, ca_file=pki_dir / "ca.crt", cgroup_root=self.cgroup.path, max_pods=max_pods
        )
        (conf / "kubelet.yaml").write_text(yaml.safe_dump(kubelet, sort_keys=False))
        proxy = configs.kube_proxy_config(
            block=self.block, node_name=self.name, kubeconfig=pki.kubeconfig_path(pki_dir, pki.KUBE_PROXY)
        )
        (conf / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy, sort_keys=False))
        return self._commands(bins)

    def _commands(self, bins: NodeBinaries) -> dict[str, list[str]]:
        """The daemons' command lines (their files are where :meth:`_configure` writes them)."""
        conf, pki_dir = self.root / "config", self.root / "pki"
        kubeconfigs = {
            who.file: pki.kubeconfig_path(pki_dir, who)
            for who in (pki.kubelet(self.name), pki.KUBE_PROXY, pki.KUBE_ROUTER)
        }
        labels = ",".join(f"{k}={v}" for k, v in LABELS.items())
        return {
            "containerd": [
                str(bins.containerd_dir / "containerd"),
                "--config",
                str(conf / "containerd.toml"),
            ],
            "kubelet": [
                str(bins.kubelet),
                f"--config={conf / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfigs['kubelet']}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.block.node_address(self.index)}",
                f"--node-labels={labels}",
                "--v=1",
            ],
            "kube-proxy": [str(bins.kube_proxy), f"--config={conf / 'kube-proxy.yaml'}", "--v=1"],
            "kube-router": [
                str(bins.kube_router),
                f"--kubeconfig={kubeconfigs['kube-router']}",
                f"--hostname-override={self.name}",
                f"--service-cluster-ip-range={self.block.service_cidr}",
                *KUBE_ROUTER_FLAGS,
            ],
        }

    def _start(self, component: str, argv: list[str], bins: NodeBinaries) -> int:
        running = self.pid(component)
        if running is not None:
            return running
        for d in ("logs", "pids"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        env = {
            # containerd finds its shim here; kube-router its ipset and iptables (Debian's)
            "PATH": os.pathsep.join([str(bins.containerd_dir), *SYSTEM_PATH]),
            "HOME": "/root",
        }
        with self.log_path(component).open("ab") as log:
            proc = subprocess.Popen(
                [*netns.nsenter_prefix(self.block, self.index, self.mount), *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.cgroup.adopt(proc.pid)
        self._pid_file(component).write_text(f"{proc.pid}\n")
        return proc.pid

    def ctr(self, bins: NodeBinaries, *args: str) -> str:
        """``ctr`` against the node's containerd, from inside the node (the socket's path as the host
        sees it can be longer than a unix socket address may be)."""
        prefix = netns.nsenter_prefix(self.block, self.index, self.mount)
        ctr = [str(bins.ctr), "--address", configs.CONTAINERD_SOCKET, "--namespace", "k8s.io"]
        return netns.run(*prefix, *ctr, *args)

    def _wait_containerd(self, bins: NodeBinaries, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.ctr(bins, "version")
                return
            except RuntimeError as e:
                if self.pid("containerd") is None:
                    raise RuntimeError(
                        f"containerd of {self.name} exited: {logs.tail(self.log_path('containerd'), 5)}"
                    ) from e
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"containerd of {self.name} not answering after {timeout:.0f}s: {e}"
                    ) from e
            time.sleep(0.2)

    def import_images(self, bins: NodeBinaries, recipes: list[imagebuild.Recipe]) -> None:
        """The recipes' images (built when missing) in the node's containerd. One this node imported
        at the same build (its cache key, kept in ``imported/<name>``) and still lists is not read
        again: ``ctr images import`` reads and hashes the whole archive even when nothing is new (the
        MLServer image is 900 MiB, and every real-serving test module asks for it). The pause image
        is pinned (never garbage-collected)."""
        present = set(self.ctr(bins, "images", "ls", "-q").split())
        done = self.root / "imported"
        done.mkdir(parents=True, exist_ok=True)
        for recipe in recipes:
            key, marker = recipe.key(), done / recipe.name
            if recipe.ref in present and marker.is_file() and marker.read_text() == key:
                continue
            self.ctr(bins, "images", "import", str(imagebuild.archive(recipe)))
            marker.write_text(key)
        self.ctr(bins, "images", "label", images.PAUSE.ref, "io.cri-containerd.pinned=pinned")

    def down(self) -> None:
        """Stop everything of the node and remove its state; idempotent."""
        for component in reversed(COMPONENTS):
            pid = self.pid(component)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        _wait_gone([p for c in COMPONENTS if (p := self.pid(c))], 10.0)
        self.cgroup.down()
        self.mount.down()
        netns.node_net_down(self.block, self.index)
        shutil.rmtree(self.root, ignore_errors=True)


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
        time.sleep(0.1)
