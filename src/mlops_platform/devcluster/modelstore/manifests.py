"""The local cluster's model store as Kubernetes objects (pure builders).

- namespace :data:`NAMESPACE`: the Secret :data:`ROOT_SECRET` (MinIO's root credentials, made once
  per cluster), the Deployment and Service ``minio`` (port 9000) on the real node, its data in the
  node's ``/var/lib/mlops-model-store`` (a hostPath: the store outlives a restarted MinIO pod), the
  bucket :data:`BUCKET` created by an init container before MinIO starts;
- the seeding Job :func:`seed_job`: ``train.py`` (a ConfigMap) in the MLServer image writes the demo
  models, then ``upload.py`` in the operator's image puts them into the bucket; its name carries a
  digest of what it writes, so a changed script seeds again;
- :func:`client_secret`: the Secret an InferenceService's namespace holds to read the store
  (``spec.predictor.model.storage.secretName``, ``docs/model-delivery.md``).
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from typing import Any

from mlops_platform.devcluster.realnode import configs, images

NAMESPACE = "mlops-models"
SERVICE = "minio"
PORT = 9000
BUCKET = "models"
ENDPOINT = f"http://{SERVICE}.{NAMESPACE}.svc:{PORT}"
ROOT_SECRET = "model-store-root"
#: the Secret name users' namespaces hold (``storage.secretName``)
CLIENT_SECRET = "model-store"
SCRIPTS = "demo-models-train"
DATA_DIR = "/var/lib/mlops-model-store"
_UID = 1000
_LABELS = {"app.kubernetes.io/name": "minio", "app.kubernetes.io/part-of": "mlops-model-store"}
Obj = dict[str, Any]


def train_script() -> str:
    return resources.files(__package__).joinpath("train.py").read_text()


def _meta(name: str, namespace: str = NAMESPACE, labels: dict[str, str] | None = None) -> Obj:
    return {"name": name, "namespace": namespace, "labels": labels or dict(_LABELS)}


def namespace() -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def root_secret(user: str, password: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ROOT_SECRET),
        "stringData": {"MINIO_ROOT_USER": user, "MINIO_ROOT_PASSWORD": password},
    }


def client_secret(root: Obj, namespace: str) -> Obj:
    """The store's credentials as the storage initializer reads them, for ``namespace``."""
    data = {k: base64.b64decode(v).decode() for k, v in root["data"].items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(CLIENT_SECRET, namespace),
        "stringData": {
            "AWS_ACCESS_KEY_ID": data["MINIO_ROOT_USER"],
            "AWS_SECRET_ACCESS_KEY": data["MINIO_ROOT_PASSWORD"],
        },
    }


def _root_env() -> list[Obj]:
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": ROOT_SECRET, "key": name}}}
        for name in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD")
    ]


def deployment() -> Obj:
    make_bucket = f"import os; os.makedirs('/data/{BUCKET}', exist_ok=True); os.chown('/data/{BUCKET}', {_UID}, {_UID}); os.chown('/data', {_UID}, {_UID})"  # noqa: E501
    pod = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "initContainers": [
            {
                "name": "bucket",
                "image": images.PYTHON.ref,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", make_bucket],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "containers": [
            {
                "name": "minio",
                "image": images.MINIO.ref,
                "imagePullPolicy": "IfNotPresent",
                "args": ["server", "/data", "--address", f":{PORT}"],
                "env": [*_root_env(), {"name": "MINIO_BROWSER", "value": "off"}],
                "ports": [{"name": "s3", "containerPort": PORT}],
                "readinessProbe": {
                    "httpGet": {"path": "/minio/health/ready", "port": PORT},
                    "periodSeconds": 2,
                },
                "livenessProbe": {"httpGet": {"path": "/minio/health/live", "port": PORT}},
                "securityContext": {"runAsUser": _UID, "runAsGroup": _UID, "allowPrivilegeEscalation": False},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "hostPath": {"path": DATA_DIR, "type": "DirectoryOrCreate"}}],
    }
    # Recreate: one MinIO on the data directory at a time
    return configs.real_node_deployment(_meta(SERVICE), _LABELS, pod, strategy="Recreate")


def service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(SERVICE),
        "spec": {"selector": _LABELS, "ports": [{"name": "s3", "port": PORT, "targetPort": PORT}]},
    }


def scripts() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(SCRIPTS),
        "data": {"train.py": train_script()},
    }


def seed_job_name() -> str:
    digest = hashlib.sha256(train_script().encode() + images.MLSERVER.ref.encode()).hexdigest()[:10]
    return f"demo-models-{digest}"


_SEED_LABELS = {"app.kubernetes.io/name": "demo-models", "app.kubernetes.io/part-of": "mlops-model-store"}


def seed_job() -> Obj:
    """The Job that trains the demo models and uploads them (:func:`seed_job_name`)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(seed_job_name(), labels=_SEED_LABELS),
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": _SEED_LABELS}, "spec": _seed_pod()}},
    }


def upload_container(directory: str, mounts: list[Obj]) -> Obj:
    """The container that puts every file under ``directory`` into the bucket (:mod:`.upload`, in the
    operator's image, with the store's root credentials): the seed Job's, and the benchmarks'."""
    return {
        "name": "upload",
        "image": images.OPERATOR.ref,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python3",
            "-m",
            "mlops_platform.devcluster.modelstore.upload",
            directory,
            "--endpoint",
            f"http://{SERVICE}:{PORT}",
            "--bucket",
            BUCKET,
        ],
        "env": [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": ROOT_SECRET, "key": root}}}
            for key, root in (
                ("AWS_ACCESS_KEY_ID", "MINIO_ROOT_USER"),
                ("AWS_SECRET_ACCESS_KEY", "MINIO_ROOT_PASSWORD"),
            )
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": mounts,
    }


def _seed_pod() -> Obj:
    mounts = [{"name": "models", "mountPath": "/models"}]
    security = {"allowPrivilegeEscalation": False}
    pod = {
        **configs.PLACEMENT,
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": _UID, "runAsGroup": _UID, "fsGroup": _UID, "runAsNonRoot": True},
        "initContainers": [
            {
                "name": "train",
                "image": images.MLSERVER.ref,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "/scripts/train.py", "/models"],
                "env": [{"name": "HOME", "value": "/tmp"}],
                "securityContext": security,
                "volumeMounts": [*mounts, {"name": "scripts", "mountPath": "/scripts"}],
            }
        ],
        "containers": [upload_container("/models", mounts)],
        "volumes": [
            {"name": "models", "emptyDir": {}},
            {"name": "scripts", "configMap": {"name": SCRIPTS}},
        ],
    }
    return pod
