"""Requests to an InferenceService through the local cluster's Gateway (Traefik,
:mod:`mlops_platform.devcluster.gateway`), as a client of the Gateway sends them: to Traefik's
Service through the API server's service proxy (which passes the Host header on), with the
InferenceService's hostname (its ``status.url``); never to a cluster address directly."""

from __future__ import annotations

import dataclasses
import json
import urllib.parse

from mlops_platform import api, infer
from mlops_platform.devcluster import gateway
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import serving

#: Traefik's Service through the API server's service proxy
PROXY = (
    f"/api/v1/namespaces/{gateway.NAMESPACE}/services/http:{gateway.NAME}:{gateway.SERVICE_PORT_NAME}/proxy"
)


@dataclasses.dataclass(frozen=True)
class Route:
    """Where a client of the Gateway sends requests for one InferenceService."""

    host: str  # the HTTPRoute's hostname, from the InferenceService's status.url
    path: str  # the model's inference path


async def route_of(c: rclient.Client, ns: str, name: str) -> Route:
    live = await c.get(api.RESOURCE, name, ns)
    host = urllib.parse.urlsplit(live["status"]["url"]).hostname
    assert host, live["status"]
    return Route(host, infer.target(live).path)


async def send(c: rclient.Client, route: Route) -> list[int]:
    """One quickstart request through the Gateway; its answer's classes (``infer.InferError`` when
    it failed)."""
    body = json.dumps(serving.v2(serving.QUICKSTART)).encode()
    try:
        answer = await c.request_text(
            PROXY + route.path,
            method="POST",
            content=body,
            accept="application/json",
            headers={"Host": route.host},
            resource="services/proxy",
        )
    except (rclient.ApiError, ConnectionError) as e:
        raise infer.InferError(str(e)[:300]) from None
    return serving.answer(json.loads(answer))
