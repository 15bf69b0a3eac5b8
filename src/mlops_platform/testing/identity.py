"""Run code as a ServiceAccount: bind it to given RBAC objects and get a client with its token.

Tests use this to prove the operator works under exactly the generated roles (the real RBAC
authorizer decides every request), and to remove single rules and watch the failure surface.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

FIELD_MANAGER = "mlops-platform-tests"


async def apply_objects(admin: rclient.Client, objs: list[dict[str, Any]]) -> None:
    await admin.apply_objects(objs, field_manager=FIELD_MANAGER)


async def delete_objects(admin: rclient.Client, objs: list[dict[str, Any]]) -> None:
    for obj in reversed(objs):
        res = await admin.resource_for(obj["apiVersion"], obj["kind"])
        try:
            await admin.delete(res, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        except rclient.ApiError as e:
            if not e.not_found:
                raise


async def token_for(
    admin: rclient.Client, namespace: str, service_account: str, *, seconds: int = 3600
) -> str:
    """A bound token from the TokenRequest API."""
    answer = await admin.request(
        "POST",
        resources.SERVICE_ACCOUNT.path(namespace, service_account, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
        resource="serviceaccounts/token",
    )
    return str(answer["status"]["token"])


def _token_config(admin_kubeconfig: Path, token: str, namespace: str | None = None) -> dict[str, Any]:
    """The kubeconfig (as a dict) of the cluster of ``admin_kubeconfig`` with ``token`` as its only
    credential (the cluster's CA inlined, so that it works from anywhere), its context in ``namespace``
    if given."""
    conf = yaml.safe_load(admin_kubeconfig.read_text())
    current = conf.get("current-context")
    ctx = next(c for c in conf["contexts"] if c["name"] == current)["context"]
    cluster = dict(next(c for c in conf["clusters"] if c["name"] == ctx["cluster"])["cluster"])
    ca = cluster.pop("certificate-authority", None)
    if ca:
        path = Path(ca) if Path(ca).is_absolute() else admin_kubeconfig.parent / ca
        cluster["certificate-authority-data"] = base64.b64encode(path.read_bytes()).decode()
    in_namespace = {"namespace": namespace} if namespace else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", **in_namespace}}],
        "current-context": "sa",
    }


def client_with_token(admin_kubeconfig: Path, token: str) -> rclient.Client:
    """A client for the cluster of ``admin_kubeconfig`` that authenticates with ``token`` only."""
    return rclient.Client.from_kubeconfig_dict(_token_config(admin_kubeconfig, token))


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path, *, namespace: str | None = None) -> Path:
    """Write to ``path`` a kubeconfig file for the cluster of ``admin_kubeconfig`` that authenticates
    with ``token`` only (for a process of its own: the CLI, an operator replica), its context in
    ``namespace`` if given; return ``path``."""
    path.write_text(yaml.safe_dump(_token_config(admin_kubeconfig, token, namespace)))
    return path
