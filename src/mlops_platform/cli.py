"""The ``mlops-platform`` command line."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import click

from mlops_platform import __version__

F = TypeVar("F", bound=Callable[..., Any])
#: the operator's own image reference (``deploy.manifests.DEFAULT_IMAGE``, spelled here so that the
#: CLI starts without importing the install manifests); ``--storage-initializer-image``'s default
DEFAULT_STORAGE_INITIALIZER_IMAGE = f"mlops-platform:{__version__}"

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from mlops_platform.controllers.inferenceservice.children.base import BuildContext
    from mlops_platform.controllers.inferenceservice.servers import ServingRuntimeTable


def _labels_option(flag: str, dest: str, help: str) -> Callable[[F], F]:
    """A repeatable ``KEY=VALUE`` option collected into a dict (bad items name the option)."""
    return click.option(
        flag,
        dest,
        multiple=True,
        callback=lambda ctx, param, value: _labels(param, value),
        metavar="KEY=VALUE",
        help=f"{help}; repeatable",
    )


def _webhook_options(f: F) -> F:
    """The conversion webhook's flags (``run`` and ``webhook``)."""
    for option in reversed(
        [
            click.option(
                "--webhook-bind-address",
                default="127.0.0.1:9443",
                show_default=True,
                help="where the conversion webhook listens (HTTPS); 'off': not served by this process",
            ),
            click.option(
                "--webhook-secret",
                default="mlops-system/mlops-platform-webhook-tls",
                show_default=True,
                help="NAMESPACE/NAME of the Secret holding the self-managed CA and serving certificate",
            ),
            click.option(
                "--webhook-dns-name",
                "webhook_dns_names",
                multiple=True,
                help="a DNS name of the serving certificate (repeatable; default: the webhook Service's)",
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
                "--webhook-cert-validity",
                type=click.FloatRange(60),
                hidden=True,
                help="seconds a self-managed CA lives (tests: see rotations); default one year",
            ),
        ]
    ):
        f = option(f)
    return f


@click.group()
@click.version_option(__version__, prog_name="mlops-platform")
def main() -> None:
    """mlops-platform: one InferenceService manifest -> a converged model-inference service."""


