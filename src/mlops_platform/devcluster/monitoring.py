"""The local cluster's monitoring stack: the Prometheus Operator, Prometheus and kube-state-metrics
on the real node, as a user's cluster runs them.

What reads the operator's children: the Prometheus Operator turns every ServiceMonitor and
PrometheusRule into Prometheus' scrape configuration and rule files (its config reloader reloads
Prometheus), exactly as in production; kube-state-metrics exports the Deployments' replica counts
the replica alerts read. Pure builders, then :func:`install`:

- the Prometheus Operator's CRDs (all ten, from the pinned module: it watches each kind) and, in
  namespace :data:`NAMESPACE`, its ServiceAccount, ClusterRole, ClusterRoleBinding and Deployment,
  and kube-state-metrics', all from upstream's example manifests, with the local images (no
  registry), the real node's placement and the namespace changed;
- the Prometheus :data:`PROMETHEUS` (one replica of the pinned promtool's release) selecting every
  ServiceMonitor and PrometheusRule of every namespace (what the operator's default
  ``monitoring_labels``, none, expects), evaluating rules every :data:`EVALUATION_INTERVAL`; the
  operator gives it the Service :data:`SERVICE` (``prometheus-operated``), the address the
  operator's KEDA triggers and ``why`` use by default (:data:`URL`);
- a ServiceMonitor for kube-state-metrics (``honorLabels``: its series keep their ``namespace`` and
  ``deployment``, the Deployment's, not the exporter's).

No Alertmanager: the alerts' state is Prometheus' own (``/api/v1/alerts``), what the e2e and ``why``
read. :func:`install` builds the binaries when the cache lacks them (``hack/build-monitoring``),
imports their images into the cluster's real nodes and returns once Prometheus is available.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from typing import Any

from mlops_platform.devcluster import binaries, cluster, gomod
from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient

NAMESPACE = "monitoring"
#: the Prometheus object; its pod is ``prometheus-<name>-0``
PROMETHEUS = "mlops"
#: the governing Service the Prometheus Operator makes for every Prometheus of the namespace
SERVICE = "prometheus-operated"
PORT = 9090
#: the in-cluster URL (``--keda-prometheus-url``'s default)
URL = f"http://{SERVICE}.{NAMESPACE}.svc:{PORT}"
EVALUATION_INTERVAL = "15s"
KSM_SCRAPE_INTERVAL = "15s"
FIELD_MANAGER = "mlops-monitoring"
_PO_MODULE = "github.com/prometheus-operator/prometheus-operator"
_KSM_MODULE = "k8s.io/kube-state-metrics/v2"
_PROMETHEUS_UID = 65534
PROMETHEUS_RESOURCE = rclient.Resource("monitoring.coreos.com", "v1", "prometheuses", "Prometheus")
SERVICE_MONITOR_RESOURCE = rclient.Resource(
    "monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"
)
Obj = dict[str, Any]


def _docs(pin_dir: str, module: str, *rel: str) -> list[Obj]:
    return [d for r in rel for d in gomod.documents(pin_dir, module, r)]


def crds() -> list[Obj]:
    """Every CRD of the pinned Prometheus Operator (``hack/crds``)."""
    root = gomod.module_dir("crds", _PO_MODULE)
    files = sorted(root.glob("example/prometheus-operator-crd/monitoring.coreos.com_*.yaml"))
    docs = _docs("crds", _PO_MODULE, *(str(f.relative_to(root)) for f in files))
    return [d for d in docs if d["kind"] == "CustomResourceDefinition"]


def _localized(objs: list[Obj], image: str, args: list[str] | None = None) -> list[Obj]:
    """Upstream's objects in :data:`NAMESPACE`: the namespaced ones moved there, the bindings' subjects
    too, the Deployment's only container on ``image`` (with ``args`` if given) on the real node."""
    out = []
    for obj in map(copy.deepcopy, objs):
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"]["namespace"] = NAMESPACE
        for subject in obj.get("subjects", []):
            subject["namespace"] = NAMESPACE
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            pod.pop("nodeSelector", None)
            pod.update(copy.deepcopy(configs.PLACEMENT))
            (container,) = pod["containers"]
            container["image"] = image
            container["imagePullPolicy"] = "IfNotPresent"
            if args is not None:
                container["args"] = args
        out.append(obj)
    return out


