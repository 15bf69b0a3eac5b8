"""What etcd stores, read directly from the local dev cluster's etcd (its v3 JSON gateway): proof of
the version an object is stored at, which the API server never shows (it converts on every read)."""

from __future__ import annotations

import base64
import json

import httpx2 as httpx

from mlops_platform.devcluster import chaos
from mlops_platform.runtime.transport import client as rclient


def stored_api_versions(cluster_name: str, resource: rclient.Resource, namespace: str) -> dict[str, str]:
    """``name -> apiVersion`` of every ``resource`` object of ``namespace`` as the etcd of the local
    cluster ``cluster_name`` stores it (custom resources are stored as JSON). Blocking."""
    prefix = f"/registry/{resource.group}/{resource.plural}/{namespace}/".encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    body = {"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()}
    with httpx.Client(base_url=chaos.etcd_endpoint(cluster_name), timeout=10) as http:
        answer = http.post("/v3/kv/range", json=body)
        answer.raise_for_status()
    out: dict[str, str] = {}
    for kv in answer.json().get("kvs", []):
        stored = json.loads(base64.b64decode(kv["value"]))
        out[stored["metadata"]["name"]] = stored["apiVersion"]
    return out
