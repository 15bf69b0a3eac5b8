"""``mlops-platform infer NAME``: one inference request to an InferenceService, through the API
server (like ``seldon model infer``), so it works wherever ``kubectl`` does: no port-forward, no
ingress, no route from the client to the cluster's addresses.

Contract:
- the request goes to the Service ``<name>-predictor``, port ``http``, through the API server's
  service proxy (``/api/v1/namespaces/NS/services/http:<name>-predictor:http/proxy/<path>``): the
  API server picks a ready endpoint; under the replicas router that may be the canary's;
- the path is the runtime's protocol (:data:`PATHS`): the Open Inference Protocol v2
  (``/v2/models/<model>/infer``) for MLServer, Triton and any runtime the client does not know;
  TorchServe's inference API (``/predictions/<model>``); ``--path`` says another; the model's name is
  the InferenceService's (what the storage initializer names it), ``--model`` another;
- a predictor Service parked behind the activator (scaled to zero by KEDA: ``activator.contract``)
  is reached through the activator's Service instead, with the parked Service's name as Host: the
  API server's service proxy only proxies to pods of the Service's own namespace, so the parked
  Service itself has no endpoint it would use; the activator holds the request until the model is
  awake (``timeout``);
- :func:`infer` returns the server's answer (any JSON decoded, else its text); a failure is
  :class:`InferError` with the server's own message (its status and body) or the API server's (no
  ready endpoint, no such object).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mlops_platform import api
from mlops_platform.activator import contract
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

V2 = "/v2/models/{model}/infer"
#: the inference path of each built-in runtime (``{model}``: the model's name)
PATHS = {"seldon": V2, "triton": V2, "torchserve": "/predictions/{model}"}


class InferError(Exception):
    """The request failed: the message is the server's (or the API server's) own."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one request goes: the service proxy path of the InferenceService's predictor Service."""

    namespace: str
    service: str
    path: str
    #: the activator's Service ``NAMESPACE/NAME`` while the Service is parked behind it, else None
    activator: str | None = None

    @property
    def proxy_path(self) -> str:
        if self.activator:
            ns, name = self.activator.split("/", 1)
            port = contract.PROXY_PORT_NAME
            return f"/api/v1/namespaces/{ns}/services/http:{name}:{port}/proxy{self.path}"
        return f"/api/v1/namespaces/{self.namespace}/services/http:{self.service}:http/proxy{self.path}"

    @property
    def headers(self) -> dict[str, str]:
        """The Host the activator tells the parked Service by (none otherwise)."""
        return {"Host": f"{self.service}.{self.namespace}.svc"} if self.activator else {}


def target(isvc: dict[str, Any], *, model: str | None = None, path: str | None = None) -> Target:
    """The request's target for a live InferenceService (any served version)."""
    decoded = api.decode(isvc)
    template = path or PATHS.get(decoded.framework, V2)
    if not template.startswith("/"):
        raise InferError(f"--path: {template!r} must start with /")
    return Target(
        decoded.namespace,
        f"{decoded.name}-predictor",
        template.replace("{model}", model or decoded.name),
    )


async def infer(
    c: rclient.Client,
    name: str,
    namespace: str,
    body: Any,
    *,
    model: str | None = None,
    path: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Send ``body`` (JSON) to the InferenceService ``namespace/name``; its answer (decoded when JSON).
    ``timeout``: seconds to wait for the answer (default: the client's; a model at zero answers once
    woken)."""
    try:
        live = await c.get(api.RESOURCE, name, namespace)
    except rclient.ApiError as e:
        raise InferError(f"inferenceservice {namespace}/{name}: {e.status} {e.reason}: {e.message}") from None
    t = target(live, model=model, path=path)
    t = dataclasses.replace(t, activator=await _parked_behind(c, t))
    try:
        text = await c.request_text(
            t.proxy_path,
            method="POST",
            content=json.dumps(body).encode(),
            accept="application/json, */*",
            resource="services/proxy",
            timeout=timeout,
            headers=t.headers,
        )
    except rclient.ApiError as e:
        raise InferError(f"{t.service}{t.path}: {e.status} {e.reason}: {e.message}") from None
    try:
        return json.loads(text)  # any JSON: an object (v2), a list or a number (TorchServe's handlers)
    except json.JSONDecodeError:
        return text


async def _parked_behind(c: rclient.Client, t: Target) -> str | None:
    """The activator the predictor Service is parked behind, else None (also when the Service
    cannot be read: the request then goes to it as usual and says what the API server says)."""
    try:
        svc = await c.get(resources.SERVICE, t.service, t.namespace)
    except rclient.ApiError:
        return None
    meta = svc.get("metadata") or {}
    if (meta.get("labels") or {}).get(contract.PARKED_KEY) != contract.PARKED_VALUE:
        return None
    activator = (meta.get("annotations") or {}).get(contract.SERVICE_ANNOTATION)
    return activator if isinstance(activator, str) and "/" in activator else None
