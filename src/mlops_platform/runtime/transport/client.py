"""A lean asyncio Kubernetes REST client that works on plain dicts.

Authentication, kubeconfig contexts, in-cluster service accounts (token file re-read on rotation),
exec credential plugins and TLS come from ``lightkube``'s config layer, which hands us an SSL
context and an auth flow; the HTTP connections are aiohttp's (:mod:`.http`: a third of the CPU per
request). Everything above that is deliberately thin: requests go out as JSON, responses
come back as ``dict`` decoded by ``msgspec`` (no typed-model decoding on the hot path), and every
request is counted by (verb, resource, code) so tests and benchmarks can assert how many API calls
the operator made. Bodies are encoded and answers decoded (into dicts or :class:`ApiError`) by
:mod:`.codec`; this module sends, retries and counts.

Contract:
- Non-2xx answers raise :class:`ApiError` carrying the HTTP status, the ``Status.reason`` and message.
- ``429 Too Many Requests`` (and 5xx answers with ``Retry-After``) are retried after the server's
  ``Retry-After`` (capped), up to ``max_retries`` times, like client-go. An :class:`ApiError` of an
  answer with ``Retry-After`` (a 429 past the retries, or a watch's: never retried here) carries
  it as ``body["details"]["retryAfterSeconds"]`` even when the body is no Status (priority and
  fairness answers in plain text), so the reflector waits what the server asked for too. Without a
  Status body the error's reason is the API's name for the code (``TooManyRequests``), as
  client-go's, never the HTTP reason phrase: reasons end up in conditions, which take no spaces.
- ``apply`` is server-side apply (``application/apply-patch+yaml``) with a field manager and ``force``.
- ``watch`` yields decoded watch events until the server closes the stream; it never reconnects
  (reconnecting with backoff is the reflector's job).
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
from lightkube.config import client_adapter, kubeconfig

from mlops_platform.runtime.transport import codec
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import shape as rshape

# the REST types live in ``rest``; they are part of this module's API (``client.Resource``)
from mlops_platform.runtime.transport.rest import ApiError as ApiError
from mlops_platform.runtime.transport.rest import RequestRecord as RequestRecord
from mlops_platform.runtime.transport.rest import Resource as Resource
from mlops_platform.runtime.transport.rest import verb_of

TransportError = rhttp.TransportError

JSON = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


RequestObserver = Callable[[RequestRecord], None]


class Client:
    """An asyncio client for one API server. Use :meth:`from_kubeconfig` or :meth:`in_cluster`."""

    def __init__(self, http: rhttp.Transport, *, max_retries: int = 10) -> None:
        self._http = http
        self._max_retries = max_retries
        self._resources: dict[tuple[str, str], Resource] = {}
        #: requests made so far, by (verb, resource, code); cheap enough to keep always on.
        self.requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.observers: list[RequestObserver] = []
        #: messages of the last 403 answers; RBAC denials read 'User "..." cannot VERB resource ...'
        #: (a 403 can also mean "namespace is being terminated", which is not an authorization matter)
        self.forbidden: collections.deque[str] = collections.deque(maxlen=200)
        #: watch streams open now (started and not yet ended or closed): a watch an informer
        #: abandons without closing stays counted (``mlops_platform_watches_open``)
        self.watches_open = 0

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str] | None = None, *, context: str | None = None, **kw: Any
    ) -> Client:
        """From a kubeconfig file (default: ``$KUBECONFIG``, then ``~/.kube/config``, then in-cluster)."""
        if path is not None:
            config = kubeconfig.KubeConfig.from_file(Path(path))
        else:
            config = kubeconfig.KubeConfig.from_env()
        return cls._from_config(config, context, str(path or "(from environment)"), **kw)

    @classmethod
    def from_kubeconfig_dict(cls, conf: dict[str, Any], *, context: str | None = None, **kw: Any) -> Client:
        """From a kubeconfig structure (e.g. a ServiceAccount token and the cluster's CA)."""
        return cls._from_config(kubeconfig.KubeConfig.from_dict(conf), context, "(dict)", **kw)

    @classmethod
    def _from_config(
        cls, config: kubeconfig.KubeConfig, context: str | None, origin: str, **kw: Any
    ) -> Client:
        single = config.get(context_name=context)
        if single is None:
            raise ValueError(f"kubeconfig {origin}: no context {context or '(current)'}")
        assert single.user is not None, "kubeconfig context without a user"
        ssl_context = client_adapter.verify_cluster(
            single.cluster, single.user, single.abs_file, trust_env=False
        )
        transport = rhttp.Transport(
            single.cluster.server, ssl_context=ssl_context, auth=client_adapter.user_auth(single.user)
        )
        return cls(transport, **kw)

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def base_url(self) -> str:
        return self._http.base_url

    # -- raw requests -------------------------------------------------------------------------

    def _record(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        code: int,
        seconds: float,
        name: str | None = None,
        retried: bool = False,
    ) -> None:
        self.requests[(verb, resource, code)] += 1
        if self.observers:
            record = RequestRecord(verb, resource, namespace, code, seconds, name, retried)
            for observe in self.observers:
                observe(record)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        resource: str = "",
        namespace: str | None = None,
        name: str | None = None,
        timeout: float | None = None,
        decoder: msgspec.json.Decoder[Any] | None = None,
    ) -> JSON:
        """Send one request and decode the JSON answer (a 2xx one with ``decoder`` if given);
        raise :class:`ApiError` on non-2xx."""
        verb = verb_of(method, name, params)
        if name is None and isinstance(body, dict):  # a create names its object in the body
            name = body.get("metadata", {}).get("name")
        content = codec.encode_body(body, content_type)
        headers = {"Accept": "application/json"}
        if content is not None:
            headers["Content-Type"] = content_type
        loop = asyncio.get_running_loop()
        for attempt in range(self._max_retries + 1):
            started = loop.time()
            try:
                response = await self._http.send(
                    method,
                    path,
                    params=codec.clean_params(params),
                    content=content,
                    headers=headers,
                    timeout=timeout,
                )
            except rhttp.TransportError:
                self._record(verb, resource, namespace, 0, loop.time() - started, name)
                raise
            retry_after = codec.retry_after(response)
            retry = retry_after is not None and attempt < self._max_retries
            self._record(verb, resource, namespace, response.status, loop.time() - started, name, retry)
            if retry_after is not None and retry:
                await asyncio.sleep(retry_after)
                continue
            try:
                return codec.decode_answer(response, decoder)
            except ApiError as e:
                if e.status == 403:
                    self.forbidden.append(e.message)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def request_text(
        self,
        path: str,
        *,
        resource: str = "nonresource",
        accept: str = "text/plain",
        method: str = "GET",
        content: bytes | None = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> str:
        """Send one request whose answer is not an API object and return its body as text: a GET of
        ``/metrics`` or ``/version``, of a pod's log (``accept="*/*"``: the log endpoint refuses
        ``text/plain``), or a POST of ``content`` through a service proxy (the answer is the
        backend's, any JSON or none; ``headers`` reach the backend too, e.g. a gateway's ``Host``).
        A non-2xx answer raises :class:`ApiError` with its body."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = {"Accept": accept} | ({"Content-Type": content_type} if content is not None else {})
        response = await self._http.send(method, path, content=content, headers=sent | dict(headers or {}))
        self._record(method.lower(), resource, None, response.status, loop.time() - started)
        if response.status >= 300:
            codec.decode_answer(response)
        return response.body.decode(errors="replace")

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
