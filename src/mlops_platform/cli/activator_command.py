"""``mlops-platform activator``: the activator process, which the install set runs beside a
cluster-wide operator (docs/autoscaling.md, "Wake from zero without a mesh: the activator")."""

from __future__ import annotations

import asyncio

import click

from mlops_platform.activator import contract
from mlops_platform.cli import options


@click.command(name="activator")
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@click.option("--namespace", required=True, help="the activator's namespace (its pods' and Service's)")
@click.option("--service", default="mlops-activator", help="the activator's own Service (port 'proxy')")
@click.option(
    "--proxy-port",
    type=click.IntRange(1, 65535),
    default=contract.PROXY_PORT,
    help="where requests are proxied",
)
@click.option(
    "--admin-port",
    type=click.IntRange(1, 65535),
    default=contract.ADMIN_PORT,
    help="/healthz, /v1/held, /metrics",
)
@click.option(
    "--hold", type=click.FloatRange(min=1), default=300.0, help="seconds a request waits for a replica"
)
@click.option("--bind-address", default="0.0.0.0", help="the address both servers listen on (its pod's)")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def activator(
    kubeconfig: str | None,
    context: str | None,
    namespace: str,
    service: str,
    proxy_port: int,
    admin_port: int,
    hold: float,
    bind_address: str,
    log_level: str,
) -> None:
    """Hold requests to Services parked at zero until their model has a ready replica."""
    from mlops_platform.activator import process
    from mlops_platform.runtime.observability import logs

    logs.setup_logging(level=log_level.upper())
    asyncio.run(
        process.run(kubeconfig, context, namespace, service, proxy_port, admin_port, hold, bind_address)
    )