@main.command()
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, then in-cluster")
@click.option("--context", help="kubeconfig context (default: current)")
@click.option("--namespace", help="watch only this namespace (default: all)")
@click.option("--leader-elect/--no-leader-elect", default=False, show_default=True)
@click.option("--leader-election-namespace", default="mlops-system", show_default=True)
@click.option("--leader-election-id", default="mlops-platform-operator", show_default=True)
@click.option(
    "--lease-duration", default=15.0, show_default=True, help="seconds a Lease is valid without renewal"
)
@click.option("--renew-deadline", default=10.0, show_default=True, help="seconds a holder retries renewing")
@click.option("--retry-period", default=2.0, show_default=True, help="seconds between Lease attempts")
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="partitions of the InferenceServices, each behind its own Lease (implies Leases; 1: no sharding)",
)
@click.option(
    "--shard-id",
    type=int,
    default=None,
    help="hold exactly this partition, in [0, --shards) (default: a fair share, rebalanced live)",
)
@click.option(
    "--health-probe-bind-address",
    default="127.0.0.1:8081",
    show_default=True,
    help="HOST:PORT of /healthz and /readyz; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@click.option(
    "--metrics-bind-address",
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT of /metrics; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@click.option(
    "--runtime-config", type=click.Path(exists=True, dir_okay=False), help="YAML overriding the runtime table"
)
@click.option(
    "--workers",
    default=16,
    show_default=True,
    help="concurrent reconciles (docs/measurements.md, Scale: the worker count)",
)
@click.option(
    "--readiness-requires-leadership/--no-readiness-requires-leadership",
    default=True,
    show_default=True,
    help="with leader election, /readyz is 200 only on the leader (off: every synced replica)",
)
@click.option(
    "--monitoring/--no-monitoring",
    default=True,
    show_default=True,
    help="PrometheusRule + ServiceMonitor per InferenceService where the Prometheus Operator CRDs exist",
)
@_labels_option(
    "--monitoring-label",
    "monitoring_labels",
    "label on every PrometheusRule and ServiceMonitor (what Prometheus' selectors need)",
)
@click.option(
    "--monitoring-namespace",
    default="monitoring",
    show_default=True,
    help="namespace whose pods may scrape the metrics port (NetworkPolicy)",
)
@click.option(
    "--alert-error-ratio",
    type=click.FloatRange(0, 1, min_open=True),
    help="default error-ratio alert threshold (0.05)",
)
@click.option(
    "--alert-latency-seconds",
    type=click.FloatRange(0, min_open=True),
    help="default latency alert threshold in seconds (1.0)",
)
@click.option(
    "--network-policy/--no-network-policy",
    default=False,
    show_default=True,
    help="a NetworkPolicy per InferenceService by default (per-object: spec.extensions.networkPolicy)",
)
@_labels_option(
    "--network-policy-ingress-namespace-label",
    "ingress_namespace_labels",
    "namespaces with these labels may reach the serving ports (mesh/ingress gateways)",
)
@click.option(
    "--network-policy-egress-cidr",
    "egress_cidrs",
    multiple=True,
    callback=lambda ctx, param, value: _cidrs(param, value),
    metavar="CIDR",
    help="restrict predictor egress to these CIDRs plus DNS (default: egress unrestricted); repeatable",
)
@click.option(
    "--traffic-router",
    type=click.Choice(["auto", "istio", "gateway-api", "replicas"]),
    default="auto",
    show_default=True,
    help="what splits canary traffic: auto = Istio if its CRDs are installed, else the Gateway API if "
    "installed and --gateway is set, else replicas (per-object: spec.extensions.traffic.router)",
)
@click.option(
    "--gateway",
    callback=lambda ctx, param, value: _gateway(param, value),
    metavar="NAMESPACE/NAME",
    help="the parent Gateway of the HTTPRoutes of the gateway-api router",
)
@click.option(
    "--ingress-domain",
    default="example.com",
    show_default=True,
    help="HTTPRoute hostnames are <name>.<namespace>.<ingress-domain>",
)
@click.option(
    "--keda-prometheus-url",
    default="http://prometheus-operated.monitoring.svc:9090",
    show_default=True,
    help="the Prometheus that KEDA ScaledObjects (minReplicas 0, KEDA installed) query",
)
@click.option(
    "--keda-requests-per-replica",
    type=click.FloatRange(0, min_open=True),
    default=10.0,
    show_default=True,
    help="requests per second per replica before KEDA adds one",
)
@click.option(
    "--storage-initializer-image",
    default=DEFAULT_STORAGE_INITIALIZER_IMAGE,
    show_default=True,
    help="the image of the init container that fetches s3/gs/http(s) models (python -m "
    "mlops_platform.storage); the install manifests pass the operator's own image",
)
@click.option("--log-level", default="info", show_default=True)
@_webhook_options
def run(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    leader_elect: bool,
    leader_election_namespace: str,
    leader_election_id: str,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    shards: int,
    shard_id: int | None,
    health_probe_bind_address: str,
    metrics_bind_address: str,
    runtime_config: str | None,
    workers: int,
    readiness_requires_leadership: bool,
    monitoring: bool,
    monitoring_labels: dict[str, str],
    monitoring_namespace: str,
    alert_error_ratio: float | None,
    alert_latency_seconds: float | None,
    network_policy: bool,
    ingress_namespace_labels: dict[str, str],
    egress_cidrs: tuple[str, ...],
    traffic_router: str,
    gateway: str | None,
    ingress_domain: str,
    keda_prometheus_url: str,
    keda_requests_per_replica: float,
    storage_initializer_image: str,
    log_level: str,
    webhook_bind_address: str,
    webhook_secret: str,
    webhook_dns_names: tuple[str, ...],
    webhook_cert_dir: str | None,
    webhook_reuse_port: bool,
    webhook_cert_validity: float | None,
) -> None:
    """Run the operator until SIGTERM/SIGINT (graceful: in-flight reconciles finish, Lease released).

    Every replica also serves the conversion webhook at once, leader or not (``--webhook-*``)."""
    from mlops_platform.controllers.inferenceservice import controller
    from mlops_platform.runtime.control import manager as rmanager
    from mlops_platform.runtime.observability import logs
    from mlops_platform.runtime.transport import client as rclient

    _check_leases(lease_duration, renew_deadline, retry_period, shards, shard_id)
    logs.setup_logging(level=log_level)
    settings = _settings(
        runtime_config,
        monitoring=monitoring,
        monitoring_labels=monitoring_labels,
        monitoring_namespace=monitoring_namespace,
        error_ratio=alert_error_ratio,
        latency_seconds=alert_latency_seconds,
        network_policy=network_policy,
        ingress_namespace_labels=ingress_namespace_labels,
        egress_cidrs=egress_cidrs,
        traffic_router=traffic_router,
        gateway=gateway,
        ingress_domain=ingress_domain,
        keda_prometheus_url=keda_prometheus_url,
        keda_requests_per_replica=keda_requests_per_replica,
        storage_initializer_image=storage_initializer_image,
    )

    async def main_async() -> None:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            mgr = rmanager.Manager(
                c,
                rmanager.Options(
                    namespace=namespace,
                    leader_election=leader_elect,
                    leader_election_id=leader_election_id,
                    leader_election_namespace=leader_election_namespace,
                    lease_duration=lease_duration,
                    renew_deadline=renew_deadline,
                    retry_period=retry_period,
                    shards=shards,
                    shard_id=shard_id,
                    health_probe_address=_address(health_probe_bind_address),
                    metrics_address=_address(metrics_bind_address),
                    readiness_requires_leadership=readiness_requires_leadership,
                    gc_freeze_after_sync=True,  # this process runs this one manager
                ),
            )
            controller.setup(mgr, settings=settings, workers=workers)
            hook = _webhook(
                c, webhook_bind_address, webhook_secret, webhook_dns_names, webhook_cert_dir,
                webhook_cert_validity, mgr.metrics.registry, reuse_port=webhook_reuse_port,
            )  # fmt: skip
            if hook is None:
                await mgr.run_until_signal()
                return
            mgr.add_readyz_check("conversion-webhook", hook.ready.is_set)
            serving = asyncio.create_task(hook.run())
            try:
                await mgr.run_until_signal()
            finally:
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving

    asyncio.run(main_async())


def _webhook(
    client: Any,
    bind: str,
    secret: str,
    dns_names: tuple[str, ...],
    cert_dir: str | None,
    validity: float | None,
    registry: Any = None,
    *,
    reuse_port: bool = False,
) -> Any:
    """The conversion webhook the flags describe, or None with ``--webhook-bind-address off``."""
    from pathlib import Path

    from mlops_platform.webhooks import serve

    if bind == "off":
        return None
    address = _address(bind)
    if address is None:
        raise click.BadParameter(f"{bind!r}: HOST:PORT or off", param_hint="--webhook-bind-address")
    namespace, _, name = secret.partition("/")
    if not namespace or not name:
        raise click.BadParameter(f"{secret!r}: NAMESPACE/NAME", param_hint="--webhook-secret")
    options = serve.Options(
        host=address[0],
        port=address[1],
        secret=(namespace, name),
        cert_dir=Path(cert_dir) if cert_dir else None,
        reuse_port=reuse_port,
    )
    if dns_names:
        options = dataclasses.replace(options, dns_names=dns_names)
    if validity:
        options = dataclasses.replace(options, policy=serve.policy_for_tests(validity), period=validity / 40)
    return serve.ConversionWebhook(client, options, registry=registry)


@main.command()
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, then in-cluster")
@click.option("--context", help="kubeconfig context (default: current)")
@click.option("--log-level", default="info", show_default=True)
@click.option(
    "--metrics-bind-address",
    default="0",
    show_default=True,
    help="where /metrics listens (controller_runtime_webhook_*); '0': not served",
)
@_webhook_options
def webhook(
    kubeconfig: str | None,
    context: str | None,
    log_level: str,
    metrics_bind_address: str,
    webhook_bind_address: str,
    webhook_secret: str,
    webhook_dns_names: tuple[str, ...],
    webhook_cert_dir: str | None,
    webhook_reuse_port: bool,
    webhook_cert_validity: float | None,
) -> None:
    """Serve only the conversion webhook until SIGTERM/SIGINT (``run`` serves it too, on every
    replica); for a dedicated webhook Deployment and the local control plane's tests."""
    from prometheus_client import CollectorRegistry

    from mlops_platform.runtime.observability import logs
    from mlops_platform.runtime.observability import metrics as rmetrics
    from mlops_platform.runtime.transport import client as rclient

    logs.setup_logging(level=log_level)
    metrics_address = _address(metrics_bind_address)

    async def main_async() -> None:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            registry = CollectorRegistry()
            hook = _webhook(
                c, webhook_bind_address, webhook_secret, webhook_dns_names, webhook_cert_dir,
                webhook_cert_validity, registry, reuse_port=webhook_reuse_port,
            )  # fmt: skip
            if hook is None:
                raise click.UsageError("--webhook-bind-address off: nothing to serve")
            metrics = rmetrics.metrics_server(registry, *metrics_address) if metrics_address else None
            if metrics is not None:
                await metrics.start()
                logging.getLogger("mlops_platform.cli").info(
                    "metrics listening", extra={"url": f"http://{metrics.host}:{metrics.port}/metrics"}
                )
            task = asyncio.create_task(hook.run())
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

    asyncio.run(main_async())


def _settings(
    runtime_config: str | None,
    *,
    monitoring: bool,
    monitoring_labels: dict[str, str],
    monitoring_namespace: str,
    error_ratio: float | None,
    latency_seconds: float | None,
    network_policy: bool,
    ingress_namespace_labels: dict[str, str],
    egress_cidrs: tuple[str, ...],
    traffic_router: str = "auto",
    gateway: str | None = None,
    ingress_domain: str = "example.com",
    keda_prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090",
    keda_requests_per_replica: float = 10.0,
    storage_initializer_image: str = "",
) -> BuildContext:
    """The operator-wide settings from the ``run`` flags (unset alert flags keep the defaults)."""
    from mlops_platform.controllers.inferenceservice import alert_settings
    from mlops_platform.controllers.inferenceservice.children import base

    defaults = alert_settings.AlertSettings()
    return base.BuildContext(
        servers=_runtime_table(runtime_config),
        monitoring=monitoring,
        monitoring_labels=monitoring_labels,
        alerts=alert_settings.AlertSettings(
            error_ratio=defaults.error_ratio if error_ratio is None else error_ratio,
            latency_seconds=defaults.latency_seconds if latency_seconds is None else latency_seconds,
        ),
        network_policy=network_policy,
        ingress_namespace_labels=ingress_namespace_labels or None,
        monitoring_namespace=monitoring_namespace,
        egress_cidrs=egress_cidrs,
        router=base.Router(traffic_router),
        gateway=gateway,
        ingress_domain=ingress_domain,
        keda_prometheus_url=keda_prometheus_url,
        keda_requests_per_replica=keda_requests_per_replica,
        storage_initializer_image=storage_initializer_image or base.DEFAULT_STORAGE_INITIALIZER_IMAGE,
    )


def _runtime_table(runtime_config: str | None) -> ServingRuntimeTable:
    """The runtime table: the built-in one, with ``--runtime-config`` (a ConfigMap's ``data``) merged."""
    import yaml

    from mlops_platform.controllers.inferenceservice import servers

    if not runtime_config:
        return servers.default_table()
    with open(runtime_config) as f:
        return servers.load_overrides(yaml.safe_load(f) or {})


def _gateway(param: click.Parameter, value: str | None) -> str | None:
    """``--gateway NAMESPACE/NAME``: both parts DNS labels."""
    if value is None:
        return None
    label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    parts = value.split("/")
    if len(parts) != 2 or not all(label.match(p) for p in parts):
        raise click.BadParameter(f"{value!r} must be NAMESPACE/NAME (DNS labels)", param=param)
    return value


def _check_leases(
    lease_duration: float, renew_deadline: float, retry_period: float, shards: int, shard_id: int | None
) -> None:
    """The Lease flags, checked like client-go checks its election config, naming the flags."""
    from mlops_platform.runtime.control import leaderelection

    if retry_period <= 0 or renew_deadline <= 0:
        raise click.UsageError("--retry-period and --renew-deadline must be > 0")
    if lease_duration <= renew_deadline:
        raise click.UsageError("--lease-duration must be greater than --renew-deadline")
    if renew_deadline <= leaderelection.JITTER_FACTOR * retry_period:
        raise click.UsageError(
            f"--renew-deadline must be greater than {leaderelection.JITTER_FACTOR} * --retry-period"
        )
    if shard_id is not None and shards == 1:
        raise click.UsageError("--shard-id needs --shards > 1")
    if shard_id is not None and not 0 <= shard_id < shards:
        raise click.UsageError(f"--shard-id must be in [0, --shards) = [0, {shards}), got {shard_id}")


def _labels(param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param=param)
        out[key] = value
    return out


def _cidrs(param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    import ipaddress

    try:
        return tuple(str(ipaddress.ip_network(v, strict=False)) for v in values)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


def _address(value: str) -> tuple[str, int] | None:
    if value in ("0", ""):
        return None
    host, _, port = value.rpartition(":")
    return (host or "127.0.0.1", int(port))


@main.command()
@click.option("--namespace", default="mlops-system", show_default=True, help="the operator's namespace")
@click.option(
    "--watch-namespace", "watch_namespaces", multiple=True, help="watch only these (namespaced RBAC)"
)
@click.option("--image", default=None, help="operator image (default: mlops-platform:<version>)")
@click.option("--replicas", default=2, show_default=True)
def manifests(namespace: str, watch_namespaces: tuple[str, ...], image: str | None, replicas: int) -> None:
    """Print the full install set (Namespace, CRD, RBAC, Deployment, PDB, Service) as YAML."""
    from mlops_platform.deploy import manifests as m

    kwargs = {"image": image} if image else {}
    click.echo(
        m.render(
            namespace=namespace, watch_namespaces=list(watch_namespaces) or None, replicas=replicas, **kwargs
        ),
        nl=False,
    )


@main.command(name="why")
@click.argument("name")
@click.option("-n", "--namespace", help="default: the kubeconfig context's namespace, else default")
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True, help="format"
)
@click.option(
    "--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, ~/.kube/config, in-cluster"
)
@click.option("--context", help="kubeconfig context (default: current)")
@click.option(
    "--traffic-router",
    type=click.Choice(["auto", "istio", "gateway-api", "replicas"]),
    default="auto",
    show_default=True,
    help="the operator's --traffic-router (must match it)",
)
@click.option(
    "--gateway",
    callback=lambda ctx, param, value: _gateway(param, value),
    metavar="NAMESPACE/NAME",
    help="the operator's --gateway (must match it)",
)
@click.option(
    "--ingress-domain", default="example.com", show_default=True, help="the operator's --ingress-domain"
)
@click.option(
    "--runtime-config",
    type=click.Path(exists=True, dir_okay=False),
    help="the operator's --runtime-config (runtimes it adds are otherwise unknown here)",
)
@click.option(
    "--storage-initializer-image",
    default=DEFAULT_STORAGE_INITIALIZER_IMAGE,
    show_default=True,
    help="the operator's --storage-initializer-image (an installed operator passes its own image)",
)
@click.option(
    "--events",
    "max_events",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="newest Events shown",
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
    runtime_config: str | None,
    storage_initializer_image: str,
    max_events: int,
) -> None:
    """Why NAME is (not) serving: conditions, what the operator would change now, pods, Events.

    Reads the API only (read-only RBAC: docs/why.md). The child comparison assumes the operator's
    default settings; pass the operator's --traffic-router/--gateway/--ingress-domain/--runtime-config/
    --storage-initializer-image when they differ.
    """
    from mlops_platform import why
    from mlops_platform.controllers.inferenceservice import servers
    from mlops_platform.controllers.inferenceservice.children import base

    try:
        table = _runtime_table(runtime_config)
    except servers.ServingRuntimeError as e:
        raise click.ClickException(f"--runtime-config: {e}") from None
    ctx = base.BuildContext(
        servers=table,
        router=base.Router(traffic_router),
        gateway=gateway,
        ingress_domain=ingress_domain,
        storage_initializer_image=storage_initializer_image,
    )
    try:
        report = asyncio.run(why.collect(kubeconfig, context, namespace, name, ctx, max_events=max_events))
    except why.WhyError as e:
        raise click.ClickException(str(e)) from None
    if output == "json":
        click.echo(json.dumps(why.to_json(report), indent=2))
        return
    color = why.use_color(sys.stdout)
    click.echo(why.render_text(report, width=why.terminal_width(), color=color), nl=False, color=color)


@main.command(name="infer")
@click.argument("name")
@click.option("-n", "--namespace", help="default: the kubeconfig context's namespace, else default")
@click.option("--json", "body", metavar="BODY", help="the request body (JSON)")
@click.option(
    "--file", "body_file", type=click.File("r"), help="a file holding the request body (JSON; - for stdin)"
)
@click.option("--model", help="the model's name in the server (default: NAME)")
@click.option(
    "--path", help="the server's inference path (default: the runtime's; {model} is the model's name)"
)
@click.option(
    "--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, ~/.kube/config, in-cluster"
)
@click.option("--context", help="kubeconfig context (default: current)")
def infer_command(
    name: str,
    namespace: str | None,
    body: str | None,
    body_file: TextIO | None,
    model: str | None,
    path: str | None,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Send one inference request to NAME through the API server and print the answer.

    The runtime's protocol: Open Inference Protocol v2 (MLServer, Triton: POST
    /v2/models/NAME/infer), TorchServe's /predictions/NAME. Exits 1 with the server's error when
    the request fails. Example: mlops-platform infer iris -n ml --json
    '{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [6.8, 2.8, 4.8, 1.4]}]}'
    """
    from mlops_platform import infer
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.why import command as why_command_io

    if (body is None) == (body_file is None):
        raise click.UsageError("give the request body with exactly one of --json and --file")
    text = body if body is not None else body_file.read() if body_file is not None else ""
    try:
        request = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(
            f"not JSON: {e}", param_hint="--json" if body is not None else "--file"
        ) from None

    async def send() -> Any:
        ns = namespace or why_command_io.default_namespace(kubeconfig, context)
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            return await infer.infer(c, name, ns, request, model=model, path=path)

    try:
        answer = asyncio.run(send())
    except infer.InferError as e:
        raise click.ClickException(str(e)) from None
    except rclient.TransportError as e:
        raise click.ClickException(f"the API server: {e}") from None
    click.echo(answer if isinstance(answer, str) else json.dumps(answer, indent=2))


@main.group()
def dev() -> None:
    """The local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes)."""


_name = click.option("--name", default="mlops-dev", show_default=True, help="cluster name")


@dev.command()
@_name
@click.option(
    "--without-crds", is_flag=True, help="leave the third-party CRDs out (optional-CRD-absent tests)"
)
@click.option("--wait", default=180.0, show_default=True, help="seconds to wait for readiness")
@click.option(
    "--nodes",
    "cpu_nodes",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="fake CPU nodes, 250 pods each (besides the 2 GPU nodes); added to a running cluster too",
)
@click.option(
    "--real-nodes",
    type=click.IntRange(min=0, max=10),
    default=1,
    show_default=True,
    help="real worker nodes (kubelet, containerd, kube-proxy in namespaces of their own; tainted: only "
    "pods that tolerate mlops.platform/real-node run there); added to a running cluster too; 0 for "
    "scale benchmarks",
)
@click.option(
    "--unthrottled",
    is_flag=True,
    help="no client QPS limits in controller-manager and scheduler, no in-flight limits in the API "
    "server (scale benchmarks; applies when the cluster is created)",
)
@click.option(
    "--without-metrics-server",
    is_flag=True,
    help="no metrics-server (no metrics API: kubectl top and HPAs fail) and upstream's HPA timing "
    "(15 s sync, 5 min downscale stabilization); applies when the cluster is created",
)
def up(
    name: str,
    without_crds: bool,
    wait: float,
    cpu_nodes: int,
    real_nodes: int,
    unthrottled: bool,
    without_metrics_server: bool,
) -> None:
    """Start the local cluster (idempotent) and print its kubeconfig path."""
    from mlops_platform.devcluster import cluster

    click.echo(
        cluster.up(
            name,
            install_crds=not without_crds,
            wait=wait,
            cpu_nodes=cpu_nodes,
            real_nodes=real_nodes,
            unthrottled=unthrottled,
            metrics_server=not without_metrics_server,
        )
    )


def _fraction(value: str | None) -> float | None:
    """``90%``, ``90`` -> 0.9 (of the request)."""
    if value is None:
        return None
    try:
        return float(value.strip().removesuffix("%")) / 100
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 90%)") from None


@dev.command()
@_name
@click.argument("inferenceservice")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--cpu", help="CPU use of each pod, in % of its CPU request (e.g. 150%)")
@click.option("--memory", help="memory use of each pod, in % of its memory request")
@click.option("--clear", is_flag=True, help="back to idle (1m CPU, 1Mi memory)")
def load(
    name: str, inferenceservice: str, namespace: str, cpu: str | None, memory: str | None, clear: bool
) -> None:
    """Simulate the CPU/memory use of an InferenceService's pods (kwok resource usage): what
    metrics-server, `kubectl top` and the HPA see. Prints the simulated loads of the cluster."""
    from mlops_platform.devcluster import cluster, usage
    from mlops_platform.runtime.transport import client as rclient

    if clear == (cpu is not None or memory is not None):
        raise click.UsageError("give --cpu and/or --memory, or --clear")
    row = usage.for_inferenceservice(
        namespace, inferenceservice, cpu=_fraction(cpu), memory=_fraction(memory)
    )

    async def run() -> list[usage.Load]:
        async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
            return await (usage.clear_load(c, row) if clear else usage.set_load(c, row))

    for r in asyncio.run(run()):
        parts = [f"{k} {v:.0%}" for k, v in (("cpu", r.cpu), ("memory", r.memory)) if v is not None]
        selector = ",".join(f"{k}={v}" for k, v in r.selector)
        click.echo(f"{r.namespace}\t{selector}\t{', '.join(parts)} of request")


@dev.command(name="import-image")
@_name
@click.argument("images", nargs=-1, required=True)
def import_image(name: str, images: tuple[str, ...]) -> None:
    """Build (or take from the cache) local images and import them into every real node, e.g.
    `dev import-image mlserver`. Prints each image's reference (use it with imagePullPolicy
    IfNotPresent)."""
    from mlops_platform.devcluster import cluster

    try:
        refs = cluster.import_images(name, list(images))
    except (ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    for ref in refs:
        click.echo(ref)


@dev.command(name="model-store")
@_name
@click.option(
    "--grant", "namespaces", multiple=True, help="a namespace that gets the store's Secret (repeatable)"
)
def model_store(name: str, namespaces: tuple[str, ...]) -> None:
    """Run the model store (MinIO on the real node, in mlops-models) with the demo models trained
    and uploaded: s3://models/iris/1, iris/2, xgboost-iris/1, broken/1. Idempotent. With --grant,
    those namespaces get the Secret `model-store` that storage.secretName names."""
    import asyncio

    from mlops_platform.devcluster import cluster
    from mlops_platform.devcluster.modelstore import install, manifests

    try:
        install.install(name)
    except (ValueError, RuntimeError, TimeoutError) as e:
        raise click.ClickException(str(e)) from None
    if namespaces:
        asyncio.run(install.grant_all(cluster.kubeconfig_path(name), list(namespaces)))
    click.echo(f"endpoint {manifests.ENDPOINT}  bucket {manifests.BUCKET}  secret {manifests.CLIENT_SECRET}")


@dev.command()
@_name
def down(name: str) -> None:
    """Stop and delete the local cluster; no process is left behind."""
    from mlops_platform.devcluster import cluster

    cluster.down(name)


@dev.command()
@_name
def status(name: str) -> None:
    """Print the cluster's state as JSON (exit 1 when its API server is not ready)."""
    from mlops_platform.devcluster import cluster

    st = cluster.status(name)
    click.echo(json.dumps(st, indent=2))
    sys.exit(0 if st["apiserver_ready"] else 1)


