"""The activator process: the proxy and admin servers and the parking loop, until stopped."""

from __future__ import annotations

import contextlib

import prometheus_client
from aiohttp import web

from mlops_platform.activator import parking, server, waiting
from mlops_platform.activator.target import Target
from mlops_platform.runtime.transport import client as rclient


async def run(
    kubeconfig: str | None,
    context: str | None,
    namespace: str,
    service: str,
    proxy_port: int,
    admin_port: int,
    hold: float,
    bind_address: str,
) -> None:
    room = waiting.Room()
    metrics = server.Metrics(prometheus_client.CollectorRegistry())
    async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as client:
        parker = parking.Parking(client, room, namespace, service, proxy_port)
        runners = [
            web.AppRunner(
                server.proxy_app(room, metrics, hold=hold, own=Target(namespace, service)), access_log=None
            ),
            web.AppRunner(server.admin_app(room, metrics, parker.waiting_for), access_log=None),
        ]
        for runner, port in zip(runners, (proxy_port, admin_port), strict=True):
            await runner.setup()
            await web.TCPSite(runner, bind_address, port).start()
        try:
            await parker.run()
        finally:
            for runner in runners:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
