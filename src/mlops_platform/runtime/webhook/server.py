"""A TLS webhook endpoint: HTTP/1.1 on h11 (:mod:`.connection`), on listening sockets it accepts
from itself (:mod:`.listener`), with a drain that fails no request when it stops (:mod:`.drain`).

Handlers map a path to ``async (body) -> JSON bytes`` (a ConversionReview in, one out). The
server adds what every webhook needs:

- TLS 1.2 or newer, HTTP/1.1 (ALPN); :meth:`WebhookServer.set_certificate` swaps the serving pair
  without restarting the listener: the listening context's SNI callback (OpenSSL calls it for
  every ClientHello, with or without a server name) moves each new connection onto the context of
  the current pair; open connections keep theirs;
- 503 until the first :meth:`~WebhookServer.set_certificate` (until then a throwaway self-signed
  certificate completes handshakes, so only clients that do not verify get that far);
- POST only (405), ``application/json`` only (415), a body limit (413), an empty body is a 400;
- a handler exception is a 500 and a logged error: handlers answer failures themselves (a
  ConversionReview with ``result.status: Failure``), this is the last resort;
- controller-runtime's webhook metrics, ``webhook`` being the path:
  ``controller_runtime_webhook_requests_total{webhook,code}``,
  ``controller_runtime_webhook_latency_seconds{webhook}`` (histogram) and
  ``controller_runtime_webhook_requests_in_flight{webhook}``. Answers given before a route's
  handler (413, 415, 404) are not counted;
- :meth:`WebhookServer.stop` drains: it stops listening (taking the connections the kernel had
  already accepted), keeps answering on every connection it has, each answer with
  ``Connection: close``, and returns once the API server has let go of them all, closing the idle
  ones only after ``grace`` (:mod:`.drain` says why). It logs ``webhook drained`` with its counts.

The private key is loaded from an anonymous in-memory file where the OS has one (Linux), else
from a private temporary directory removed at once: ``ssl`` loads keys from files only.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import ssl
import tempfile
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from mlops_platform.runtime.transport import httpserver
from mlops_platform.runtime.webhook import connection, drain, keypairs, listener

log = logging.getLogger("mlops_platform.runtime.webhook.server")

Handler = Callable[[bytes], Awaitable[bytes]]
JSON_CONTENT_TYPE = "application/json"
MAX_BODY = 64 * 1024 * 1024  # a ConversionReview of a large LIST carries every object of it
#: after the grace, how long a stopping server still lets a handshake or a request in progress finish
FINISH_SECONDS = 5.0


@dataclass(frozen=True)
class WebhookMetrics:
    requests: Counter
    latency: Histogram
    in_flight: Gauge


_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, WebhookMetrics] = weakref.WeakKeyDictionary()


def webhook_metrics(registry: CollectorRegistry) -> WebhookMetrics:
    """The webhook metric families of ``registry``, registered on first use (one set per registry)."""
    m = _METRICS.get(registry)
    if m is None:
        m = WebhookMetrics(
            Counter(
                "controller_runtime_webhook_requests_total",
                "Total number of admission requests by HTTP status code.",
                ["webhook", "code"],
                registry=registry,
            ),
            Histogram(
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                ["webhook"],
                registry=registry,
            ),
            Gauge(
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
                ["webhook"],
                registry=registry,
            ),
        )
        _METRICS[registry] = m
    return m


def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2+, HTTP/1.1) serving the pair; raises if they do not match."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    _load_chain(ctx, cert_pem.rstrip(b"\n") + b"\n" + key_pem)
    return ctx


def _load_chain(ctx: ssl.SSLContext, pem: bytes) -> None:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("webhook-tls", os.MFD_CLOEXEC)
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view) :]
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as directory:  # created 0700
        path = Path(directory) / "tls.pem"
        path.touch(0o600)
        path.write_bytes(pem)
        ctx.load_cert_chain(str(path))


class WebhookServer:
    """HTTPS endpoints for ``handlers`` (path -> ``async (body) -> JSON bytes``); see the module
    docstring. ``start()``, then ``set_certificate()`` (e.g. as a keeper's ``on_serving``)."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        registry: CollectorRegistry | None = None,
        max_body: int = MAX_BODY,
        reuse_port: bool = False,
    ) -> None:
        self.handlers = dict(handlers)
        self.metrics = webhook_metrics(registry if registry is not None else REGISTRY)
        placeholder = keypairs.new_ca("webhook-placeholder", validity=datetime.timedelta(days=1))
        self._placeholder = server_context(placeholder.cert_pem, placeholder.key_pem)
        self._current: ssl.SSLContext | None = None
        self._listening = server_context(placeholder.cert_pem, placeholder.key_pem)
        self._listening.sni_callback = self._select
        self.host, self.port = host, port
        self.max_body = max_body
        #: SO_REUSEPORT: other processes may listen on the same port (replicas on one host)
        self.reuse_port = reuse_port
        self._routes: dict[str, httpserver.Handler] = {path: self._route for path in self.handlers}
        self._listener: listener.Listener | None = None
        self.connections = drain.Connections()
        #: the serving pair set last (None: none yet, requests are answered 503)
        self.certificate: keypairs.KeyPair | None = None

    def url(self, path: str) -> str:
        return f"https://{self.host}:{self.port}{path}"

    async def start(self) -> None:
        sockets = listener.bind(self.host, self.port, reuse_port=self.reuse_port)
        self.port = sockets[0].getsockname()[1]
        self._listener = listener.Listener(sockets, self._accepted)
        self._listener.open()

    def _accepted(self, sock: socket.socket) -> None:
        connection.Connection(
            sock, self._routes, self.connections, ssl_context=self._listening,
            max_body=self.max_body, content_types=(JSON_CONTENT_TYPE,),
        )  # fmt: skip

    async def stop(self, grace: float = 0.0, *, sleep: drain.Sleep = asyncio.sleep) -> drain.Report:
        """Stop listening and drain (:mod:`.drain`): answer every request that comes on the
        connections already open, each with ``Connection: close``, until the API server has let go
        of them all, for up to ``grace`` seconds; then close the idle ones, give the others
        :data:`FINISH_SECONDS` (at most ``grace``) more, and close the rest. ``sleep``: the clock."""
        if self._listener is None:
            return drain.Report()
        taken = self._listener.close()
        self._listener = None
        started = asyncio.get_running_loop().time()
        report = await self.connections.drain(grace, min(grace, FINISH_SECONDS), sleep=sleep)
        log.info(
            "webhook drained",
            extra={
                "taken_from_backlog": taken, "connections": report.open, "answered": report.answered,
                "idle_closed": report.idle_closed, "cut": report.cut,
                "seconds": round(asyncio.get_running_loop().time() - started, 3),
            },
        )  # fmt: skip
        return report

    def set_certificate(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve this pair on new connections from now on (raises, changing nothing, if it is invalid)."""
        self._current = server_context(cert_pem, key_pem)
        self.certificate = keypairs.KeyPair(cert_pem, key_pem)

    def _select(self, conn: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        conn.context = self._current if self._current is not None else self._placeholder

    async def _route(self, method: str, path: str, body: bytes) -> httpserver.Response:
        loop = asyncio.get_running_loop()
        started = loop.time()
        in_flight = self.metrics.in_flight.labels(path)
        in_flight.inc()
        try:
            response = await self._answer(method, path, body)
        finally:
            in_flight.dec()
        self.metrics.requests.labels(path, str(response[0])).inc()
        self.metrics.latency.labels(path).observe(loop.time() - started)
        return response

    async def _answer(self, method: str, path: str, body: bytes) -> httpserver.Response:
        if method != "POST":
            return 405, "text/plain", b"only POST is allowed\n"
        if self._current is None:
            return 503, "text/plain", b"no serving certificate yet\n"
        if not body:
            return 400, "text/plain", b"empty request body\n"
        try:
            return 200, JSON_CONTENT_TYPE, await self.handlers[path](body)
        except Exception:
            log.exception("webhook handler failed", extra={"webhook": path})
            return 500, "text/plain", b"internal error\n"
