"""The local cluster's Gateway API implementation: Traefik v3 on the real node.

The operator's ``gateway-api`` traffic router writes HTTPRoutes (``--gateway NAMESPACE/NAME``); this
module gives the local cluster a Gateway that really routes them. Pure builders, then
:func:`install`:

- namespace :data:`NAMESPACE`: the ServiceAccount, Deployment and Service :data:`NAME` (the pinned
  Traefik, :data:`~mlops_platform.devcluster.realnode.images.TRAEFIK`, non-root, on the real node),
  its ``kubernetesGateway`` provider only, the entry point ``web`` on :data:`WEB_PORT` (the Service's
  port :data:`SERVICE_PORT`), ``/ping`` on :data:`PING_PORT`; no update check, no anonymous usage
  report (nothing outside the cluster is ever asked);
- the ClusterRole and ClusterRoleBinding its provider needs (read the Gateway API kinds, Services,
  EndpointSlices, Secrets, ConfigMaps and Namespaces; write the Gateway API kinds' status);
- the GatewayClass :data:`GATEWAY_CLASS` (Traefik's controller name) and the Gateway :data:`GATEWAY`
  (``namespace/name``, what ``--gateway`` takes), one HTTP listener on :data:`WEB_PORT` (Traefik
  binds a listener to the entry point of that port) accepting routes from every namespace;
- the Gateway API CRDs the provider watches besides the four ``dev up`` installs (GRPCRoute and
  BackendTLSPolicy: its informers wait for every kind they watch), from the same pinned module's
  standard channel (``hack/crds``).

:func:`install` builds Traefik when the cache lacks it (``hack/build-control-plane --traefik-only``),
imports its image into the cluster's real nodes and returns once the Deployment is available and
the Gateway is ``Programmed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any

from mlops_platform.devcluster import binaries, cluster, gomod
from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient

NAMESPACE = "mlops-gateway"
NAME = "traefik"
GATEWAY_NAME = "gateway"
#: what ``--gateway`` takes
GATEWAY = f"{NAMESPACE}/{GATEWAY_NAME}"
GATEWAY_CLASS = "mlops-traefik"
#: Traefik's default ``--providers.kubernetesGateway`` controller name
CONTROLLER_NAME = "traefik.io/gateway-controller"
WEB_PORT = 8000
PING_PORT = 8080
SERVICE_PORT = 80
#: the Service port's name (the service proxy path: ``services/http:traefik:web/proxy/...``)
SERVICE_PORT_NAME = "web"
LISTENER = "http"
FIELD_MANAGER = "mlops-gateway"
_UID = 65532
_LABELS = {"app.kubernetes.io/name": "traefik", "app.kubernetes.io/part-of": "mlops-gateway"}
#: the standard-channel CRDs the provider watches that ``devcluster.crds`` does not install
EXTRA_CRDS = ("grpcroutes", "backendtlspolicies")
_GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"
GROUP = "gateway.networking.k8s.io"
GATEWAY_CLASS_RESOURCE = rclient.Resource(GROUP, "v1", "gatewayclasses", "GatewayClass", namespaced=False)
GATEWAY_RESOURCE = rclient.Resource(GROUP, "v1", "gateways", "Gateway")
Obj = dict[str, Any]


def _meta(name: str, namespace: str | None = NAMESPACE) -> Obj:
    meta: Obj = {"name": name, "labels": dict(_LABELS)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def namespace() -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def service_account() -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)}


def cluster_role() -> Obj:
    """What Traefik's ``kubernetesGateway`` provider reads and writes (its documented RBAC, less the
    Pod read its OpenTelemetry attributes need: tracing is off)."""
    kinds = ["gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "tlsroutes"]
    kinds += ["referencegrants", "backendtlspolicies"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(NAMESPACE, None),
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["services", "secrets", "configmaps"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            {"apiGroups": [GROUP], "resources": kinds, "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": [f"{k}/status" for k in kinds], "verbs": ["update"]},
        ],
    }


def cluster_role_binding() -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(NAMESPACE, None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }


def args() -> list[str]:
    """Traefik's static configuration: the Gateway API provider alone, nothing asked outside."""
    return [
        f"--entryPoints.web.address=:{WEB_PORT}",
        f"--entryPoints.traefik.address=:{PING_PORT}",
        "--ping=true",
        "--providers.kubernetesGateway=true",
        # a new configuration (a changed route, a pod's endpoint gone) applies at once, not up to 2 s
        # later (the default): a terminating pod keeps getting requests no longer than that
        "--providers.providersThrottleDuration=0s",
        # the Gateway's status.addresses: the Service's ClusterIP
        f"--providers.kubernetesGateway.statusAddress.service.name={NAME}",
        f"--providers.kubernetesGateway.statusAddress.service.namespace={NAMESPACE}",
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        "--log.level=INFO",
        "--log.noColor=true",
    ]


