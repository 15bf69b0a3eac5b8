"""Read-only reads of a Prometheus in the cluster, through the API server's service proxy (like
:mod:`mlops_platform.infer`): no port-forward, no route from the client to the cluster's addresses,
the caller's own credentials (``get`` on ``services/proxy`` for the Service: :func:`read_rule`).

Contract:
- :class:`Server` names the Prometheus Service, ``NAMESPACE/SERVICE:PORT`` (:func:`parse`; the
  default, :data:`DEFAULT`, is what the local cluster's monitoring stack and the Prometheus
  Operator's governing Service give: ``monitoring/prometheus-operated:9090``);
- :func:`alert_rules` is the alerting rules of one rule group (``/api/v1/rules``), each with its
  state and active alerts; :func:`targets` the active targets of one scrape pool (``/api/v1/targets``);
  :func:`query` an instant query's result vector (``/api/v1/query``);
- :func:`decode` reads any Prometheus API answer and :func:`samples` an instant query's result as
  :class:`Sample` s: the parsing the operator's queries share (:mod:`mlops_platform.promclient`);
- the Prometheus Operator names a ServiceMonitor's scrape pool ``serviceMonitor/NS/NAME/INDEX``
  (:func:`service_monitor_pool`);
- a failed read is :class:`PrometheusError`: the API server's answer (no such Service, no ready
  endpoint, forbidden) or Prometheus' own ``error`` (its ``status`` and ``error_type`` say which).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from mlops_platform.runtime.transport import client as rclient

Obj = dict[str, Any]
_SERVER = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)/([a-z0-9]([-a-z0-9]*[a-z0-9])?):([0-9]{1,5})$")


class PrometheusError(Exception):
    """A read failed: the message says what answered what; ``status`` is the HTTP status of a
    non-2xx answer, ``error_type`` Prometheus' own ``errorType`` (``bad_data``, ``execution``, ...)
    when Prometheus answered."""

    def __init__(self, message: str, *, status: int | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One sample of an instant query's result (a scalar result has no labels)."""

    labels: Mapping[str, str]
    value: float


@dataclasses.dataclass(frozen=True, slots=True)
class Server:
    namespace: str
    service: str
    port: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service}:{self.port}"

    def path(self, api_path: str, **params: str) -> str:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        proxy = f"/api/v1/namespaces/{self.namespace}/services/http:{self.service}:{self.port}/proxy"
        return f"{proxy}{api_path}{query}"


DEFAULT = Server("monitoring", "prometheus-operated", 9090)


def parse(value: str) -> Server:
    """``NAMESPACE/SERVICE:PORT`` (``ValueError`` saying the format)."""
    m = _SERVER.match(value)
    if m is None or not 0 < int(m.group(5)) < 65536:
        raise ValueError(f"{value!r} is not NAMESPACE/SERVICE:PORT (e.g. {DEFAULT})")
    return Server(m.group(1), m.group(3), int(m.group(5)))


def read_rule(server: Server = DEFAULT) -> Obj:
    """The RBAC rule the reads need (a Role in the server's namespace, or a ClusterRole)."""
    return {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "resourceNames": [f"http:{server.service}:{server.port}"],
        "verbs": ["get"],
    }


def decode(text: str, who: str) -> Any:
    """The ``data`` of a Prometheus API answer (``who``: how errors name the Prometheus)."""
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        raise PrometheusError(f"Prometheus {who}: not a Prometheus API answer: {text[:200]!r}") from None
    if not isinstance(answer, dict):
        raise PrometheusError(f"Prometheus {who}: not a Prometheus API answer: {text[:200]!r}")
    if answer.get("status") != "success":
        error_type = str(answer.get("errorType") or "") or None
        raise PrometheusError(f"Prometheus {who}: {error_type}: {answer.get('error')}", error_type=error_type)
    return answer.get("data")


def api_error(e: rclient.ApiError, who: str) -> PrometheusError:
    """A non-2xx answer as a :class:`PrometheusError`: Prometheus' own error when it answered (its
    body says ``errorType``), else the API server's (no such Service, no endpoint, forbidden)."""
    body = e.body if isinstance(e.body, dict) else {}
    error_type = body.get("errorType")
    if isinstance(error_type, str) and error_type:
        return PrometheusError(f"Prometheus {who}: {error_type}: {body.get('error')}", status=e.status,
                               error_type=error_type)  # fmt: skip
    return PrometheusError(f"Prometheus {who}: {e.status} {e.reason}: {e.message}", status=e.status)


def samples(data: Any, who: str) -> list[Sample]:
    """An instant query's result (a vector or a scalar) as samples; NaN values are kept."""
    kind = data.get("resultType") if isinstance(data, dict) else None
    result: Any = data.get("result") if isinstance(data, dict) else None
    try:
        if kind == "scalar":
            return [Sample({}, float(result[1]))]
        if kind == "vector":
            return [Sample(dict(r.get("metric") or {}), float(r["value"][1])) for r in result or ()]
    except (TypeError, KeyError, IndexError, ValueError, AttributeError):
        pass
    raise PrometheusError(f"Prometheus {who}: not an instant vector or scalar: {str(data)[:200]}")


def finite(values: list[Sample]) -> list[Sample]:
    """``values`` without NaN (0/0: a ratio of no requests has no value)."""
    return [v for v in values if not math.isnan(v.value)]


async def _get(c: rclient.Client, server: Server, api_path: str, **params: str) -> Any:
    try:
        text = await c.request_text(
            server.path(api_path, **params), accept="application/json", resource="services/proxy"
        )
    except rclient.ApiError as e:
        raise api_error(e, str(server)) from None
    return decode(text, str(server))


async def alert_rules(c: rclient.Client, server: Server, group: str) -> list[Obj] | None:
    """The alerting rules of the rule group ``group`` (None: no such group is loaded)."""
    data = await _get(c, server, "/api/v1/rules", type="alert")
    for g in data.get("groups") or ():
        if g.get("name") == group:
            return list(g.get("rules") or ())
    return None


def service_monitor_pool(namespace: str, name: str, endpoint: int = 0) -> str:
    return f"serviceMonitor/{namespace}/{name}/{endpoint}"


async def targets(c: rclient.Client, server: Server, pool: str) -> list[Obj]:
    """The active targets of the scrape pool ``pool``."""
    data = await _get(c, server, "/api/v1/targets", state="active", scrapePool=pool)
    return [t for t in data.get("activeTargets") or () if t.get("scrapePool") == pool]


async def query(c: rclient.Client, server: Server, promql: str) -> list[Obj]:
    """An instant query's result vector."""
    data = await _get(c, server, "/api/v1/query", query=promql)
    return list(data.get("result") or ())
