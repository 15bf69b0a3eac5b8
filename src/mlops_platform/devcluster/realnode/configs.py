"""The configuration of a real node's components (pure: paths and addresses in, documents out).

Every setting that keeps the host as it was is here, with its reason:

- kubelet: the host is cgroup v1 (hybrid), so ``failCgroupV1: false`` and ``cgroupDriver: cgroupfs``
  under a private ``cgroupRoot``; ``protectKernelDefaults: false`` because the global sysctls it
  would rewrite (``vm.overcommit_memory``, ``vm.panic_on_oom``, ``kernel.panic``,
  ``kernel.panic_on_oops``) are masked read-only with its values inside the node's mount namespace
  (:data:`KUBELET_SYSCTLS`); no host ``resolv.conf`` is handed to pods; images are never
  garbage-collected (they are imported, not pulled: nothing could pull them again).
- kube-proxy: nftables mode inside the node's network namespace, its conntrack settings all zero
  (``nf_conntrack_max`` and the hash size are global: kube-proxy then leaves them alone).
- containerd: ``restrict_oom_score_adj`` (this VM lacks ``CAP_SYS_RESOURCE``: without it every pod
  sandbox fails in runc, "can't get final child's PID from pipe"); Debian's runc; the pause image is
  the locally built one, pinned; its stream server on the node's loopback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomli_w

from mlops_platform.devcluster.realnode.addressing import Block

#: the global sysctls kubelet's setupKernelTunables writes unless they hold these values
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}
KUBELET_PORT = 10250
REAL_NODE_LABEL = "mlops.platform/real-node"
#: the taint that keeps every pod off the real node unless it tolerates it (pods that must really run)
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
#: what a pod spec says to run on a real node: select it and tolerate its taint
PLACEMENT: dict[str, Any] = {
    "nodeSelector": {REAL_NODE_LABEL: "true"},
    "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
}
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"  # inside the node's mount namespace


def real_node_deployment(
    metadata: dict[str, Any], labels: dict[str, str], pod: dict[str, Any], *, strategy: str | None = None
) -> dict[str, Any]:
    """One replica of ``pod`` on a real node (:data:`PLACEMENT`): a Deployment selecting its pod by
    ``labels``, of ``strategy`` (None: Kubernetes' default, RollingUpdate)."""
    spec: dict[str, Any] = {"replicas": 1}
    if strategy is not None:
        spec["strategy"] = {"type": strategy}
    spec["selector"] = {"matchLabels": labels}
    spec["template"] = {"metadata": {"labels": labels}, "spec": {**PLACEMENT, **pod}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec}


def kubelet_config(
    *, block: Block, ca_file: Path, cgroup_root: str, max_pods: int, eviction_memory: str = "200Mi"
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        # inside the node's namespace: reachable on its fabric address and its own loopback only
        "address": "0.0.0.0",
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True, "cacheTTL": "30s"},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "30s", "cacheUnauthorizedTTL": "10s"},
        },
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "clusterDNS": [block.dns_service_ip],
        "hairpinMode": "hairpin-veth",
        "maxPods": max_pods,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": eviction_memory,
            "nodefs.available": "2%",
            "imagefs.available": "2%",
            "nodefs.inodesFree": "2%",
        },
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "nodeStatusUpdateFrequency": "10s",
        "registerWithTaints": [REAL_NODE_TAINT],
        "staticPodPath": "",
    }


def kube_proxy_config(*, block: Block, node_name: str, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "hostnameOverride": node_name,
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "clusterCIDR": block.pod_cidrs,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    }


def containerd_config(*, cni_bin_dir: Path, cni_conf_dir: Path, runc: Path, pause_image: str) -> str:
    """containerd's ``config.toml`` (version 3): its root and state in the node's private ``/var/lib``
    and ``/run``."""
    cri = "io.containerd.cri.v1.runtime"
    conf: dict[str, Any] = {
        "version": 3,
        "root": "/var/lib/containerd",
        "state": "/run/containerd",
        "grpc": {"address": CONTAINERD_SOCKET},
        "plugins": {
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                "pinned_images": {"sandbox": pause_image},
            },
            cri: {
                "restrict_oom_score_adj": True,
                "containerd": {
                    "default_runtime_name": "runc",
                    "runtimes": {
                        "runc": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"SystemdCgroup": False, "BinaryName": str(runc)},
                        }
                    },
                },
                "cni": {"bin_dirs": [str(cni_bin_dir)], "conf_dir": str(cni_conf_dir)},
            },
            "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1"},
        },
    }
    return tomli_w.dumps(conf)


def cni_conflist(*, block: Block, index: int) -> str:
    """The pod network of node ``index``: a bridge with host-local addresses from its pod CIDR, no
    masquerade (pods' addresses are routed end to end inside the cluster's block), portmap."""
    conf = {
        "cniVersion": "1.0.0",
        "name": "mlops-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": block.pod_cidr(index), "gateway": block.pod_gateway(index)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": "/var/lib/cni/networks",
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2)


def kubeconfig(*, server: str, ca_file: Path, cert_file: Path, key_file: Path, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert_file), "client-key": str(key_file)}}
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
