"""Objects against the REAL schemas of a kube-apiserver: server-side apply as the reconciler does,
with strict field validation (an unknown field fails instead of being dropped)."""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport.client import JSON, Client


async def apply_strict(client: Client, kind: kinds.Kind, obj: JSON, version: str, *, dry_run: bool) -> JSON:
    """Server-side apply ``obj`` at ``version`` with strict field validation."""
    res = kind.resource(version)
    obj = {**obj, "apiVersion": res.api_version}
    meta = obj["metadata"]
    params = {
        "fieldManager": labels.MANAGER,
        "force": "true",
        "fieldValidation": "Strict",
        **({"dryRun": "All"} if dry_run else {}),
    }
    return await client.request(
        "PATCH",
        res.path(meta["namespace"], meta["name"]),
        params=params,
        body=obj,
        content_type="application/apply-patch+yaml",
        resource=res.group_resource,
        namespace=meta["namespace"],
        name=meta["name"],
    )
