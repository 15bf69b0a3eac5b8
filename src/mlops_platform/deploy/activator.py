"""The activator's objects (pure): its ServiceAccount, ClusterRole and binding, Deployment and Service
in ``namespace``, on the operator's own image (``mlops-platform activator``). The operator's
``--activator`` names the Service (``namespace/mlops-activator``).

Part of the install set with a cluster-wide manager (:func:`~mlops_platform.deploy.install.install_objects`,
the chart's ``activator.enabled``): docs/design.md, "Wake from zero without a mesh". One replica:
KEDA reads the held requests from the Service (``/v1/held``), that is from one pod, so a second
replica's held requests would be missed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlops_platform.activator import contract
from mlops_platform.deploy import builders

NAME = "mlops-activator"
_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "activator"}
#: on every object, not in the selector: which install it belongs to (the operator's ``part-of``)
_PART_OF = {"app.kubernetes.io/part-of": "mlops-platform"}
Obj = dict[str, Any]

#: what the activator reads and writes, and why
RULES: tuple[tuple[Obj, str], ...] = (
    (
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        "watches parked Services' slices and its own; writes and deletes the parking slices",
    ),
    ({"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}, "a parked Service's uid and port"),
)


def objects(
    namespace: str,
    image: str,
    *,
    placement: Mapping[str, Any] | None = None,
    hold_seconds: float = 300.0,
) -> list[Obj]:
    """Everything the activator needs, in apply order."""
    meta: Obj = {"name": NAME, "labels": {**_LABELS, **_PART_OF}}
    container = {
        "name": "activator",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlops-platform", "activator"],
        "args": [f"--namespace={namespace}", f"--service={NAME}", f"--hold={hold_seconds:g}"],
        "ports": [
            {"name": contract.PROXY_PORT_NAME, "containerPort": contract.PROXY_PORT},
            {"name": "admin", "containerPort": contract.ADMIN_PORT},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "admin"}},
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": builders.container_security(),
    }
    pod: Obj = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": builders.pod_security(),
        "containers": [container],
        **dict(placement or {}),
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [rule for rule, _ in RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(_LABELS)},
                "template": {"metadata": {"labels": {**_LABELS, **_PART_OF}}, "spec": pod},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta, "namespace": namespace},
            "spec": {
                "selector": dict(_LABELS),
                "ports": [
                    {
                        "name": contract.PROXY_PORT_NAME,
                        "port": contract.PROXY_PORT,
                        "targetPort": contract.PROXY_PORT_NAME,
                    },
                    {"name": "admin", "port": contract.ADMIN_PORT, "targetPort": "admin"},
                ],
            },
        },
    ]
