"""The configuration the local cluster is created from: kwokctl's KwokctlConfiguration
(:func:`kwokctl_config`: our pinned binaries on kwokctl's binary runtime, bound to 127.0.0.1) and
kube-apiserver's audit policy (:data:`AUDIT_POLICY`). Pure: nothing is started or written here;
:mod:`~mlops_platform.devcluster.cluster` writes both next to the cluster and creates it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlops_platform.devcluster import binaries, gomod, nodes
from mlops_platform.devcluster.realnode import addressing

SERVICE_CIDR = "10.96.0.0/16"
# The HorizontalPodAutoscaler controller's timing on the local cluster with metrics-server
# (kube-controller-manager flags; upstream defaults 15s and 5m): a sync every 5 s, and a scale-down
# once the recommendation has been lower for 15 s, so scaling is seen in seconds (tests, the demo).
HPA_SYNC_PERIOD = "5s"
HPA_DOWNSCALE_STABILIZATION = "15s"
# metrics-server keeps one sample per pod per resolution (kwokctl's default; its minimum is 10 s)
METRIC_RESOLUTION = "15s"
# kwok kinds served as CRDs (objects changed at run time) rather than read once from its config
KWOK_CRDS = ("Stage", "Metric", "ClusterResourceUsage", "ResourceUsage")
# upstream's release kustomization (components.yaml): kwokctl keeps its APIService and Service
METRICS_SERVER_MANIFESTS = "manifests/overlays/release"
# Kubernetes' built-in storage version migration (storagemigration.k8s.io/v1beta1, beta since 1.35 and
# off by default in 1.36): kube-apiserver serves StorageVersionMigration only with the feature gate
# StorageVersionMigrator AND the API version enabled (beta APIs are off by default), and
# kube-controller-manager runs its storage-version-migrator-controller (in the default controller set)
# only with the gate. kwokctl hands the gates to kube-apiserver, kube-controller-manager and
# kube-scheduler (which has nothing behind this one). Set when the cluster is created; what it is for:
# `mlops-platform migrate-storage` (docs/storage-migration.md).
FEATURE_GATES = "StorageVersionMigrator=true"
RUNTIME_CONFIG = "storagemigration.k8s.io/v1beta1=true"
# kube-apiserver's audit log (``cluster.audit_logs(name)``): the writes of the operator's kinds, at Metadata
# level (who, user agent, verb, object, received and completed times; no bodies), one entry per
# request (``ResponseComplete``), so a test can prove from the server's side who wrote what when
# (tests/reliability/test_leader_failover.py: two leaders never write at once). The status writes of
# the built-in controllers (deployments/status, ...), pods, nodes, Events and the node and
# control-plane Leases are not logged. Rotated at 100 MB (lumberjack's default size), one old file kept.
# Every request (reads too) of the ServiceAccounts of :data:`IN_CLUSTER_NAMESPACE`, where the e2e
# installs the operator in the cluster (tests/e2e/test_install_in_cluster.py: no 403 for it).
_WRITES = ["create", "update", "patch", "delete", "deletecollection"]
IN_CLUSTER_NAMESPACE = "mlops-incluster"
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "None",
            "namespaces": ["kube-node-lease", "kube-system"],
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        },
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{IN_CLUSTER_NAMESPACE}"]},
        {
            "level": "Metadata",
            "verbs": _WRITES,
            "resources": [
                {"group": "mlops.platform"},  # every resource and subresource (status)
                {"group": "coordination.k8s.io", "resources": ["leases"]},
                {"group": "apps", "resources": ["deployments"]},  # not deployments/status, /scale
                {"group": "", "resources": ["services"]},
                {"group": "autoscaling", "resources": ["horizontalpodautoscalers"]},
                {"group": "networking.k8s.io", "resources": ["networkpolicies"]},
                {"group": "monitoring.coreos.com", "resources": ["prometheusrules", "servicemonitors"]},
                {"group": "gateway.networking.k8s.io", "resources": ["httproutes"]},
                {"group": "networking.istio.io", "resources": ["virtualservices"]},
                {"group": "keda.sh", "resources": ["scaledobjects"]},
            ],
        },
        {"level": "None"},
    ],
}
AUDIT_LOG_MAX_BACKUPS = "1"


def kwokctl_config(
    bins: binaries.Binaries,
    *,
    unthrottled: bool = False,
    metrics_server: bool = True,
    metrics_server_manifests: str | None = None,
    audit_policy: str | None = None,
    block: addressing.Block | None = None,
    pki_dir: Path | None = None,
) -> str:
    """The KwokctlConfiguration for our binary-runtime cluster (multi-document YAML).

    ``unthrottled``: kwokctl's ``disableQPSLimits``: kube-controller-manager's and kube-scheduler's
    clients without QPS limits (defaults 20 and 50 requests/s) and kube-apiserver without in-flight
    limits or priority and fairness, so that a scale benchmark measures the operator, not a
    throttled controller-manager.

    ``metrics_server``: kwokctl runs our metrics-server, registered as the ``metrics.k8s.io`` APIService
    through kwokctl's rewrite of upstream's release manifests (``metrics_server_manifests``: a
    kustomize directory, by default the pinned module's ``manifests/overlays/release``), and the HPA
    controller runs with the short timing above; without it the HPA timing is upstream's (a cluster
    as before metrics-server came, e.g. for benchmarks compared with earlier figures).

    ``audit_policy``: the file holding :data:`AUDIT_POLICY` (kwokctl copies it into the cluster and
    points kube-apiserver's ``--audit-policy-file`` and ``--audit-log-path`` at it and its log).

    ``block``: the cluster's address block (:mod:`~mlops_platform.devcluster.realnode.addressing`):
    its Service range, and what real nodes need of the API server: it advertises the fabric's
    address (the ``kubernetes`` Service's endpoint, where pods reach it), its serving certificate
    names that address and the ``kubernetes`` Service IP, it reaches kubelets with the admin client
    certificate (``pki_dir``, kwokctl's) at their ``InternalIP`` only (never a node name, which it
    would resolve through the machine's DNS), and kwok manages only the fake nodes (annotated
    ``kwok.x-k8s.io/node=fake``), never a real node or its pods, gives them the InternalIP
    127.0.0.1 (where it serves their kubelet API) and their pods addresses inside the block.

    Always: the built-in storage version migration API and its controller (``FEATURE_GATES``,
    ``RUNTIME_CONFIG``)."""
    v = binaries.versions()
    conf = _base(bins, v, unthrottled)
    if block is not None and pki_dir is not None:
        _add_real_nodes(conf, block, pki_dir)
    if audit_policy is not None:
        conf["options"]["kubeAuditPolicy"] = audit_policy
        conf["componentsPatches"][0]["extraArgs"].append(
            {"key": "audit-log-maxbackup", "value": AUDIT_LOG_MAX_BACKUPS}
        )
    if metrics_server:
        _add_metrics_server(conf, bins, v, metrics_server_manifests)
    return yaml.safe_dump(conf, sort_keys=False)


def _base(bins: binaries.Binaries, v: dict[str, str], unthrottled: bool) -> dict[str, Any]:
    """The configuration of every cluster: the binaries, RBAC and admission, kwok's CRDs, the
    storage version migration API, and kube-apiserver's Service range."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "securePort": True,
            "kubeAuthorization": True,
            "kubeAdmission": True,
            "kubeVersion": v["KUBE_VERSION"],
            "etcdVersion": v["ETCD_VERSION"].lstrip("v"),
            "kwokVersion": v["KWOK_VERSION"],
            "enableCRDs": list(KWOK_CRDS),
            "disableQPSLimits": unthrottled,
            "kubeFeatureGates": FEATURE_GATES,
            "kubeRuntimeConfig": RUNTIME_CONFIG,
            "etcdBinary": str(bins["etcd"]),
            "kubeApiserverBinary": str(bins["kube-apiserver"]),
            "kubeControllerManagerBinary": str(bins["kube-controller-manager"]),
            "kubeSchedulerBinary": str(bins["kube-scheduler"]),
            "kwokControllerBinary": str(bins["kwok"]),
            "kubectlBinary": str(bins["kubectl"]),
        },
        "componentsPatches": [
            # kube-apiserver's default Service range is a /24 (253 Services): too small for scale tests
            {
                "name": "kube-apiserver",
                "extraArgs": [{"key": "service-cluster-ip-range", "value": SERVICE_CIDR}],
            },
        ],
    }