def deployment() -> Obj:
    pod = {
        "serviceAccountName": NAME,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": _UID, "runAsGroup": _UID},
        "containers": [
            {
                "name": "traefik",
                "image": images.TRAEFIK.ref,
                "imagePullPolicy": "IfNotPresent",
                "args": args(),
                "ports": [
                    {"name": "web", "containerPort": WEB_PORT},
                    {"name": "ping", "containerPort": PING_PORT},
                ],
                "readinessProbe": {"httpGet": {"path": "/ping", "port": PING_PORT}, "periodSeconds": 2},
                "livenessProbe": {"httpGet": {"path": "/ping", "port": PING_PORT}},
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    return configs.real_node_deployment(_meta(NAME), _LABELS, pod)


def service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(NAME),
        "spec": {
            "selector": _LABELS,
            "ports": [{"name": SERVICE_PORT_NAME, "port": SERVICE_PORT, "targetPort": WEB_PORT}],
        },
    }


def gateway_class() -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "GatewayClass",
        "metadata": _meta(GATEWAY_CLASS, None),
        "spec": {"controllerName": CONTROLLER_NAME},
    }


def gateway() -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gateway",
        "metadata": _meta(GATEWAY_NAME),
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "listeners": [
                {
                    "name": LISTENER,
                    "protocol": "HTTP",
                    "port": WEB_PORT,
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }
            ],
        },
    }


def crds() -> list[Obj]:
    """:data:`EXTRA_CRDS` from the pinned Gateway API module's standard channel."""
    out = []
    for plural in EXTRA_CRDS:
        docs = gomod.documents("crds", _GATEWAY_API_MODULE, f"config/crd/standard/{GROUP}_{plural}.yaml")
        out += [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    return out


def _log(msg: str, started: float) -> None:
    print(f"[gateway {time.monotonic() - started:5.1f}s] {msg}", file=sys.stderr, flush=True)


def install(name: str, *, timeout: float = 300.0) -> None:
    """Traefik and the Gateway :data:`GATEWAY` in cluster ``name`` (idempotent)."""
    started = time.monotonic()
    binaries.traefik()
    _log(f"images: {', '.join(cluster.import_images(name, [images.TRAEFIK.name]))}", started)
    asyncio.run(_install(name, timeout, started))


async def _install(name: str, timeout: float, started: float) -> None:
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        await apiextensions.install(c, crds(), field_manager=FIELD_MANAGER, timeout=timeout)
        with contextlib.suppress(rclient.ApiError):  # exists
            await c.create(resources.NAMESPACE, namespace())
        for res, obj in (
            (resources.SERVICE_ACCOUNT, service_account()),
            (resources.CLUSTER_ROLE, cluster_role()),
            (resources.CLUSTER_ROLE_BINDING, cluster_role_binding()),
            (resources.DEPLOYMENT, deployment()),
            (resources.SERVICE, service()),
            (GATEWAY_CLASS_RESOURCE, gateway_class()),
            (GATEWAY_RESOURCE, gateway()),
        ):
            await c.apply(res, obj, field_manager=FIELD_MANAGER)
        _log(f"Traefik: waiting for {NAMESPACE}/{NAME} to be available", started)
        await wait.until(lambda: _available(c), timeout=timeout, what="Traefik available")
        await wait.until(lambda: programmed(c), timeout=timeout, what=f"Gateway {GATEWAY} Programmed")
        _log(f"ready: Gateway {GATEWAY} (GatewayClass {GATEWAY_CLASS})", started)


async def _available(c: rclient.Client) -> bool:
    """Traefik's Deployment rolled out (a changed one too) and available."""
    live = await c.get(resources.DEPLOYMENT, NAME, NAMESPACE)
    st, want = live.get("status") or {}, live["spec"].get("replicas", 1)
    rolled = st.get("observedGeneration", 0) >= objects.generation(live) and (
        st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == want
    )
    return rolled and objects.condition_is(live, "Available")


async def programmed(c: rclient.Client) -> bool:
    """The Gateway is accepted and programmed by Traefik, for its current generation."""
    live = await c.get(GATEWAY_RESOURCE, GATEWAY_NAME, NAMESPACE)
    generation = objects.generation(live)
    return all(
        (cond := objects.condition(live, t)) is not None
        and cond.get("status") == "True"
        and int(cond.get("observedGeneration") or 0) >= generation
        for t in ("Accepted", "Programmed")
    )
