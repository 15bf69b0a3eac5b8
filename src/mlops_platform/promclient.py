"""The operator's Prometheus queries (the canary analysis, issue 42; ``run``'s ``--prometheus*``):
instant queries with a deadline and bounded retries, on the transport every other request of the
operator uses (:mod:`mlops_platform.runtime.transport`), parsed by :mod:`mlops_platform.promapi`.

Contract:
- Two ways to reach Prometheus (:class:`Options`, the ``--prometheus*`` flags of
  :func:`mlops_platform.cli.options.prometheus_options`):
  - ``NAMESPACE/SERVICE:PORT`` (default ``monitoring/prometheus-operated:9090``): through the API
    server's service proxy, with the operator's own client and credentials (``get`` on
    ``services/proxy`` of that Service: :func:`promapi.read_rule`). It works wherever the operator
    reaches the API server, from outside the cluster too, and never needs a route from the
    operator's host to cluster addresses;
  - a URL (``--prometheus-url``, for an operator in the cluster, or a Prometheus outside it): its
    own connections, TLS verified against ``--prometheus-ca-file`` (or the system's roots;
    ``--prometheus-insecure-skip-tls-verify`` to not verify), and the bearer token of
    ``--prometheus-bearer-token-file`` (re-read on a 401, as a rotated ServiceAccount token is).
- :meth:`QueryClient.query` never takes longer than ``timeout`` seconds in all (waiting for a free
  slot of ``max_in_flight`` included), so a reconcile that measures a canary never holds its worker
  for long, and other reconciles never wait on Prometheus at all; a failure without an answer
  (connection, a 5xx or 429 of the API server's proxy or of Prometheus) is retried ``retries``
  times with backoff inside that deadline.
- Every failure is one :class:`QueryError` with a ``kind``: ``unreachable`` (no answer: hold and
  say so), ``invalid`` (Prometheus refused the query: ``bad_data``), ``failed`` (Prometheus could
  not run it: ``execution``, its own timeout). Its message is the same for the same cause (it
  names the Prometheus, not the query), so a status that quotes it does not change on every retry.
- :attr:`QueryClient.answers` counts the outcomes (``ok``, each kind, ``retried``), for the
  benchmark's queries per second.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Literal

from lightkube.config import client_adapter
from lightkube.core.exceptions import ConfigError

from mlops_platform import promapi
from mlops_platform.runtime.queue import ratelimiter
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import rawclient

Kind = Literal["unreachable", "invalid", "failed"]
UNREACHABLE: Kind = "unreachable"
INVALID: Kind = "invalid"
FAILED: Kind = "failed"


class QueryError(Exception):
    """A query without a result; ``kind`` says what to make of it."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True, slots=True)
class Direct:
    """Prometheus at a URL, on connections of its own."""

    url: str
    ca_file: str | None = None
    insecure_skip_tls_verify: bool = False
    bearer_token_file: str | None = None

    def __str__(self) -> str:
        return self.url


Endpoint = promapi.Server | Direct


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """The ``--prometheus*`` flags (field names are the flags' destinations)."""

    prometheus: str = str(promapi.DEFAULT)
    prometheus_url: str | None = None
    prometheus_ca_file: str | None = None
    prometheus_insecure_skip_tls_verify: bool = False
    prometheus_bearer_token_file: str | None = None
    prometheus_timeout: float = 5.0
    prometheus_retries: int = 2

    def endpoint(self) -> Endpoint:
        """Where to query; ``ValueError`` naming the flag that is wrong."""
        if self.prometheus_timeout <= 0:
            raise ValueError(f"--prometheus-timeout: must be > 0 seconds, got {self.prometheus_timeout}")
        if not 0 <= self.prometheus_retries <= 10:
            raise ValueError(f"--prometheus-retries: must be 0-10, got {self.prometheus_retries}")
        tls = self.prometheus_ca_file is not None or self.prometheus_insecure_skip_tls_verify
        if self.prometheus_url is None:
            if tls or self.prometheus_bearer_token_file is not None:
                raise ValueError(
                    "--prometheus-ca-file, --prometheus-insecure-skip-tls-verify and "
                    "--prometheus-bearer-token-file go with --prometheus-url (through the API server "
                    "the operator's own credentials are used)"
                )
            try:
                return promapi.parse(self.prometheus)
            except ValueError as e:
                raise ValueError(f"--prometheus: {e}") from None
        url = urllib.parse.urlsplit(self.prometheus_url)
        if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
            raise ValueError(
                f"--prometheus-url: {self.prometheus_url!r} is not an http(s)://HOST[:PORT][/PATH] URL"
            )
        if tls and url.scheme != "https":
            raise ValueError(
                "--prometheus-ca-file and --prometheus-insecure-skip-tls-verify need an https URL"
            )
        return Direct(
            self.prometheus_url.rstrip("/"),
            self.prometheus_ca_file,
            self.prometheus_insecure_skip_tls_verify,
            self.prometheus_bearer_token_file,
        )


