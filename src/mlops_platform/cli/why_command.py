"""``mlops-platform why``: why an InferenceService is (not) serving (also ``kubectl mlops why``)."""

from __future__ import annotations

import asyncio
import json
import sys

import click

from mlops_platform import promapi
from mlops_platform.cli import options, settings


def _prometheus(value: str) -> promapi.Server | None:
    if value == "none":
        return None
    try:
        return promapi.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--prometheus") from None


@click.command(name="why")
@click.argument("name")
@options.namespace_option
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", help="format")
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@settings.option("--traffic-router", "the operator's --traffic-router (must match it)")
@settings.option("--gateway", "the operator's --gateway (must match it)")
@settings.option("--ingress-domain", "the operator's --ingress-domain")
@settings.option("--activator", "the operator's --activator")
@settings.option("--scrape-interval", "the operator's --scrape-interval")
@settings.option(
    "--runtime-config", "the operator's --runtime-config (runtimes it adds are otherwise unknown here)"
)
@settings.option(
    "--storage-initializer-image",
    "the operator's --storage-initializer-image (an installed operator passes its own image)",
)
@click.option("--events", "max_events", type=click.IntRange(min=0), default=20, help="newest Events shown")
@click.option(
    "--prometheus",
    default=str(promapi.DEFAULT),
    show_default=True,
    callback=lambda ctx, param, value: _prometheus(value),
    help="the Prometheus Service asked for the alerts and scrape targets of an InferenceService with "
    "monitoring, NAMESPACE/SERVICE:PORT, read through the API server's service proxy; 'none' to skip",
)
def why_command(
    name: str,
    namespace: str | None,
    output: str,
    kubeconfig: str | None,
    context: str | None,
    traffic_router: str,
    gateway: str | None,
    ingress_domain: str,
    activator: str | None,
    scrape_interval: str,
    runtime_config: str | None,
    storage_initializer_image: str,
    max_events: int,
    prometheus: promapi.Server | None,
) -> None:
    """Why NAME is (not) serving: conditions, what the operator would change now, pods, Events.

    Reads the API only (read-only RBAC: docs/why.md). The child comparison assumes the operator's
    default settings; pass the operator's --traffic-router/--gateway/--ingress-domain/--scrape-interval/
    --runtime-config/--storage-initializer-image when they differ.
    """
    from mlops_platform import why
    from mlops_platform.controllers.inferenceservice import runtime_overrides
    from mlops_platform.controllers.inferenceservice.children import base

    try:
        table = settings.runtime_table(runtime_config)
    except runtime_overrides.ServingRuntimeError as e:
        raise click.ClickException(f"--runtime-config: {e}") from None
    ctx = base.BuildContext(
        servers=table,
        router=base.Router(traffic_router),
        gateway=gateway,
        ingress_domain=ingress_domain,
        activator=activator,
        scrape_interval=scrape_interval,
        storage_initializer_image=storage_initializer_image,
    )
    try:
        report = asyncio.run(
            why.collect(
                kubeconfig, context, namespace, name, ctx, max_events=max_events, prometheus=prometheus
            )
        )
    except why.WhyError as e:
        raise click.ClickException(str(e)) from None
    if output == "json":
        click.echo(json.dumps(why.to_json(report), indent=2))
        return
    color = why.use_color(sys.stdout)
    click.echo(why.render_text(report, width=why.terminal_width(), color=color), nl=False, color=color)
