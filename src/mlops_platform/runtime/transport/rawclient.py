"""The raw half of the REST client: one API server's connection, requests sent, retried and
counted, answers decoded. :class:`~.client.Client` adds the typed verbs, watch and discovery on top.

Contract:
- Non-2xx answers raise :class:`~.rest.ApiError` carrying the HTTP status, the ``Status.reason`` and
  message.
- ``429 Too Many Requests`` (and 5xx answers with ``Retry-After``) are retried after the server's
  ``Retry-After`` (capped), up to ``max_retries`` times, like client-go. An :class:`~.rest.ApiError`
  of an answer with ``Retry-After`` (a 429 past the retries, or a watch's: never retried here)
  carries it as ``body["details"]["retryAfterSeconds"]`` even when the body is no Status (priority
  and fairness answers in plain text), so the reflector waits what the server asked for too.
  Without a Status body the error's reason is the API's name for the code (``TooManyRequests``), as
  client-go's, never the HTTP reason phrase: reasons end up in conditions, which take no spaces.
- Every request is counted by (verb, resource, code) in :attr:`RawClient.requests` and handed to
  the :attr:`RawClient.observers`; the messages of the last 403 answers are kept.
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable, Mapping
from typing import Any, Self

import msgspec
from lightkube.config import client_adapter
from lightkube.core.exceptions import ConfigError

from mlops_platform.runtime.transport import codec
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import kubeconfig as rkubeconfig
from mlops_platform.runtime.transport.rest import ApiError, RequestRecord, verb_of

RequestObserver = Callable[[RequestRecord], None]


class RawClient:
    """Raw requests to one API server. Use :meth:`from_kubeconfig` (of :class:`~.client.Client`)."""

    def __init__(self, http: rhttp.Transport, *, max_retries: int = 10) -> None:
        self._http = http
        self._max_retries = max_retries
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
    ) -> Self:
        """From a kubeconfig file (default: in-cluster, then ``$KUBECONFIG``, then ``~/.kube/config``);
        one that cannot be used raises :class:`~.kubeconfig.KubeconfigError`."""
        single = rkubeconfig.load(path, context)
        source = str(path if path is not None else single.fname or "in-cluster service account")
        return cls._from_config(single, source, **kw)

    @classmethod
    def from_kubeconfig_dict(cls, conf: dict[str, Any], *, context: str | None = None, **kw: Any) -> Self:
        """From a kubeconfig structure (e.g. a ServiceAccount token and the cluster's CA)."""
        config = rkubeconfig.from_dict(conf, "(dict)")
        return cls._from_config(rkubeconfig.select(config, context, "(dict)"), "(dict)", **kw)

    @classmethod
    def _from_config(cls, single: rkubeconfig.SingleConfig, source: str, **kw: Any) -> Self:
        assert single.user is not None  # rkubeconfig.select: a context names a user
        try:
            ssl_context = client_adapter.verify_cluster(
                single.cluster, single.user, single.abs_file, trust_env=False
            )
            auth = client_adapter.user_auth(single.user)
        except (OSError, ValueError, ConfigError) as e:  # ssl.SSLError is an OSError
            reason = f"context {single.context_name!r}: its TLS files or credentials: {e}"
            raise rkubeconfig.KubeconfigError(source, reason) from None
        return cls(rhttp.Transport(single.cluster.server, ssl_context=ssl_context, auth=auth), **kw)

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> Self:
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
    ) -> dict[str, Any]:
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
        timeout: float | None = None,
    ) -> str:
        """Send one request whose answer is not an API object and return its body as text: a GET of
        ``/metrics`` or ``/version``, of a pod's log (``accept="*/*"``: the log endpoint refuses
        ``text/plain``), or a POST of ``content`` through a service proxy (the answer is the
        backend's, any JSON or none; ``headers`` reach the backend too, e.g. a gateway's ``Host``).
        A non-2xx answer raises :class:`ApiError` with its body. ``timeout``: seconds for the whole
        exchange instead of the client's (a model woken from zero answers after its start)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = {"Accept": accept} | ({"Content-Type": content_type} if content is not None else {})
        response = await self._http.send(
            method, path, content=content, headers=sent | dict(headers or {}), timeout=timeout
        )
        self._record(method.lower(), resource, None, response.status, loop.time() - started)
        if response.status >= 300:
            codec.decode_answer(response)
        return response.body.decode(errors="replace")