def _add_real_nodes(conf: dict[str, Any], block: addressing.Block, pki_dir: Path) -> None:
    """What real nodes need of the API server and kwok (see :func:`kwokctl_config`'s ``block``)."""
    conf["componentsPatches"][0]["extraArgs"] = [
        {"key": "service-cluster-ip-range", "value": block.service_cidr},
        {"key": "advertise-address", "value": block.api_address},
        {"key": "kubelet-client-certificate", "value": str(pki_dir / "admin.crt")},
        {"key": "kubelet-client-key", "value": str(pki_dir / "admin.key")},
        {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
    ]
    conf["options"]["kubeApiserverCertSANs"] = [block.api_address, block.kubernetes_service_ip]
    # a real kubelet's outage is seen as upstream sees it: kwokctl multiplies the node controller's
    # grace period (40 s) and monitor period (5 s), and kwok's node lease, by 5 by default (cheaper
    # heartbeats for thousands of fake nodes): a stopped kubelet's node went NotReady after 200 s
    conf["options"]["heartbeatFactor"] = 1
    conf["componentsPatches"].append(
        {
            "name": "kwok-controller",
            "extraArgs": [
                {"key": "manage-all-nodes", "value": "false", "override": True},
                {"key": "manage-nodes-with-annotation-selector", "value": nodes.FAKE_NODE_SELECTOR},
                # the fake nodes' InternalIP is where kwok serves their kubelet API (the API
                # server reaches kubelets by InternalIP only); their pods' addresses are in the block
                {"key": "node-ip", "value": "127.0.0.1", "override": True},
                {"key": "cidr", "value": block.kwok_cidr},
            ],
        }
    )


def _add_metrics_server(
    conf: dict[str, Any], bins: binaries.Binaries, v: dict[str, str], manifests: str | None
) -> None:
    """kwokctl runs our metrics-server from upstream's release manifests (default: the pinned
    module's), and the HPA controller runs with the short timing (:data:`HPA_SYNC_PERIOD`)."""
    if manifests is None:
        manifests = str(
            gomod.module_dir("metrics-server", "sigs.k8s.io/metrics-server") / METRICS_SERVER_MANIFESTS
        )
    conf["options"] |= {
        "enable": [binaries.METRICS_SERVER],
        "metricsServerBinary": str(bins[binaries.METRICS_SERVER]),
        "metricsServerVersion": v["METRICS_SERVER_VERSION"].lstrip("v"),
        "metricsServerManifests": [manifests],
    }
    conf["componentsPatches"] += [
        {
            "name": binaries.METRICS_SERVER,
            "extraArgs": [{"key": "metric-resolution", "value": METRIC_RESOLUTION, "override": True}],
        },
        {
            "name": "kube-controller-manager",
            "extraArgs": [
                {"key": "horizontal-pod-autoscaler-sync-period", "value": HPA_SYNC_PERIOD},
                {
                    "key": "horizontal-pod-autoscaler-downscale-stabilization",
                    "value": HPA_DOWNSCALE_STABILIZATION,
                },
            ],
        },
    ]