@dev.command()
@_name
def kubeconfig(name: str) -> None:
    """Print the kubeconfig path (export KUBECONFIG=$(mlops-platform dev kubeconfig))."""
    from mlops_platform.devcluster import cluster

    if not cluster.exists(name):
        raise click.ClickException(
            f"cluster {name!r} does not exist; run `mlops-platform dev up --name {name}`"
        )
    click.echo(cluster.kubeconfig_path(name))


@dev.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_name
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def kubectl(name: str, args: tuple[str, ...]) -> None:
    """Run the pinned kubectl against the cluster."""
    from mlops_platform.devcluster import cluster

    sys.exit(cluster.kubectl(name, list(args)))


@dev.command(name="stop-operator")
@_name
def stop_operator(name: str) -> None:
    """Stop the operator that `mlops-platform demo` started (SIGTERM, graceful)."""
    from mlops_platform.devcluster import demo as demo_mod

    demo_mod.stop_operator(name)


@main.command()
@_name
@click.option("--timeout", default=180.0, show_default=True, help="seconds to wait for the samples")
def demo(name: str, timeout: float) -> None:
    """Local cluster + CRD + operator + config/samples, waited on until each reaches its state."""
    from mlops_platform.devcluster import demo as demo_mod

    demo_mod.run(name, timeout=timeout)


