"""One builder per object of the install set: the operator's Namespace (Pod Security
``restricted``), the manager Deployment (its container's flags, probes, security context and, with
cert-manager, the certificate's volume), its PodDisruptionBudget, the metrics and webhook Services,
the CRD (with cert-manager's CA injection) and the cert-manager Issuer and Certificate. Pure: each
returns plain API objects from its arguments and :mod:`~mlops_platform.deploy.defaults`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlops_platform.api import crd
from mlops_platform.deploy import defaults, rbac
from mlops_platform.runtime.objects import Obj
from mlops_platform.webhooks import serve


def namespace_object(name: str) -> Obj:
    """The operator's Namespace, with Pod Security ``restricted`` enforced, audited and warned."""
    labels = rbac.labels("namespace")
    for mode in ("enforce", "audit", "warn"):
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = defaults.POD_SECURITY_VERSION
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def manager_selector(watch: str | None, several: bool) -> dict[str, str]:
    sel = {"app.kubernetes.io/name": defaults.NAME, "app.kubernetes.io/component": "manager"}
    if several and watch is not None:
        sel[defaults.WATCH_NAMESPACE_LABEL] = watch
    return sel


def manager_args(
    namespace: str,
    watch: str | None,
    election_id: str,
    cert_manager: bool,
    image: str,
    activator: str | None = None,
) -> list[str]:
    args = [
        "--leader-elect",
        f"--leader-election-namespace={namespace}",
        f"--leader-election-id={election_id}",
        f"--health-probe-bind-address=0.0.0.0:{defaults.HEALTH_PORT}",
        f"--metrics-bind-address=0.0.0.0:{defaults.METRICS_PORT}",
        "--no-readiness-requires-leadership",
        # every replica converts: the API server reaches them through the webhook Service
        f"--webhook-bind-address=0.0.0.0:{defaults.WEBHOOK_PORT}",
        # a terminating replica takes new connections until the kube-proxies have let it go
        f"--webhook-shutdown-delay={defaults.WEBHOOK_SHUTDOWN_DELAY}",
        f"--webhook-secret={namespace}/{defaults.WEBHOOK_SECRET}",
        *(f"--webhook-dns-name={n}" for n in serve.service_dns_names(namespace, defaults.WEBHOOK_SERVICE)),
        # the model servers' storage initializer runs this very image (python -m mlops_platform.storage)
        f"--storage-initializer-image={image}",
    ]
    if watch is not None:
        args.append(f"--namespace={watch}")
    if activator is not None:
        # a KEDA-scaled model at zero replicas: its Service's traffic to this activator (NS/NAME)
        args.append(f"--activator={activator}")
    return [*args, *cert_manager_args()] if cert_manager else args


def cert_manager_args() -> list[str]:
    return [f"--webhook-cert-dir={defaults.CERT_DIR}"]


def cert_manager_mount() -> Obj:
    return {"name": defaults.CERT_VOLUME, "mountPath": defaults.CERT_DIR, "readOnly": True}


def cert_manager_volume() -> Obj:
    return {"name": defaults.CERT_VOLUME, "secret": {"secretName": defaults.CERT_SECRET}}


def _container(
    args: list[str], image: str, cert_manager: bool, resources: Mapping[str, Mapping[str, str]]
) -> Obj:
    def probe(path: str, period: int, failures: int) -> Obj:
        return {
            "httpGet": {"path": path, "port": "health"},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": failures,
        }

    return {
        "name": "manager",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlops-platform", "run"],
        "args": args,
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [
            {"name": "metrics", "containerPort": defaults.METRICS_PORT, "protocol": "TCP"},
            {"name": "health", "containerPort": defaults.HEALTH_PORT, "protocol": "TCP"},
            {"name": "webhook", "containerPort": defaults.WEBHOOK_PORT, "protocol": "TCP"},
        ],
        "startupProbe": probe("/healthz", 2, 30),
        "livenessProbe": probe("/healthz", 20, 3),
        "readinessProbe": probe(defaults.READINESS_PATH, 10, 3),
        "resources": {kind: dict(quantities) for kind, quantities in resources.items()},
        "securityContext": container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            *([cert_manager_mount()] if cert_manager else []),
        ],
    }


#: the manager pods' default ``nodeSelector`` (the chart's value ``nodeSelector``)
NODE_SELECTOR: Mapping[str, str] = {"kubernetes.io/os": "linux"}


