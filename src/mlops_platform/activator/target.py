"""Which Service a request that reached the activator was sent to (pure).

kube-proxy rewrites the destination (the Service's ClusterIP) to the activator's pod, so the
request itself must say. Two ways, the first that answers wins:

- ``X-Forwarded-Uri``: the API server's service proxy sets it to the path it was asked for,
  ``/api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy/...`` (checked on the local cluster),
  unless that names the activator's own Service;
- ``Host``: what an in-cluster client that calls the Service by its DNS name sends,
  ``NAME.NS``, ``NAME.NS.svc`` or ``NAME.NS.svc.<cluster domain>``, with an optional port.

Anything else (an IP, a bare name: no namespace) is no target: the activator answers 404 saying how
to address it, never guesses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PROXY = re.compile(
    rf"^/api/v1/namespaces/(?P<ns>{_LABEL})/services/(?:https?:)?(?P<name>{_LABEL})(?::[^/]*)?/proxy(?:/|$)"
)
_HOST = re.compile(rf"^(?P<name>{_LABEL})\.(?P<ns>{_LABEL})(?:\.svc(?:\.[a-z0-9.-]+)?)?\.?(?::\d+)?$")


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Target:
    namespace: str
    service: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service}"


def of_request(headers: Mapping[str, str], own: Target | None = None) -> Target | None:
    """The Service a request was sent to, from its headers (case-insensitive names), else None. A
    request the API server proxied to the activator's own Service (``own``: what ``mlops-platform
    infer`` does for a parked Service) names its Service by Host."""
    lowered = {k.lower(): v for k, v in headers.items()}
    forwarded = lowered.get("x-forwarded-uri", "")
    if (m := _PROXY.match(forwarded)) and (found := Target(m.group("ns"), m.group("name"))) != own:
        return found
    if m := _HOST.match(lowered.get("host", "").strip().lower()):
        return Target(m.group("ns"), m.group("name"))
    return None


NO_TARGET = (
    "the activator cannot tell which Service this request is for: call the Service by its DNS name "
    "(Host: NAME.NAMESPACE.svc) or through the API server's service proxy"
)
