"""A lean asyncio Kubernetes REST client that works on plain dicts.

Authentication, kubeconfig contexts, in-cluster service accounts (token file re-read on rotation),
exec credential plugins and TLS come from ``lightkube``'s config layer, which hands us an SSL
context and an auth flow; the HTTP connections are aiohttp's (:mod:`.http`: a third of the CPU per
request). Everything above that is deliberately thin: requests go out as JSON, responses
come back as ``dict`` decoded by ``msgspec`` (no typed-model decoding on the hot path), and every
request is counted by (verb, resource, code) so tests and benchmarks can assert how many API calls
the operator made. Bodies are encoded and answers decoded (into dicts or :class:`ApiError`) by
:mod:`.codec`; :mod:`.rawclient` sends, retries and counts; this module adds the typed verbs, watch
and discovery.

Contract:
- Requests, their errors and retries: :mod:`.rawclient` (non-2xx answers raise :class:`ApiError`;
  ``429`` and 5xx answers with ``Retry-After`` are retried like client-go's).
- ``apply`` is server-side apply (``application/apply-patch+yaml``) with a field manager and ``force``.
- ``watch`` yields decoded watch events until the server closes the stream; it never reconnects
  (reconnecting with backoff is the reflector's job).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal

from mlops_platform.runtime.transport import codec
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import shape as rshape
from mlops_platform.runtime.transport.kubeconfig import KubeconfigError as KubeconfigError
from mlops_platform.runtime.transport.rawclient import RawClient

# the REST types live in ``rest``; they are part of this module's API (``client.Resource``)
from mlops_platform.runtime.transport.rest import ApiError as ApiError
from mlops_platform.runtime.transport.rest import RequestRecord as RequestRecord
from mlops_platform.runtime.transport.rest import Resource as Resource

TransportError = rhttp.TransportError

JSON = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class Client(RawClient):
    """An asyncio client for one API server (:class:`~.rawclient.RawClient`'s requests, with typed
    verbs, watch and discovery). Use :meth:`from_kubeconfig` or :meth:`from_kubeconfig_dict`."""

    def __init__(self, http: rhttp.Transport, *, max_retries: int = 10) -> None:
        super().__init__(http, max_retries=max_retries)
        self._resources: dict[tuple[str, str], Resource] = {}  # discovery, per client

    # -- typed verbs ----------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name), **self._meta(res, namespace, name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = None,
        shape: rshape.Shape | None = None,
    ) -> JSON:
        """One page of a LIST; ``resource_version_match`` ("Exact", "NotOlderThan") says how
        ``resource_version`` is read (an ``Exact`` LIST reads etcd at that revision: 410 once it is
        compacted). With ``shape``, each item holds only the fields it keeps (:mod:`.shape`)."""
        params = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_,
            "resourceVersion": resource_version,
            "resourceVersionMatch": resource_version_match,
        }
        return await self.request(
            "GET",
            res.path(namespace),
            params=params,
            timeout=timeout,
            decoder=shape.page if shape is not None else None,
            **self._meta(res, namespace, None),
        )

    async def create(self, res: Resource, obj: JSON, namespace: str | None = None) -> JSON:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return await self.request("POST", res.path(ns), body=obj, **self._meta(res, ns, None))

    async def replace(self, res: Resource, obj: JSON, *, subresource: str | None = None) -> JSON:
        meta = obj["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        return await self.request(
            "PUT", res.path(ns, name, subresource), body=obj, **self._meta(res, ns, name, subresource)
        )

    async def apply_objects(self, objs: Iterable[JSON], *, field_manager: str) -> None:
        """Server-side apply each of ``objs`` in order, its resource found by discovery
        (:meth:`resource_for`): manifests of any kind, as ``kubectl apply --server-side`` does."""
        for obj in objs:
            await self.apply(
                await self.resource_for(obj["apiVersion"], obj["kind"]), obj, field_manager=field_manager
            )

    async def apply(
        self,
        res: Resource,
        obj: JSON,
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
        shape: rshape.Shape | None = None,
    ) -> JSON:
        """Server-side apply ``obj`` (which must carry apiVersion, kind and metadata.name). With
        ``shape``, the answer holds only the fields it keeps (:mod:`.shape`), as a cache of the kind."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        params = {
            "fieldManager": field_manager,
            "force": "true" if force else None,
            "dryRun": "All" if dry_run else None,
        }
        return await self.request(
            "PATCH",
            res.path(ns, name, subresource),
            params=params,
            body=obj,
            content_type="application/apply-patch+yaml",
            decoder=shape.object if shape is not None else None,
            **self._meta(res, ns, name, subresource),
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> JSON:
        return await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            params={"fieldManager": field_manager},
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            **self._meta(res, namespace, name, subresource),
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        preconditions: JSON | None = None,
    ) -> JSON:
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request(
            "DELETE", res.path(namespace, name), body=body, **self._meta(res, namespace, name)
        )

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
        send_initial_events: bool = False,
        shape: rshape.Shape | None = None,
    ) -> AsyncIterator[JSON]:
        """Yield watch events (``{"type": ..., "object": {...}}``) until the server ends the stream;
        with ``shape``, each object holds only the fields it keeps (:mod:`.shape`).

        A watch that fails to start raises :class:`ApiError` (e.g. 410 when ``resource_version`` is
        too old). An ``ERROR`` event in the stream is raised as :class:`ApiError` too.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "sendInitialEvents": "true" if send_initial_events else None,
            "resourceVersionMatch": "NotOlderThan" if send_initial_events else None,
        }
        path = res.path(namespace)
        decode = shape.event if shape is not None else codec.decode_json
        loop = asyncio.get_running_loop()
        started = loop.time()
        read_timeout = (timeout_seconds + 30.0) if timeout_seconds else None
        self.watches_open += 1
        try:
            async with self._http.stream(
                "GET",
                path,
                params=codec.clean_params(params),
                headers={"Accept": "application/json"},
                read_timeout=read_timeout,
            ) as response:
                self._record("watch", res.group_resource, namespace, response.status, loop.time() - started)
                if response.status >= 300:
                    body = await response.read()
                    codec.decode_answer(
                        rhttp.Response(response.status, response.reason, response.headers, body)
                    )
                async for line in response.lines():
                    if not line:
                        continue
                    event: JSON = decode(line)
                    if event.get("type") == "ERROR":
                        raise codec.watch_error(event)
                    yield event
        finally:
            self.watches_open -= 1

    # -- discovery ------------------------------------------------------------------------------

    async def resource_for(self, api_version: str, kind: str) -> Resource:
        """Map (apiVersion, kind) to its REST resource through discovery, cached per client."""
        key = (api_version, kind)
        if key not in self._resources:
            group, _, version = api_version.rpartition("/")
            path = f"/apis/{api_version}" if group else f"/api/{version}"
            listing = await self.request("GET", path, resource="discovery")
            for r in listing.get("resources", []):
                if "/" in r["name"]:
                    continue
                self._resources[(api_version, r["kind"])] = Resource(
                    group, version, r["name"], r["kind"], r["namespaced"]
                )
            if key not in self._resources:
                raise LookupError(f"the server has no resource of kind {kind!r} in {api_version!r}")
        return self._resources[key]

    def forget_discovery(self) -> None:
        """Drop cached discovery (after installing CRDs, for instance)."""
        self._resources.clear()

    @staticmethod
    def _meta(
        res: Resource, namespace: str | None, name: str | None, subresource: str | None = None
    ) -> dict[str, Any]:
        resource = res.group_resource + (f"/{subresource}" if subresource else "")
        return {"resource": resource, "namespace": namespace, "name": name}