def pod_security() -> Obj:
    """A pod's security context under Pod Security ``restricted`` (the install namespace enforces it)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": defaults.UID,
        "runAsGroup": defaults.UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> Obj:
    """A container's security context under Pod Security ``restricted``, its root file system read-only."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": defaults.UID,
        "runAsGroup": defaults.UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def placement(node_selector: Mapping[str, str], tolerations: Sequence[Mapping[str, object]]) -> Obj:
    """The pod spec's ``nodeSelector`` and ``tolerations`` fields; an empty one left out."""
    return {
        **({"nodeSelector": dict(node_selector)} if node_selector else {}),
        **({"tolerations": [dict(t) for t in tolerations]} if tolerations else {}),
    }


def pod_template(
    *,
    service_account: str,
    selector: dict[str, str],
    container: Obj,
    cert_manager: bool = False,
    node_selector: Mapping[str, str] = NODE_SELECTOR,
    tolerations: Sequence[Mapping[str, object]] = (),
) -> Obj:
    """The manager's pod template (restricted profile, spread across nodes and zones); an empty
    ``node_selector`` or ``tolerations`` leaves the field out (as the chart does)."""
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    return {
        "metadata": {"labels": {**rbac.labels("manager"), **selector}},
        "spec": {
            "serviceAccountName": service_account,
            "automountServiceAccountToken": True,
            "enableServiceLinks": False,
            "securityContext": pod_security(),
            "containers": [container],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                *([cert_manager_volume()] if cert_manager else []),
            ],
            "terminationGracePeriodSeconds": defaults.TERMINATION_GRACE_SECONDS,
            **placement(node_selector, tolerations),
            "topologySpreadConstraints": spread,
        },
    }


def deployment(
    *,
    name: str,
    namespace: str,
    watch: str | None,
    several: bool,
    image: str,
    replicas: int,
    cert_manager: bool,
    resources: Mapping[str, Mapping[str, str]],
    node_selector: Mapping[str, str] = NODE_SELECTOR,
    tolerations: Sequence[Mapping[str, object]] = (),
    activator: str | None = None,
) -> Obj:
    """One manager Deployment; ``maxSurge: 0`` keeps at most ``replicas`` pods (see docs/install.md).
    ``activator``: the activator's Service (``NS/NAME``) the manager parks models at zero behind."""
    selector = manager_selector(watch, several)
    election_id = f"{defaults.LEADER_ELECTION_ID}-{watch}" if several else defaults.LEADER_ELECTION_ID
    args = manager_args(namespace, watch, election_id, cert_manager, image, activator)
    container = _container(args, image, cert_manager, resources)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {**rbac.labels("manager"), **selector}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": pod_template(
                service_account=name,
                selector=selector,
                container=container,
                cert_manager=cert_manager,
                node_selector=node_selector,
                tolerations=tolerations,
            ),
        },
    }


def pod_disruption_budget(*, name: str, namespace: str, selector: dict[str, str]) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": rbac.labels("manager")},
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def metrics_service(namespace: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{defaults.NAME}-metrics",
            "namespace": namespace,
            "labels": rbac.labels("metrics"),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": manager_selector(None, False),
            "ports": [
                {"name": "metrics", "port": defaults.METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
            ],
        },
    }


def webhook_service(namespace: str) -> Obj:
    """The Service the CRD's conversion webhook names: every manager pod, leader or not, behind it."""
    port = crd.WEBHOOK_SERVICE[2]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": defaults.WEBHOOK_SERVICE,
            "namespace": namespace,
            "labels": rbac.labels("webhook"),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": manager_selector(None, False),
            "ports": [{"name": "webhook", "port": port, "targetPort": "webhook", "protocol": "TCP"}],
        },
    }


def crd_object(namespace: str, *, cert_manager: bool = False) -> Obj:
    """The CRD, its conversion webhook at the Service in ``namespace``; with cert-manager, annotated
    for its CA injector (the operator then injects nothing)."""
    obj = crd.crd_manifest()
    obj["spec"]["conversion"] = crd.conversion(service=(namespace, *crd.WEBHOOK_SERVICE[1:]))
    if cert_manager:
        obj["metadata"]["annotations"] = ca_injection_annotation(namespace)
    return obj


def ca_injection_annotation(namespace: str) -> dict[str, str]:
    return {defaults.CA_INJECTION_ANNOTATION: f"{namespace}/{defaults.CERTIFICATE}"}


def cert_manager_objects(namespace: str) -> list[Obj]:
    """A self-signed Issuer and the webhook's serving Certificate (the Service's DNS names)."""
    meta = {"namespace": namespace, "labels": rbac.labels("webhook")}
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": defaults.ISSUER, **meta},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": defaults.CERTIFICATE, **meta},
            "spec": {
                "dnsNames": list(serve.service_dns_names(namespace, defaults.WEBHOOK_SERVICE)),
                "issuerRef": {"kind": "Issuer", "name": defaults.ISSUER},
                "secretName": defaults.CERT_SECRET,
                "privateKey": {"rotationPolicy": "Always"},
            },
        },
    ]
