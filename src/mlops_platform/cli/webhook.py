"""``mlops-platform webhook``: the conversion webhook alone, and the webhook flags ``run`` shares."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from typing import Any

import click

from mlops_platform.cli import options

#: ``--webhook-secret``'s default: ``mlops_platform.webhooks.serve.SECRET`` (not imported: the CLI
#: starts fast; a unit test keeps them equal)
SECRET_DEFAULT = "mlops-system/mlops-platform-webhook-tls"

#: the conversion webhook's flags (``run`` and ``webhook``)
webhook_options = options.stack(
    options.address_option(
        "--webhook-bind-address",
        default="127.0.0.1:9443",
        off="off",
        help="where the conversion webhook listens (HTTPS, HOST:PORT); 'off': not served by this process",
    ),
    click.option(
        "--webhook-secret",
        default=SECRET_DEFAULT,
        help="NAMESPACE/NAME of the Secret holding the self-managed CA and serving certificate",
    ),
    click.option(
        "--webhook-dns-name",
        "webhook_dns_names",
        multiple=True,
        help="a DNS name of the serving certificate (repeatable; default: the webhook Service's)",
    ),
    click.option(
        "--webhook-ip-address",
        "webhook_ip_addresses",
        multiple=True,
        callback=lambda ctx, param, value: _parse_ips(param, value),
        metavar="IP",
        help="an IP address of the serving certificate besides 127.0.0.1 (repeatable): the API "
        "server calls the webhook at https://IP:PORT/convert",
    ),
    click.option(
        "--webhook-cert-dir",
        type=click.Path(file_okay=False),
        help="serve tls.crt/tls.key from this directory (cert-manager); no Secret, no injection",
    ),
    click.option(
        "--webhook-reuse-port",
        is_flag=True,
        help="share the webhook's port with other processes on this host (SO_REUSEPORT): "
        "replicas on one machine behind one address, the kernel spreading connections",
    ),
    click.option(
        "--webhook-shutdown-delay",
        type=click.FloatRange(0),
        default=0.0,
        show_default=True,
        help="seconds the webhook keeps accepting new connections after SIGTERM before it drains: "
        "behind a Service, until every kube-proxy has dropped the terminating pod (the install "
        "sets 5)",
    ),
    click.option(
        "--webhook-cert-validity",
        type=click.FloatRange(60),
        hidden=True,
        help="seconds a self-managed CA lives (tests: see rotations); default one year",
    ),
)


async def serve(hook: Any, flags: WebhookFlags) -> None:
    """``hook.run()``: the conversion webhook until cancelled; its address taken (or not this host's):
    a ClickException naming ``--webhook-bind-address``."""
    try:
        await hook.run()
    except OSError as e:
        if e.errno not in options.CANNOT_LISTEN:
            raise
        raise options.cannot_listen(e, webhook_bind_address=flags.webhook_bind_address) from None


@dataclasses.dataclass(frozen=True)
class WebhookFlags:
    """The ``--webhook-*`` flags (``run`` and ``webhook``)."""

    webhook_bind_address: str
    webhook_secret: str
    webhook_dns_names: tuple[str, ...]
    webhook_cert_dir: str | None
    webhook_reuse_port: bool
    webhook_cert_validity: float | None
    webhook_ip_addresses: tuple[str, ...] = ()
    webhook_shutdown_delay: float = 0.0


def _parse_ips(param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    import ipaddress

    try:
        return tuple(str(ipaddress.ip_address(v)) for v in values)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


def build(client: Any, flags: WebhookFlags, registry: Any) -> Any:
    """The conversion webhook the flags describe, or None with ``--webhook-bind-address off``."""
    from pathlib import Path

    from mlops_platform.webhooks import serve

    bind, secret, validity = flags.webhook_bind_address, flags.webhook_secret, flags.webhook_cert_validity
    if bind == "off":
        return None
    try:
        address = options.parse_address(bind)
    except ValueError as e:
        raise click.BadParameter(f"{bind!r}: {e}", param_hint="--webhook-bind-address") from None
    if address is None:
        raise click.BadParameter(f"{bind!r}: HOST:PORT or off", param_hint="--webhook-bind-address")
    namespace, _, name = secret.partition("/")
    if not namespace or not name:
        raise click.BadParameter(f"{secret!r}: NAMESPACE/NAME", param_hint="--webhook-secret")
    serving = serve.Options(
        host=address[0],
        port=address[1],
        secret=(namespace, name),
        cert_dir=Path(flags.webhook_cert_dir) if flags.webhook_cert_dir else None,
        reuse_port=flags.webhook_reuse_port,
        shutdown_delay=flags.webhook_shutdown_delay,
    )
    if flags.webhook_dns_names:
        serving = dataclasses.replace(serving, dns_names=flags.webhook_dns_names)
    if flags.webhook_ip_addresses:
        ips = tuple(dict.fromkeys((*serving.ip_addresses, *flags.webhook_ip_addresses)))
        serving = dataclasses.replace(serving, ip_addresses=ips)
    if validity:
        serving = dataclasses.replace(serving, policy=serve.policy_for_tests(validity), period=validity / 40)
    return serve.ConversionWebhook(client, serving, registry=registry)


@click.command()
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@click.option("--log-level", default="info")
@options.address_option(
    "--metrics-bind-address",
    default="0",
    off="0",
    help="where /metrics listens (HOST:PORT; controller_runtime_webhook_*); '0': not served",
)
@webhook_options
def webhook(
    kubeconfig: str | None, context: str | None, log_level: str, metrics_bind_address: str, **flags: Any
) -> None:
    """Serve only the conversion webhook until SIGTERM/SIGINT (``run`` serves it too, on every
    replica); for a dedicated webhook Deployment and the local control plane's tests."""
    from mlops_platform.runtime.observability import logs

    logs.setup_logging(level=log_level)
    metrics_address = options.parse_address(metrics_bind_address)
    try:
        asyncio.run(_serve(kubeconfig, context, metrics_address, WebhookFlags(**flags)))
    except OSError as e:  # /metrics could not listen (the webhook's own address: serve())
        if e.errno not in options.CANNOT_LISTEN:
            raise
        raise options.cannot_listen(e, metrics_bind_address=metrics_bind_address) from None


async def _serve(
    kubeconfig: str | None, context: str | None, metrics_address: tuple[str, int] | None, flags: WebhookFlags
) -> None:
    """The conversion webhook, and /metrics at ``metrics_address``, until SIGTERM/SIGINT."""
    from prometheus_client import CollectorRegistry

    from mlops_platform.runtime.observability import metrics as rmetrics
    from mlops_platform.runtime.transport import client as rclient

    async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
        registry = CollectorRegistry()
        hook = build(c, flags, registry)
        if hook is None:
            raise click.UsageError("--webhook-bind-address off: nothing to serve")
        metrics = rmetrics.metrics_server(registry, *metrics_address) if metrics_address else None
        if metrics is not None:
            await metrics.start()
            logging.getLogger("mlops_platform.cli").info(
                "metrics listening", extra={"url": f"http://{metrics.host}:{metrics.port}/metrics"}
            )
        task = asyncio.create_task(serve(hook, flags))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await asyncio.wait({task, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if metrics is not None:
            await metrics.stop()
