"""The InferenceService CRD installed for an operator that runs outside the cluster (or inside it):
the one code path of ``mlops-platform install-crd`` and ``make demo``.

- :func:`parse_webhook_url`: the URL the API server is to call the conversion webhook at, checked
  as the API server and the operator's certificate need it (https, a host, ``/convert``).
- :func:`repoint`: a CRD whose webhook is the other kind (Service or URL) pointed at the wanted one.
- :func:`install`: the namespace of the webhook's certificate Secret created when missing (``run``
  keeps its CA there), the CRD pointed at the URL (or the in-cluster Service) and server-side
  applied (:func:`mlops_platform.api.crd.install`: Established, discovery refreshed).

The caBundle the operator injected (a JSON merge patch: the field is that Update's, not this
apply's) survives the apply, so re-installing over a converting CRD breaks nothing; after a new URL
the operator re-asserts its own bundle on its next pass. A CRD whose webhook is the other kind (the
in-cluster Service when a URL is wanted, as ``kubectl apply --server-side -f config/crd/bases``
leaves it, or a URL when the Service is wanted) is first re-pointed by a merge patch setting the
one and removing the other: an apply alone would leave the other kind's field, owned by another
field manager, beside the new one, and the API server refuses a webhook with both.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any

from mlops_platform.api import CRD_NAME, crd, v1alpha1
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.webhooks import serve

JSON = dict[str, Any]

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the API server calls the conversion webhook: ``url``, its host and port."""

    url: str
    host: str
    port: int

    @property
    def ip(self) -> bool:
        """The host is an IP address (the certificate needs it as an IP SAN), not a DNS name."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def parse_webhook_url(url: str) -> Target:
    """``url`` as a :class:`Target`; ValueError saying what is wrong: not https (the API server
    calls webhooks over TLS only), no host, a port out of range, user info, a query or fragment (the
    API server refuses them), a path other than :data:`crd.WEBHOOK_PATH` (where the operator serves
    conversions)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:  # e.g. an unclosed [IPv6 address
        raise ValueError(f"{url!r}: {e}") from None
    if parts.scheme != "https":
        raise ValueError(f"{url!r} is not https://... (the API server calls webhooks over TLS only)")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} has user info (the API server refuses it)")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{url!r}: {e}") from None
    if port == 0:
        raise ValueError(f"{url!r}: port 0")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"{url!r} has a query or fragment (the API server refuses them)")
    if parts.path != crd.WEBHOOK_PATH:
        raise ValueError(
            f"{url!r}: the path must be {crd.WEBHOOK_PATH} (where the operator serves conversions), "
            f"not {parts.path or '/'!r}"
        )
    host = parts.hostname
    target = Target(url, host, port or 443)
    if not target.ip and not _HOST_NAME.match(host):
        raise ValueError(f"{url!r}: host {host!r} is neither an IP address nor a DNS name")
    return target


@dataclasses.dataclass(frozen=True)
class Installed:
    """What :func:`install` did."""

    #: the CRD as the API server has it now (Established)
    crd: JSON
    #: where the API server calls the webhook now (None: the in-cluster Service)
    target: Target | None
    #: the namespaces created (the certificate Secret's, the extra ones), those that existed left out
    created_namespaces: tuple[str, ...]
    #: where the webhook was before (:func:`describe`), None when there was no CRD or no webhook
    previous: str | None
    #: the CRD holds a CA bundle (kept from an earlier injection); else the operator injects it
    ca_bundle: bool


def client_config(crd_object: JSON) -> JSON:
    """The CRD's ``spec.conversion.webhook.clientConfig`` ({} without a conversion webhook)."""
    conversion = (crd_object.get("spec") or {}).get("conversion") or {}
    return dict((conversion.get("webhook") or {}).get("clientConfig") or {})


def describe(config: JSON) -> str | None:
    """Where a ``clientConfig`` sends the API server: its URL, or its Service; None: neither."""
    if config.get("url"):
        return str(config["url"])
    service = config.get("service")
    if service:
        path = service.get("path") or ""
        return f"the Service {service['namespace']}/{service['name']}:{service.get('port', 443)}{path}"
    return None


async def ensure_namespace(client: rclient.Client, name: str) -> bool:
    """Create the namespace ``name`` unless it exists; True if this call created it."""
    try:
        await client.get(resources.NAMESPACE, name)
        return False
    except rclient.ApiError as e:
        if not e.not_found:
            raise
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    try:
        await client.create(resources.NAMESPACE, body)
    except rclient.ApiError as e:
        if e.conflict:  # created meanwhile
            return False
        raise
    return True


async def _live(client: rclient.Client) -> JSON | None:
    try:
        return await client.get(resources.CRD, CRD_NAME)
    except rclient.ApiError as e:
        if e.not_found:
            return None
        raise


async def repoint(client: rclient.Client, webhook_url: str | None, live: JSON | None = None) -> bool:
    """A live webhook of the other kind (the Service when ``webhook_url`` is wanted, a URL when the
    Service is: None) replaced by the wanted one in one merge patch, the caBundle beside them
    untouched; True if it patched. ``live``: the CRD as just read (else read here; none: nothing)."""
    live = live if live is not None else await _live(client)
    config = client_config(live) if live is not None else {}
    wanted = crd.conversion(url=webhook_url)["webhook"]["clientConfig"]
    other = "service" if webhook_url is not None else "url"
    if other not in config:
        return False
    patch = {"spec": {"conversion": {"webhook": {"clientConfig": {**wanted, other: None}}}}}
    await client.patch(resources.CRD, CRD_NAME, patch, field_manager=v1alpha1.FIELD_MANAGER)
    return True


async def install(
    client: rclient.Client,
    *,
    webhook_url: str | None,
    secret_namespace: str = serve.SECRET[0],
    namespaces: Sequence[str] = (),
    timeout: float = 60.0,
) -> Installed:
    """The namespaces ``secret_namespace`` (the webhook's certificate Secret's) and ``namespaces``
    created when missing, then the CRD converting through the webhook at ``webhook_url`` (checked
    by :func:`parse_webhook_url`; None: the in-cluster Service) applied, until Established. The
    caBundle already injected is kept (see the module docstring)."""
    target = parse_webhook_url(webhook_url) if webhook_url is not None else None
    created = tuple(
        [ns for ns in dict.fromkeys((secret_namespace, *namespaces)) if await ensure_namespace(client, ns)]
    )
    before = await _live(client)
    if before is not None:
        await repoint(client, webhook_url, before)
    live = await crd.install(client, webhook_url=webhook_url, timeout=timeout)
    return Installed(
        crd=live,
        target=target,
        created_namespaces=created,
        previous=describe(client_config(before)) if before is not None else None,
        ca_bundle=bool(client_config(live).get("caBundle")),
    )