def operator_objects() -> list[Obj]:
    """The Prometheus Operator (upstream's ``example/rbac/prometheus-operator``, no Service): the local
    config reloader image, no kubelet Service (nothing scrapes kubelets here), JSON logs."""
    parts = ("service-account", "cluster-role", "cluster-role-binding", "deployment")
    rel = [f"example/rbac/prometheus-operator/prometheus-operator-{f}.yaml" for f in parts]
    args = [
        f"--prometheus-config-reloader={images.CONFIG_RELOADER.ref}",
        "--watch-referenced-objects-in-all-namespaces=true",
        "--disable-unmanaged-prometheus-configuration=true",
        "--log-format=json",
    ]
    return _localized(_docs("crds", _PO_MODULE, *rel), images.PROMETHEUS_OPERATOR.ref, args)


def prometheus_objects() -> list[Obj]:
    """Prometheus' ServiceAccount and RBAC (upstream's ``example/rbac/prometheus``) and the Prometheus
    :data:`PROMETHEUS`."""
    parts = ("service-account", "cluster-role", "cluster-role-binding")
    rel = [f"example/rbac/prometheus/prometheus-{f}.yaml" for f in parts]
    rbac = _localized(_docs("crds", _PO_MODULE, *rel), images.PROMETHEUS.ref)
    everything: Obj = {}
    spec: Obj = {
        "image": images.PROMETHEUS.ref,
        "version": binaries.versions()["PROMTOOL_VERSION"],
        "replicas": 1,
        "serviceAccountName": "prometheus",
        "serviceMonitorSelector": everything,
        "serviceMonitorNamespaceSelector": everything,
        "ruleSelector": everything,
        "ruleNamespaceSelector": everything,
        "evaluationInterval": EVALUATION_INTERVAL,
        "retention": "6h",
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": _PROMETHEUS_UID,
            "runAsGroup": _PROMETHEUS_UID,
            "fsGroup": _PROMETHEUS_UID,
        },
        **copy.deepcopy(configs.PLACEMENT),
    }
    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": PROMETHEUS, "namespace": NAMESPACE},
        "spec": spec,
    }
    return [*rbac, prometheus]


def kube_state_metrics_objects() -> list[Obj]:
    """kube-state-metrics (upstream's ``examples/standard``) exporting the kinds the alerts and ``why``
    read, and its ServiceMonitor."""
    parts = ("service-account", "cluster-role", "cluster-role-binding", "deployment", "service")
    rel = [f"examples/standard/{f}.yaml" for f in parts]
    args = ["--resources=deployments,replicasets,pods,horizontalpodautoscalers"]
    objs = _localized(_docs("kube-state-metrics", _KSM_MODULE, *rel), images.KUBE_STATE_METRICS.ref, args)
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "kube-state-metrics", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "kube-state-metrics"}},
            "endpoints": [{"port": "http-metrics", "interval": KSM_SCRAPE_INTERVAL, "honorLabels": True}],
        },
    }
    return [*objs, monitor]


def objects_to_apply() -> list[Obj]:
    """Everything :func:`install` applies after the CRDs, in order."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return [ns, *operator_objects(), *kube_state_metrics_objects(), *prometheus_objects()]


def _log(msg: str, started: float) -> None:
    print(f"[monitoring {time.monotonic() - started:5.1f}s] {msg}", file=sys.stderr, flush=True)


def install(name: str, *, timeout: float = 300.0) -> None:
    """The monitoring stack in cluster ``name`` (idempotent)."""
    started = time.monotonic()
    binaries.monitoring()
    imported = cluster.import_images(name, [r.name for r in images.MONITORING])
    _log(f"images: {', '.join(imported)}", started)
    asyncio.run(_install(name, timeout, started))


async def _install(name: str, timeout: float, started: float) -> None:
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        await apiextensions.install(c, crds(), field_manager=FIELD_MANAGER, timeout=timeout)
        c.forget_discovery()
        await c.apply_objects(objects_to_apply(), field_manager=FIELD_MANAGER)
        _log(f"waiting for Prometheus {NAMESPACE}/{PROMETHEUS} and kube-state-metrics", started)
        await wait.until(lambda: available(c), timeout=timeout, what=f"Prometheus {PROMETHEUS} available")
        _log(f"ready: Prometheus at {URL}", started)


async def available(c: rclient.Client) -> bool:
    """The three Deployments' and the Prometheus' pods are available."""
    for deployment in ("prometheus-operator", "kube-state-metrics"):
        live = await c.get(resources.DEPLOYMENT, deployment, NAMESPACE)
        if not objects.condition_is(live, "Available"):
            return False
    try:
        prometheus = await c.get(PROMETHEUS_RESOURCE, PROMETHEUS, NAMESPACE)
    except rclient.ApiError:
        return False
    return objects.condition_is(prometheus, "Available")