@dev.command()
def build() -> None:
    """Build (or find cached) control-plane binaries and print their paths."""
    from mlops_platform.devcluster import binaries

    for name, path in binaries.find().paths.items():
        click.echo(f"{name}\t{path}")


@main.command(name="migrate-storage")
@click.option(
    "--crd",
    "crd_name",
    default="inferenceservices.mlops.platform",
    show_default=True,
    help="the CustomResourceDefinition whose objects are rewritten at its storage version",
)
@click.option(
    "--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, ~/.kube/config, in-cluster"
)
@click.option("--context", help="kubeconfig context (default: current)")
@click.option(
    "--method",
    type=click.Choice(["auto", "builtin", "rewrite"]),
    default="auto",
    show_default=True,
    help="builtin: a StorageVersionMigration (storagemigration.k8s.io) done by kube-controller-manager; "
    "rewrite: PUT every object back; auto: builtin where served and acted on, else rewrite",
)
@click.option(
    "--timeout", default=1800.0, show_default=True, help="seconds for the whole migration before giving up"
)
def migrate_storage(
    crd_name: str, kubeconfig: str | None, context: str | None, method: str, timeout: float
) -> None:
    """Rewrite every object of a CRD at its storage version, then trim status.storedVersions to it.

    Run it after a release changes the storage version, before a later one stops serving the old
    version. Safe to interrupt and run again: storedVersions changes only after every object was
    migrated. RBAC it needs: docs/storage-migration.md.
    """
    import time

    from mlops_platform.runtime.control import storagemigration as sm
    from mlops_platform.runtime.transport import client as rclient

    started = time.monotonic()
    shown_phase, shown_at = "", 0.0

    def progress(p: sm.Progress) -> None:
        # a line on each phase change, then at most one every 2 s
        nonlocal shown_phase, shown_at
        now = time.monotonic()
        if p.phase == shown_phase and now - shown_at < 2.0:
            return
        shown_phase, shown_at = p.phase, now
        if p.phase == "rewriting":
            of = f"/{p.total}" if p.total is not None else ""
            line = (
                f"rewriting: {p.seen}{of} objects ({p.rewritten} rewritten, {p.unchanged} already current, "
                f"{p.conflicts} conflicts, {p.gone} gone, {p.failed} failed)"
            )
        elif p.phase == "waiting":
            line = f"waiting: {p.message}"
        else:
            line = "trimming status.storedVersions"
        click.echo(f"[migrate {now - started:6.1f}s] {line}", err=True)

    async def run() -> sm.MigrationResult:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            how = cast("sm.Method", method)  # one of click's choices
            return await sm.migrate(c, crd_name, method=how, progress=progress, timeout=timeout)

    try:
        result = asyncio.run(run())
    except sm.MigrationError as e:
        raise click.ClickException(f"{crd_name}: {e}") from None
    except TimeoutError:
        raise click.ClickException(
            f"{crd_name}: not done within {timeout:.0f}s; storedVersions left as they were (run it again)"
        ) from None
    except (rclient.ApiError, rclient.TransportError, ValueError, OSError) as e:
        raise click.ClickException(f"{crd_name}: {e}; storedVersions left as they were") from None
    click.echo(result.summary())


@click.group(name="kubectl mlops")
@click.version_option(__version__, prog_name="kubectl-mlops")
def plugin() -> None:
    """The kubectl plugin of mlops-platform: kubectl mlops why NAME [-n NAMESPACE], kubectl mlops
    infer NAME [-n NAMESPACE] --json BODY."""


plugin.add_command(why_command)
plugin.add_command(infer_command)


def kubectl_plugin() -> None:
    """The ``kubectl-mlops`` executable: kubectl runs it for ``kubectl mlops ...``."""
    plugin(prog_name="kubectl mlops")


if __name__ == "__main__":
    main()
