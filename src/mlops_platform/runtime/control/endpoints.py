"""The manager's HTTP endpoints (:mod:`~mlops_platform.runtime.control.manager`): ``/healthz`` and
``/readyz`` on the health probe address, ``/metrics`` on the metrics address.

Contract: ``/healthz`` answers 200 while the endpoints run; ``/readyz`` 200 when the manager's
``ready()`` says so, else 503; ``/metrics`` serves the Prometheus registry. An address of ``None``
disables its server; port 0 has the kernel pick one, logged once serving and read from
:attr:`Endpoints.health_port` / :attr:`Endpoints.metrics_port` (None while not serving).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.transport import httpserver

__all__ = ["Endpoints"]

log = logging.getLogger("mlops_platform.runtime.control.manager")


class Endpoints:
    """The probe and metrics servers of one manager run (see the module docstring)."""

    def __init__(
        self,
        ready: Callable[[], bool],
        registry: CollectorRegistry,
        health_probe_address: tuple[str, int] | None,
        metrics_address: tuple[str, int] | None,
    ) -> None:
        self._ready = ready
        self._registry = registry
        self._health_probe_address = health_probe_address
        self._metrics_address = metrics_address
        self._health_server: httpserver.HttpServer | None = None
        self._metrics_server: httpserver.HttpServer | None = None

    @property
    def health_port(self) -> int | None:
        return self._health_server.port if self._health_server else None

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server else None

    async def _healthz(self, method: str, path: str, body: bytes) -> httpserver.Response:
        return 200, "text/plain", b"ok\n"

    async def _readyz(self, method: str, path: str, body: bytes) -> httpserver.Response:
        if self._ready():
            return 200, "text/plain", b"ok\n"
        return 503, "text/plain", b"not ready: caches syncing or not leading\n"

    async def start(self) -> None:
        if self._health_probe_address:
            host, port = self._health_probe_address
            routes: dict[str, httpserver.Handler] = {"/healthz": self._healthz, "/readyz": self._readyz}
            self._health_server = httpserver.HttpServer(routes, host=host, port=port)
        if self._metrics_address:
            host, port = self._metrics_address
            self._metrics_server = rmetrics.metrics_server(self._registry, host, port)
        for what, server in (("health probe", self._health_server), ("metrics", self._metrics_server)):
            if server is not None:
                await server.start()  # port 0: the kernel picks one; the log says which
                log.info("serving", extra={"server": what, "address": f"{server.host}:{server.port}"})

    async def stop(self) -> None:
        for s in (self._health_server, self._metrics_server):
            if s is not None:
                await s.stop()
        self._health_server = self._metrics_server = None