def ssl_context(d: Direct) -> ssl.SSLContext | None:
    """The TLS settings of an https URL (None for http)."""
    if not d.url.startswith("https://"):
        return None
    ctx = ssl.create_default_context(cafile=d.ca_file)
    if d.insecure_skip_tls_verify:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


Get = Callable[[str, float], Awaitable[str]]


class QueryClient:
    """Instant queries to one Prometheus (see the module's contract). ``api``: the operator's API
    client, for the service proxy; ``sleep``: the backoff's wait (tests pass their own)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        api: rclient.Client | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        max_in_flight: int = 8,
        backoff: ratelimiter.Exponential | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.timeout, self.retries = timeout, retries
        self._backoff = backoff or ratelimiter.Exponential(0.2, 1.0, jitter=0.5)
        self._sleep = sleep
        self._slots = asyncio.Semaphore(max_in_flight)
        #: answers by outcome: ``ok``, ``unreachable``, ``invalid``, ``failed``, and ``retried``
        self.answers: collections.Counter[str] = collections.Counter()
        self._own: rawclient.RawClient | None = None
        self._get: Get
        if isinstance(endpoint, promapi.Server):
            if api is None:
                raise ValueError("a Prometheus behind the API server's service proxy needs the API client")
            self._get = self._proxied(api, endpoint)
        else:
            auth = (
                client_adapter.BearerTokenFileAuth(endpoint.bearer_token_file)
                if endpoint.bearer_token_file
                else None
            )
            transport = rhttp.Transport(
                endpoint.url, ssl_context=ssl_context(endpoint), auth=auth, timeout=timeout
            )
            self._own = rawclient.RawClient(transport, max_retries=0)
            self._get = self._direct(self._own)

    @classmethod
    def from_options(cls, options: Options, api: rclient.Client | None = None) -> QueryClient:
        return cls(
            options.endpoint(),
            api=api,
            timeout=options.prometheus_timeout,
            retries=options.prometheus_retries,
        )

    async def close(self) -> None:
        if self._own is not None:
            await self._own.close()

    @staticmethod
    def _proxied(api: rclient.Client, server: promapi.Server) -> Get:
        async def get(query: str, timeout: float) -> str:
            path = server.path("/api/v1/query", query=query)
            return await api.request_text(path, accept="application/json", resource="services/proxy",
                                          timeout=timeout)  # fmt: skip

        return get

    @staticmethod
    def _direct(raw: rawclient.RawClient) -> Get:
        async def get(query: str, timeout: float) -> str:
            path = "/api/v1/query?" + urllib.parse.urlencode({"query": query})
            return await raw.request_text(
                path, accept="application/json", resource="prometheus", timeout=timeout
            )

        return get

    async def query(self, promql: str) -> list[promapi.Sample]:
        """The samples of an instant query now (NaN values kept); :class:`QueryError` else."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline), self._slots:
                out = await self._attempts(promql, deadline)
        except TimeoutError:
            self.answers[UNREACHABLE] += 1
            raise QueryError(
                UNREACHABLE, f"Prometheus {self.endpoint}: no answer within {self.timeout:g}s"
            ) from None
        except QueryError as e:
            self.answers[e.kind] += 1
            raise
        self.answers["ok"] += 1
        return out

    async def _attempts(self, promql: str, deadline: float) -> list[promapi.Sample]:
        loop = asyncio.get_running_loop()
        for attempt in range(self.retries + 1):
            try:
                text = await self._get(promql, max(0.001, deadline - loop.time()))
                return promapi.samples(promapi.decode(text, str(self.endpoint)), str(self.endpoint))
            except Exception as e:  # every failure is classified: a reconcile sees QueryError only
                error, retry = self._classify(e)
            if not retry or attempt == self.retries:
                raise error
            self.answers["retried"] += 1
            await self._sleep(self._backoff.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _classify(self, e: Exception) -> tuple[QueryError, bool]:
        """The error and whether it is worth a retry."""
        who = f"Prometheus {self.endpoint}"
        if isinstance(e, rhttp.TransportError):
            cause = e.__cause__ or e
            if isinstance(cause, TimeoutError):  # the transport's share of the deadline is over
                return QueryError(UNREACHABLE, f"{who}: no answer within {self.timeout:g}s"), False
            return QueryError(UNREACHABLE, f"{who}: no answer: {type(cause).__name__}: {cause}"[:300]), True
        if isinstance(e, ConfigError):  # the bearer token file
            return QueryError(UNREACHABLE, f"{who}: {e}"), False
        if isinstance(e, rclient.ApiError):
            e = promapi.api_error(e, str(self.endpoint))
        if not isinstance(e, promapi.PrometheusError):
            raise e
        if e.error_type == "bad_data":
            return QueryError(INVALID, str(e)[:300]), False
        if e.error_type is not None:  # Prometheus answered: execution, timeout, canceled, internal, ...
            return QueryError(FAILED, str(e)[:300]), e.error_type in ("timeout", "unavailable")
        transient = e.status is not None and (e.status >= 500 or e.status == 429)
        return QueryError(UNREACHABLE, str(e)[:300]), transient
